#!/usr/bin/env bash
# Builds bare-binder (see README.md next to this script) into the same cache directory as
# kube-apiserver/kube-scheduler, once (hack/go-tool.sh says how).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/go-tool.sh
source "$here/../go-tool.sh"
if go_tool_build bare-binder "$here" "the bench's bare contestant and its test"; then
    "$GO_TOOL_BIN" -h 2>/dev/null || { echo "bare-binder: $GO_TOOL_BIN does not run" >&2; exit 1; }
fi
