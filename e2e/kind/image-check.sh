#!/usr/bin/env bash
# Builds the repository's Dockerfile and checks the image: the binary runs (`version`), as the
# non-root user, with the OCI version label. Needs Docker. Without Docker it prints SKIPPED and
# exits 77: a skip, not a pass. Usage: e2e/kind/image-check.sh [tag]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tag="${1:-unisched:check}"
if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
    echo "SKIPPED: no Docker engine here; the image was not built (this is not a pass)" >&2
    exit 77
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
docker build -t "$tag" --build-arg VERSION="$version" "$root"
out="$(docker run --rm "$tag" version)"
[ "$out" = "unisched $version" ] || { echo "FAIL: version printed $out" >&2; exit 1; }
user="$(docker image inspect -f '{{.Config.User}}' "$tag")"
[ "$user" = "65532:65532" ] || { echo "FAIL: image user $user" >&2; exit 1; }
label="$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$tag")"
[ "$label" = "$version" ] || { echo "FAIL: version label $label" >&2; exit 1; }
echo "ok: $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
