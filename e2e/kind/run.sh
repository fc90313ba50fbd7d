#!/usr/bin/env bash
# Runs unisched in a real kind cluster and checks that it schedules: the quickstart's plain pods
# and, when a DRA driver is installed, its claims. Needs docker, kind and kubectl; cannot run in
# the project's CI (no Docker there). Usage: e2e/kind/run.sh [image]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
image="${1:-unisched:dev}"
cluster="${KIND_CLUSTER:-unisched-e2e}"

for tool in docker kind kubectl; do
    command -v "$tool" >/dev/null || { echo "error: $tool not found" >&2; exit 2; }
done

echo "== build $image (the repository's Dockerfile, with deploy/image/build)"
CONTAINER_TOOL=docker "$root/deploy/image/build" -t "$image"

echo "== cluster $cluster"
kind get clusters | grep -qx "$cluster" || kind create cluster --name "$cluster" --config "$here/kind-config.yaml"
kind load docker-image "$image" --name "$cluster"

echo "== deploy"
kubectl apply -k "$root/deploy/manifests"
kubectl -n unisched-system set image deployment/unisched unisched="$image"
kubectl -n unisched-system rollout status deployment/unisched --timeout=120s
kubectl -n unisched-system get lease unisched -o jsonpath='{.spec.holderIdentity}{"\n"}'

echo "== schedule"
kubectl create namespace unisched-e2e --dry-run=client -o yaml | kubectl apply -f -
for i in 1 2 3; do
    kubectl -n unisched-e2e apply -f - <<POD
apiVersion: v1
kind: Pod
metadata: {name: e2e-$i}
spec:
  schedulerName: unisched
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 10m}}}]
POD
done
kubectl -n unisched-e2e wait --for=condition=PodScheduled pod --all --timeout=60s
kubectl -n unisched-e2e get pods -o wide
kubectl get events.events.k8s.io -n unisched-e2e --field-selector reason=Scheduled

if kubectl get deviceclass >/dev/null 2>&1 && [ "$(kubectl get resourceslices -o name | wc -l)" -gt 0 ]; then
    echo "== DRA: a driver publishes slices; scheduling the quickstart's claims"
    kubectl create namespace demo --dry-run=client -o yaml | kubectl apply -f -
    kubectl apply -f "$root/examples/quickstart/02-workloads.yaml"
    kubectl -n demo get pods -o wide
fi
echo "ok"
