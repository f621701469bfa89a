#!/usr/bin/env bash
# Builds the local image gangsched-base:bookworm, the Dockerfile's base where python:3.11-slim
# cannot be pulled (no container registry in reach): Debian bookworm minbase from Debian's
# package mirror (debootstrap), with python3 (3.11), python3-venv and ca-certificates, the
# security updates applied, imported with `docker import`. Like python:3.11-slim it is
# bookworm with Python 3.11; unlike it, Python lives in /usr/bin and there is no pip (the
# Dockerfile makes a venv either way).
#
# Cached twice: the docker image itself, and its root filesystem as a tarball in
# ~/.cache/gangsched/image-base (a new docker data root imports that in seconds). Needs root
# (debootstrap; installed with apt-get when missing), docker running, and the Debian mirror
# ($DEBIAN_MIRROR, $DEBIAN_SECURITY_MIRROR).
set -euo pipefail

BASE_IMAGE=${BASE_IMAGE:-gangsched-base:bookworm}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
PACKAGES=python3,python3-venv,ca-certificates
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
cache_dir=${XDG_CACHE_HOME:-$HOME/.cache}/gangsched/image-base
tarball="$cache_dir/gangsched-base-$SUITE-$arch.tar.gz"

if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    exit 0
fi

import_tarball() {
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        --change "LABEL org.opencontainers.image.description=\"Debian $SUITE minbase + python3, python3-venv, ca-certificates (gangsched hack/image-base.sh)\"" \
        "$tarball" "$BASE_IMAGE" >/dev/null
    echo "image-base: $BASE_IMAGE imported from $tarball"
}

if [[ -s $tarball ]]; then
    import_tarball
    exit 0
fi

if [[ $(id -u) != 0 ]]; then
    echo "image-base: building $BASE_IMAGE needs root (debootstrap)" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "image-base: debootstrap is missing and there is no apt-get to install it" >&2
        exit 1
    fi
    echo "image-base: installing debootstrap with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
fi

start=$(date +%s)
mkdir -p "$cache_dir"
work=$(mktemp -d "$cache_dir/build.XXXXXX")
rootfs="$work/rootfs"
cleanup() {
    # A debootstrap that failed half-way can leave /proc or /sys mounted in the root.
    for m in proc sys dev/pts; do
        mountpoint -q "$rootfs/$m" 2>/dev/null && umount -l "$rootfs/$m" || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

echo "image-base: debootstrap $SUITE minbase + $PACKAGES from $MIRROR (a minute or two, once)"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }

# Security and point-release updates, as the Debian images carry them.
cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF
mount -t proc proc "$rootfs/proc"
chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -c \
    'apt-get update -q && apt-get upgrade -y -q && apt-get clean' >"$work/upgrade.log" 2>&1 \
    || { tail -n 20 "$work/upgrade.log" >&2; exit 1; }
umount "$rootfs/proc"

# What an image does not need: package lists, caches, logs, documentation.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
    "$rootfs"/var/log/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/tmp/* "$rootfs"/root/.cache
: >"$rootfs/etc/hostname"
: >"$rootfs/etc/resolv.conf"

tar -C "$rootfs" --numeric-owner -czf "$work/rootfs.tar.gz" .
mv "$work/rootfs.tar.gz" "$tarball"
import_tarball
echo "image-base: built in $(( $(date +%s) - start ))s, $(du -h "$tarball" | cut -f1) compressed"
