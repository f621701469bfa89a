# Sourced by hack/dra-oracle/build.sh and hack/bare-binder/build.sh: build a small Go program
# from its directory into the control plane's cache directory (next to kube-apiserver).
#
#   go_tool_build NAME DIR NEEDED_FOR
#
# A no-op when the binary is newer than DIR's go.mod, go.sum and main.go (returns 1: nothing
# new to check). Without Go it warns that NEEDED_FOR will be skipped (returns 1), unless
# CI=true: then a missing tool is a hard failure (exit 1). Otherwise it builds with
# -trimpath, whose module versions match hack/k8s, so the packages shared with kube-scheduler
# come out of the Go build cache after `make control-plane`; sets GO_TOOL_BIN and returns 0
# for the caller to check that the binary runs.
#
# shellcheck shell=bash

K8S_VERSION=v1.36.3

go_tool_build() {
    local name=$1 dir=$2 needed_for=$3
    local dest=${GANGSCHED_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsched/k8s-${K8S_VERSION}/bin}
    GO_TOOL_BIN="$dest/$name"
    if [[ -x "$GO_TOOL_BIN" ]]; then
        local f stale=0
        for f in "$dir"/go.mod "$dir"/go.sum "$dir"/main.go; do
            [[ "$f" -nt "$GO_TOOL_BIN" ]] && stale=1
        done
        if [[ $stale == 0 ]]; then
            echo "$name: already built: $GO_TOOL_BIN"
            return 1
        fi
    fi
    if ! command -v go >/dev/null 2>&1; then
        local msg="$name: Go >= 1.26 is needed to build $GO_TOOL_BIN; $needed_for will be skipped"
        if [[ "${CI:-}" == true ]]; then
            echo "$msg" >&2
            exit 1
        fi
        echo "warning: $msg" >&2
        return 1
    fi
    mkdir -p "$dest"
    local stage start
    stage=$(mktemp "$dest/.$name.XXXXXX")
    start=$(date +%s)
    echo "$name: building into $GO_TOOL_BIN"
    if ! (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$stage" .); then
        rm -f "$stage"
        exit 1
    fi
    chmod 0755 "$stage"
    mv -f "$stage" "$GO_TOOL_BIN"
    echo "$name: built in $(( $(date +%s) - start ))s"
}
