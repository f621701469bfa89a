#!/usr/bin/env bash
# Builds KWOK's `kwok` controller (sigs.k8s.io/kwok/cmd/kwok@v0.8.0) from its Go module into
# the control plane's cache directory, next to kube-apiserver:
#   ${GANGSCHED_K8S_BIN:-~/.cache/gangsched/k8s-v1.36.3/bin}/kwok
# `python -m bench.e2e --kubelet kwok` runs it as the node and pod lifecycle simulator (nodes
# Ready with heartbeats and leases, bound pods Running and, for fifo-rounds, Succeeded by its
# stages; bench/e2e/kwok.py), and tests/integration/test_bench_e2e_kwok.py runs that at tiny scale.
#
# A no-op once built. Without Go it warns that the test will be skipped, unless CI=true: then
# it fails, as the test would.
set -euo pipefail

KWOK_VERSION=v0.8.0
K8S_VERSION=v1.36.3
module=sigs.k8s.io/kwok/cmd/kwok
dest=${GANGSCHED_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsched/k8s-${K8S_VERSION}/bin}
bin="$dest/kwok"

if [[ -x "$bin" ]]; then
    echo "kwok: already built: $bin"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    msg="kwok: Go >= 1.26 is needed to build $bin ($module@$KWOK_VERSION); bench-e2e --kubelet kwok and its test will be skipped"
    if [[ "${CI:-}" == true ]]; then
        echo "$msg" >&2
        exit 1
    fi
    echo "warning: $msg" >&2
    exit 0
fi

mkdir -p "$dest"
stage=$(mktemp -d "$dest/../build.XXXXXX")
trap 'rm -rf "$stage"' EXIT
start=$(date +%s)
echo "kwok: building $module@$KWOK_VERSION into $bin"
# `go install pkg@version` builds in module-aware mode from the module's own go.mod and go.sum,
# outside any module of ours. Stamped as KWOK's Makefile stamps it, so `kwok --version` says v0.8.0.
GOBIN="$stage" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
    go install -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    "$module@$KWOK_VERSION"
"$stage/kwok" --help >/dev/null 2>&1 || { echo "kwok: the built binary does not run" >&2; exit 1; }
mv -f "$stage/kwok" "$bin"
echo "kwok: built in $(( $(date +%s) - start ))s"
