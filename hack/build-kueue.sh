#!/usr/bin/env bash
# Builds Kueue (v0.17.0) for `make test-kueue` (tests/integration/kueue, docs/install.md "Behind
# Kueue") into a cache outside the repo, GANGSCHED_KUEUE_HOME (default
# ~/.cache/gangsched/kueue-v0.17.0):
#   bin/kueue                    `go install sigs.k8s.io/kueue/cmd/kueue@v0.17.0`, version-stamped
#   config/components/crd/       the CRDs (bases/), the conversion patches and the kustomization
#                                naming them, copied from the same module download
#   config/components/webhook/   the webhooks (manifests.yaml) and the kustomization patching them
# gangsched_testing.kueue installs the manifests from there, so they always match the binary
# (the module's go.sum-verified download) and nothing reads Go's module cache at test time.
# Idempotent: builds only what is missing, a no-op when both are there.
set -euo pipefail

KUEUE_VERSION=v0.17.0
module=sigs.k8s.io/kueue
home=${GANGSCHED_KUEUE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsched/kueue-${KUEUE_VERSION}}
manifests=(config/components/crd config/components/webhook)

have_manifests() {
    local f
    for f in crd/kustomization.yaml webhook/kustomization.yaml webhook/manifests.yaml; do
        [[ -f "$home/config/components/$f" ]] || return 1
    done
}
if [[ -x "$home/bin/kueue" ]] && have_manifests; then
    echo "kueue: already built: $home/bin/kueue"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "kueue: Go >= 1.25 is needed to build Kueue $KUEUE_VERSION into $home" >&2
    exit 1
fi

mkdir -p "$home"
stage=$(mktemp -d "$home/.build.XXXXXX")
trap 'rm -rf "$stage"' EXIT
start=$(date +%s)

if [[ ! -x "$home/bin/kueue" ]]; then
    # Stamped as Kueue's Makefile stamps it, so its log reports v0.17.0.
    pkg=$module/pkg/version
    ldflags="-s -w -X $pkg.GitVersion=$KUEUE_VERSION -X $pkg.GitCommit=$KUEUE_VERSION"
    echo "kueue: building $module/cmd/kueue@$KUEUE_VERSION into $home/bin (about 4 minutes on 2 cores)"
    GOBIN="$stage/bin" go install -trimpath -ldflags "$ldflags" "$module/cmd/kueue@$KUEUE_VERSION"
    "$stage/bin/kueue" --help >/dev/null 2>&1 || { echo "kueue: the built binary does not run" >&2; exit 1; }
    mkdir -p "$home/bin"
    mv "$stage/bin/kueue" "$home/bin/kueue"  # at once: a failure further on keeps what was built
    echo "kueue: binary built in $(( $(date +%s) - start ))s"
fi

if ! have_manifests; then
    # The module's directory in Go's cache (downloaded by the install above, or now).
    src=$(go mod download -json "$module@$KUEUE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
    if [[ -z "$src" || ! -d "$src/config/components" ]]; then
        echo "kueue: no config/components in the $module@$KUEUE_VERSION module (Dir: '$src')" >&2
        exit 1
    fi
    mkdir -p "$stage/manifests/config/components"
    for path in "${manifests[@]}"; do
        cp -R "$src/$path" "$stage/manifests/$path"
    done
    chmod -R u+w "$stage/manifests"  # the module cache is read-only
    mkdir -p "$home/config/components"
    rm -rf "$home/config/components/crd" "$home/config/components/webhook"
    mv "$stage/manifests/config/components/crd" "$stage/manifests/config/components/webhook" "$home/config/components/"
    echo "kueue: manifests of $module@$KUEUE_VERSION in $home/config/components"
fi
echo "kueue: ready in $home ($(( $(date +%s) - start ))s)"
