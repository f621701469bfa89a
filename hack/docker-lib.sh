# Sourced by hack/image.sh and hack/image-test.sh: a docker that builds and runs, on a machine
# that may have no daemon running and no container registry within reach.
#
#   docker_ensure   the docker CLI (else, as root with apt, Debian's docker.io) and a daemon
#                   (else dockerd started in the background, its log in $GANGSCHED_DOCKER_DIR);
#                   returns 1 with the reason in $DOCKER_UNAVAILABLE when it cannot.
#   docker_stop_started   stops the dockerd that docker_ensure started, if it did.
#
# shellcheck shell=bash

GANGSCHED_DOCKER_DIR=${GANGSCHED_DOCKER_DIR:-${TMPDIR:-/tmp}/gangsched-docker}
DOCKER_UNAVAILABLE=""
DOCKERD_STARTED_PID=""

_docker_install() {
    # Debian's docker.io (daemon, containerd, runc): only as root and only with apt.
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        return 1
    fi
    echo "docker: not installed; installing Debian's docker.io with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q docker.io >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q docker.io >/dev/null 2>&1; }
}

docker_ensure() {
    if ! command -v docker >/dev/null 2>&1 || { ! docker info >/dev/null 2>&1 && ! command -v dockerd >/dev/null 2>&1; }; then
        if ! _docker_install || ! command -v docker >/dev/null 2>&1; then
            DOCKER_UNAVAILABLE="no docker (and no root with apt-get to install Debian's docker.io)"
            return 1
        fi
    fi
    # A docker CLI without the buildx plugin refuses DOCKER_BUILDKIT=1; the Dockerfile needs
    # nothing BuildKit-only, so let it use the classic builder then.
    if ! docker buildx version >/dev/null 2>&1; then
        export DOCKER_BUILDKIT=0
    fi
    if docker info >/dev/null 2>&1; then
        return 0
    fi
    if [[ $(id -u) != 0 ]] || ! command -v dockerd >/dev/null 2>&1; then
        DOCKER_UNAVAILABLE="the docker daemon is not reachable, and this user cannot start dockerd"
        return 1
    fi
    mkdir -p "$GANGSCHED_DOCKER_DIR"
    local log="$GANGSCHED_DOCKER_DIR/dockerd.log"
    nohup dockerd >"$log" 2>&1 &
    DOCKERD_STARTED_PID=$!
    echo "docker: no daemon running; started dockerd (pid $DOCKERD_STARTED_PID, log $log)" >&2
    local i
    for i in $(seq 1 60); do
        if docker info >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$DOCKERD_STARTED_PID" 2>/dev/null; then
            DOCKER_UNAVAILABLE="dockerd exited at once: $(tail -n 1 "$log")"
            DOCKERD_STARTED_PID=""
            return 1
        fi
        sleep 0.5
    done
    DOCKER_UNAVAILABLE="dockerd did not answer within 30 s (log $log)"
    docker_stop_started
    return 1
}

docker_stop_started() {
    if [[ -n $DOCKERD_STARTED_PID ]] && kill -0 "$DOCKERD_STARTED_PID" 2>/dev/null; then
        kill "$DOCKERD_STARTED_PID" 2>/dev/null || true
        local i
        for i in $(seq 1 40); do
            kill -0 "$DOCKERD_STARTED_PID" 2>/dev/null || break
            sleep 0.25
        done
        echo "docker: stopped the dockerd started here (pid $DOCKERD_STARTED_PID)" >&2
    fi
    DOCKERD_STARTED_PID=""
}
