#!/usr/bin/env bash
# `make image`: docker build -t $IMAGE (default gangsched:dev), also on a machine that cannot
# reach a container registry.
#
#  1. docker: hack/docker-lib.sh (the CLI, else Debian's docker.io as root with apt; a daemon,
#     else dockerd started in the background and left running).
#  2. the base: $PYTHON_IMAGE when set; else python:3.11-slim when present or pullable; else
#     gangsched-base:bookworm, built once from Debian packages (hack/image-base.sh), saying so.
#  3. the host's local CAs (/usr/local/share/ca-certificates/*.crt, a TLS-intercepting proxy's)
#     are trusted by pip in the build stage only ($EXTRA_CA_CERTS_DIR; empty: none).
set -euo pipefail
cd "$(dirname "$0")/.."
here=hack
IMAGE=${IMAGE:-gangsched:dev}
DEFAULT_PYTHON_IMAGE=python:3.11-slim
PULL_TIMEOUT=${PULL_TIMEOUT:-60}

# shellcheck source=hack/docker-lib.sh
source "$here/docker-lib.sh"
if ! docker_ensure; then
    echo "make image: cannot build $IMAGE: $DOCKER_UNAVAILABLE" >&2
    exit 1
fi

base=${PYTHON_IMAGE:-}
if [[ -z $base ]]; then
    base=$DEFAULT_PYTHON_IMAGE
    if ! docker image inspect "$base" >/dev/null 2>&1 \
        && ! timeout "$PULL_TIMEOUT" docker pull -q "$base" >/dev/null 2>&1; then
        base=${BASE_IMAGE:-gangsched-base:bookworm}
        echo "make image: $DEFAULT_PYTHON_IMAGE cannot be pulled (no registry in reach); using $base, Debian bookworm's python3 3.11 (hack/image-base.sh, cached)"
        BASE_IMAGE=$base bash "$here/image-base.sh"
    fi
fi

ca_dir=${EXTRA_CA_CERTS_DIR-/usr/local/share/ca-certificates}
extra_ca=""
if [[ -n $ca_dir ]] && compgen -G "$ca_dir/*.crt" >/dev/null; then
    extra_ca=$(cat "$ca_dir"/*.crt)
    echo "make image: pip trusts the host's CAs in $ca_dir in the build stage (not in the image)"
fi

version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
start=$(date +%s)
docker build -t "$IMAGE" \
    --build-arg PYTHON_IMAGE="$base" \
    --build-arg VERSION="$version" \
    --build-arg SOURCE_URL="$(git remote get-url origin 2>/dev/null || true)" \
    --build-arg EXTRA_CA_CERTS="$extra_ca" \
    .
echo "make image: $IMAGE built on $base in $(( $(date +%s) - start ))s, $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"
if [[ -n $DOCKERD_STARTED_PID ]]; then
    echo "make image: dockerd (pid $DOCKERD_STARTED_PID) keeps running for docker push/run; log in $GANGSCHED_DOCKER_DIR"
fi
