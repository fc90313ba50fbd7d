# unisched container image: one static binary on an empty base.
#
#   deploy/image/build -t registry.example/unisched:0.1.0
#
# The build context is not the repository but the directory deploy/image/build assembles:
#   unisched              the x86_64-unknown-linux-musl release binary, stripped (static: musl
#                         libc, jemalloc and ring linked in; TLS is rustls, so no OpenSSL)
#   ca-certificates.crt   the build machine's CA bundle (TLS to the API server uses the kubeconfig's
#                         or the ServiceAccount's CA; the bundle is there for anything else)
#   passwd, group         deploy/image/passwd and group: the non-root user 65532 ("nonroot")
# So the image builds with no base image to pull and no compiler inside it, with podman or
# docker alike; the binary is the one the tests ran. The Deployment runs it as 65532 with a
# read-only root filesystem, which it fits: it writes nothing but its stdout and stderr.

FROM scratch
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="unisched" \
      org.opencontainers.image.description="A Kubernetes scheduler with one ledger for node resources and devices" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY passwd group /etc/
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY unisched /usr/local/bin/unisched
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/unisched"]
