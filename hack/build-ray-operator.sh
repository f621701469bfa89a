#!/usr/bin/env bash
# Builds KubeRay's ray-operator (the RayCluster/RayJob/RayService controller) from its Go
# module, github.com/ray-project/kuberay/ray-operator@v1.5.0 (main.go at the module root),
# into a cache outside the repo, next to the control plane's:
#   ${GANGSCHED_RAY_OPERATOR_BIN:-~/.cache/gangsched/ray-operator-v1.5.0/bin}/ray-operator
# The integration tests run it against the dev control plane
# (testing/gangsched_testing/rayoperator.py); its CRDs are pinned in
# testing/gangsched_testing/crds/kuberay (the same module version).
#
# A no-op once built. Without Go it warns that the tests that run the real ray-operator will
# skip, unless CI=true: then it fails, as they would.
set -euo pipefail

RAY_OPERATOR_VERSION=v1.5.0
module=github.com/ray-project/kuberay/ray-operator
dest=${GANGSCHED_RAY_OPERATOR_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsched/ray-operator-${RAY_OPERATOR_VERSION}/bin}
bin="$dest/ray-operator"

if [[ -x "$bin" ]]; then
    echo "ray-operator: already built: $bin"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    msg="ray-operator: Go >= 1.24 is needed to build $bin ($module@$RAY_OPERATOR_VERSION); the tests that run it will be skipped"
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
echo "ray-operator: building $module@$RAY_OPERATOR_VERSION into $bin (a first build takes a few minutes)"
# `go install pkg@version` builds in module-aware mode from the module's own go.mod and
# go.sum (no replace directives in it), outside any module of ours.
GOBIN="$stage" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
    go install -trimpath -ldflags "-s -w" "$module@$RAY_OPERATOR_VERSION"
mv -f "$stage/ray-operator" "$bin"
echo "ray-operator: built in $(( $(date +%s) - start ))s"
"$bin" --help >/dev/null 2>&1 || { echo "ray-operator: $bin does not run" >&2; exit 1; }
