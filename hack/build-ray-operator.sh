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
# shellcheck source=hack/go-tool.sh
source "$(dirname "$0")/go-tool.sh"  # go_install_tool
dest=${GANGSCHED_RAY_OPERATOR_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsched/ray-operator-${RAY_OPERATOR_VERSION}/bin}
# A first build takes a few minutes.
go_install_tool ray-operator github.com/ray-project/kuberay/ray-operator "$RAY_OPERATOR_VERSION" "$dest" \
    "the tests that run the real ray-operator"
