#!/usr/bin/env bash
# make kind-e2e: gangsched in a real (kind) cluster, from image to placement.
#
#  1. build the image, create a kind cluster whose 4 workers form 2 blocks x 2 racks
#     (node labels example.com/block, example.com/rack), load the image into it;
#  2. kubectl apply -f crds/ && kubectl apply -k manifests/, wait for the Deployment and
#     for one replica to hold the Lease;
#  3. give every worker 4 fake GPUs: kind has no GPUs, so nvidia.com/gpu is added to the
#     node status (capacity and allocatable) with a patch on the status subresource, the
#     documented way to advertise an extended resource; the kubelet keeps it and admits
#     pods that request it (no device plugin is involved);
#  4. run examples/training-job.yaml scaled down to kind through a kustomize overlay
#     (1 GPU per worker, tiny cpu/memory requests, the pause image instead of PyTorch):
#     8 workers x 1 GPU + a launcher. A rack has 4 GPUs, a block 8: the gang must land
#     in ONE block (Required) and in its two racks, no more (Preferred);
#  5. print where each pod went and the PodGroup, and delete the cluster on exit.
#
# Environment: IMAGE (gangsched:dev), KIND_CLUSTER (gangsched-e2e), KIND_NODE_IMAGE
# (kind's default), KEEP_CLUSTER=1 to keep the cluster for a look, E2E_TIMEOUT (180 s).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-gangsched:dev}
CLUSTER=${KIND_CLUSTER:-gangsched-e2e}
TIMEOUT=${E2E_TIMEOUT:-180}
NS=e2e
GROUP=llm-train
GPUS_PER_NODE=4
BLOCK=example.com/block
RACK=example.com/rack

