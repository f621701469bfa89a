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
# shellcheck source=hack/go-tool.sh
source "$(dirname "$0")/go-tool.sh"  # K8S_VERSION, go_install_tool
dest=${GANGSCHED_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsched/k8s-${K8S_VERSION}/bin}
# Stamped as KWOK's Makefile stamps it, so `kwok --version` says v0.8.0.
go_install_tool kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION" "$dest" \
    "bench-e2e --kubelet kwok and its test" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
