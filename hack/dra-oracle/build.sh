#!/usr/bin/env bash
# Builds dra-oracle (see README.md next to this script) into the same cache directory
# as kube-apiserver/kube-scheduler, once (hack/go-tool.sh says how).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/go-tool.sh
source "$here/../go-tool.sh"
if go_tool_build dra-oracle "$here" "DRA differential tests"; then
    echo '{"mode":"features"}' | "$GO_TOOL_BIN" >/dev/null
fi