say() { echo "kind-e2e: $*"; }
die() { echo "kind-e2e: FAIL: $*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "docker not found; install Docker (https://docs.docker.com/get-docker/)"
docker info >/dev/null 2>&1 || die "docker is installed but its daemon is not reachable (is it running?)"
command -v kind >/dev/null 2>&1 || die "kind not found; install it (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
command -v kubectl >/dev/null 2>&1 || die "kubectl not found; install it (https://kubernetes.io/docs/tasks/tools/)"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  die "a kind cluster named $CLUSTER exists already; delete it or set KIND_CLUSTER"
fi

work=$(mktemp -d)
# A kubeconfig of its own: the user's ~/.kube/config and current context are left alone.
export KUBECONFIG="$work/kubeconfig"
created=0
cleanup() {
  status=$?
  if [[ $status -ne 0 && $created -eq 1 ]]; then
    echo "--- diagnostics" >&2
    kubectl get pods -A -o wide >&2 || true
    kubectl -n "$NS" describe podgroup "$GROUP" >&2 || true
    kubectl -n gangsched-system logs -l app.kubernetes.io/name=gangsched --tail=40 --prefix >&2 || true
  fi
  if [[ $created -eq 1 && ${KEEP_CLUSTER:-0} != 1 ]]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  elif [[ $created -eq 1 ]]; then
    say "kept the cluster: kind export kubeconfig --name $CLUSTER; later kind delete cluster --name $CLUSTER"
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building $IMAGE"
docker build -t "$IMAGE" .

cat >"$work/kind.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
- role: control-plane
- role: worker
  labels: {$BLOCK: block-a, $RACK: rack-a1}
- role: worker
  labels: {$BLOCK: block-a, $RACK: rack-a2}
- role: worker
  labels: {$BLOCK: block-b, $RACK: rack-b1}
- role: worker
  labels: {$BLOCK: block-b, $RACK: rack-b2}
EOF
say "creating kind cluster $CLUSTER (1 control plane + 4 workers)"
created=1
kind create cluster --name "$CLUSTER" --config "$work/kind.yaml" --wait 180s \
  ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
kind load docker-image "$IMAGE" --name "$CLUSTER"

say "installing: kubectl apply -f crds/ && kubectl apply -k manifests/"
kubectl apply -f crds/
kubectl wait --for=condition=Established crd/podgroups.scheduling.gangsched.io --timeout=60s
kubectl apply -k manifests/
if [[ $IMAGE != gangsched:dev ]]; then
  kubectl -n gangsched-system set image deployment/gangsched "gangsched=$IMAGE"
fi
kubectl -n gangsched-system rollout status deployment/gangsched --timeout="${TIMEOUT}s"
leader=""
for _ in $(seq "$TIMEOUT"); do
  leader=$(kubectl -n gangsched-system get lease gangsched -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  [[ -n $leader ]] && break
  sleep 1
done
[[ -n $leader ]] || die "no replica took the Lease gangsched-system/gangsched"
say "leader: $leader"

say "advertising $GPUS_PER_NODE fake nvidia.com/gpu on every worker"
for node in $(kubectl get nodes -l "$BLOCK" -o name); do
  kubectl patch "$node" --subresource=status --type=json -p "[
    {\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$GPUS_PER_NODE\"},
    {\"op\": \"add\", \"path\": \"/status/allocatable/nvidia.com~1gpu\", \"value\": \"$GPUS_PER_NODE\"}]" >/dev/null
done

# The example as written asks for 8 x 8 GPUs and 48 CPUs per worker and pulls a 10 GB
# PyTorch image; the overlay keeps its PodGroup, labels, topology and pod count.
mkdir "$work/example"
cp examples/training-job.yaml "$work/example/"
cat >"$work/example/kustomization.yaml" <<'EOF'
resources: [training-job.yaml]
patches:
- target: {kind: Pod, labelSelector: app.kubernetes.io/component=worker}
  patch: |
    apiVersion: v1
    kind: Pod
    metadata: {name: any}
    spec:
      containers:
      - name: trainer
        image: registry.k8s.io/pause:3.10
        command: null
        resources:
          requests: {cpu: 10m, memory: 16Mi, nvidia.com/gpu: "1"}
          limits: {memory: 64Mi, nvidia.com/gpu: "1"}
      volumes:
      - name: dshm
        emptyDir: {medium: Memory, sizeLimit: 64Mi}
- target: {kind: Pod, labelSelector: app.kubernetes.io/component=launcher}
  patch: |
    apiVersion: v1
    kind: Pod
    metadata: {name: any}
    spec:
      containers:
      - name: launcher
        image: registry.k8s.io/pause:3.10
        command: null
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {memory: 64Mi}
EOF
say "submitting examples/training-job.yaml (scaled to kind) in namespace $NS"
kubectl create namespace "$NS" >/dev/null
kubectl apply -n "$NS" -k "$work/example"

selector="scheduling.gangsched.io/pod-group=$GROUP"
want=$(kubectl -n "$NS" get pods -l "$selector" --no-headers | wc -l)
[[ $want -eq 9 ]] || die "expected 9 pods in the example, found $want"
bound=0
for _ in $(seq "$TIMEOUT"); do
  bound=$(kubectl -n "$NS" get pods -l "$selector" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true)
  [[ $bound -eq $want ]] && break
  sleep 1
done
[[ $bound -eq $want ]] || die "only $bound/$want pods bound after ${TIMEOUT}s"

echo
printf '%-22s %-22s %-9s %-9s\n' POD NODE BLOCK RACK
declare -A blocks=() racks=()
while read -r pod node; do
  block=$(kubectl get node "$node" -o jsonpath="{.metadata.labels.example\.com/block}")
  rack=$(kubectl get node "$node" -o jsonpath="{.metadata.labels.example\.com/rack}")
  blocks[$block]=1
  racks[$rack]=1
  printf '%-22s %-22s %-9s %-9s\n' "$pod" "$node" "$block" "$rack"
done < <(kubectl -n "$NS" get pods -l "$selector" -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' | sort)
echo
kubectl -n "$NS" get podgroup "$GROUP"
echo

[[ ${#blocks[@]} -eq 1 ]] || die "the gang spans ${#blocks[@]} blocks: ${!blocks[*]} (Required: one)"
# 8 GPUs do not fit one 4-GPU rack: two racks is the fewest possible.
[[ ${#racks[@]} -eq 2 ]] || die "the gang spans ${#racks[@]} racks: ${!racks[*]} (Preferred: the fewest, 2)"
say "PASS: 9/9 pods bound in block ${!blocks[*]}, racks ${!racks[*]}; leader $leader"
