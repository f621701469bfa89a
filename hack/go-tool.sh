# Sourced by hack/dra-oracle/build.sh and hack/bare-binder/build.sh (go_tool_build: a small Go program
# from its directory into the control plane's cache directory, next to kube-apiserver), and by
# hack/build-kwok.sh and hack/build-ray-operator.sh (go_install_tool: a released Go tool).
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

# go_missing MESSAGE: Go is not installed. Under CI=true a missing tool is a hard failure
# (exit 1); otherwise a warning, and the caller goes on without the tool.
go_missing() {
    if [[ "${CI:-}" == true ]]; then
        echo "$1" >&2
        exit 1
    fi
    echo "warning: $1" >&2
}

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
        go_missing "$name: Go >= 1.26 is needed to build $GO_TOOL_BIN; $needed_for will be skipped"
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

# go_install_tool NAME MODULE VERSION DEST NEEDED_FOR [LDFLAGS]
#
# `go install MODULE@VERSION` (module-aware, from the module's own go.mod and go.sum, outside
# any module of ours) into DEST/NAME, once: a no-op when it is there. Without Go: as
# go_tool_build (a warning that NEEDED_FOR will be skipped, or exit 1 under CI=true). The
# binary is checked to run (`--help`) before it is moved into place.
go_install_tool() {
    local name=$1 module=$2 version=$3 dest=$4 needed_for=$5 ldflags=${6:--s -w}
    local bin="$dest/$name"
    if [[ -x "$bin" ]]; then
        echo "$name: already built: $bin"
        return 0
    fi
    if ! command -v go >/dev/null 2>&1; then
        go_missing "$name: Go is needed to build $bin ($module@$version); $needed_for will be skipped"
        return 0
    fi
    mkdir -p "$dest"
    local stage start
    stage=$(mktemp -d "$dest/../build.XXXXXX")
    start=$(date +%s)
    echo "$name: building $module@$version into $bin"
    if ! GOBIN="$stage" GOFLAGS="${GOFLAGS:-} -buildvcs=false" go install -trimpath -ldflags "$ldflags" "$module@$version"; then
        rm -rf "$stage"
        exit 1
    fi
    local built
    built="$stage/$(basename "$module")"
    if ! "$built" --help >/dev/null 2>&1; then
        echo "$name: the built binary does not run" >&2
        rm -rf "$stage"
        exit 1
    fi
    mv -f "$built" "$bin"
    rm -rf "$stage"
    echo "$name: built in $(( $(date +%s) - start ))s"
}
