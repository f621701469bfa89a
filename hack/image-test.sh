#!/usr/bin/env bash
# `make image-test`: the image, built and run. Starts a docker daemon when none runs and it
# can (stopped again at the end), builds $IMAGE (hack/image.sh: no registry needed), then
# hack/image_e2e.py runs it like manifests/deployment.yaml does against the dev control
# plane, with only its ServiceAccount's token, and checks that a gang is bound, /metrics and
# the liveness probe answer. Where docker cannot run: one line, exit 0 (skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-gangsched:dev}
PY=${PY:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
start=$(date +%s)

# shellcheck source=hack/docker-lib.sh
source hack/docker-lib.sh
if ! docker_ensure; then
    echo "image-test: skipped: $DOCKER_UNAVAILABLE"
    exit 0
fi
trap docker_stop_started EXIT

IMAGE=$IMAGE bash hack/image.sh
"$PY" hack/image_e2e.py --image "$IMAGE" ${IMAGE_TEST_ARGS:-}
echo "image-test: passed in $(( $(date +%s) - start ))s (build included)"
