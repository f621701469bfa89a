#!/usr/bin/env bash
# Builds bare-binder (see README.md next to this script) into the same cache directory as
# kube-apiserver/kube-scheduler. A no-op when the binary is newer than its sources.
# Without Go it only warns, unless CI=true (then a missing binder is a hard failure).
set -euo pipefail

K8S_VERSION=v1.36.3
here=$(cd "$(dirname "$0")" && pwd)
dest=${GANGSCHED_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsched/k8s-${K8S_VERSION}/bin}
bin="$dest/bare-binder"

sources=("$here"/go.mod "$here"/go.sum "$here"/main.go)
if [[ -x "$bin" ]]; then
    stale=0
    for f in "${sources[@]}"; do
        [[ "$f" -nt "$bin" ]] && stale=1
    done
    if [[ $stale == 0 ]]; then
        echo "bare-binder: already built: $bin"
        exit 0
    fi
fi
if ! command -v go >/dev/null 2>&1; then
    msg="bare-binder: Go >= 1.26 is needed to build $bin; the bench's bare contestant and its test will be skipped"
    if [[ "${CI:-}" == true ]]; then
        echo "$msg" >&2
        exit 1
    fi
    echo "warning: $msg" >&2
    exit 0
fi

mkdir -p "$dest"
stage=$(mktemp "$dest/.bare-binder.XXXXXX")
trap 'rm -f "$stage"' EXIT

start=$(date +%s)
echo "bare-binder: building into $bin"
# -trimpath and the module versions match hack/k8s, so client-go and its dependencies come
# out of the Go build cache after `make control-plane`.
(cd "$here" && go build -trimpath -ldflags "-s -w" -o "$stage" .)
chmod 0755 "$stage"
mv -f "$stage" "$bin"
trap - EXIT
echo "bare-binder: built in $(( $(date +%s) - start ))s"
"$bin" -h 2>/dev/null || { echo "bare-binder: $bin does not run" >&2; exit 1; }
