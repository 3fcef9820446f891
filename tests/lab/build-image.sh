#!/usr/bin/env bash
# Build the lab test host image localhost/dankfleet-lab:bookworm from Debian
# packages alone (no registry is reachable): debootstrap minbase + systemd as
# PID 1 + python3 for Ansible + the toolchain the build role compiles with +
# promtool (Debian's prometheus package; its server is masked) for rule validation.
# Skips everything when the image exists and was built by this exact script
# (FORCE=1 rebuilds).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lab/podman-env.sh
source "$here/podman-env.sh"

IMAGE=${LAB_IMAGE:-localhost/dankfleet-lab:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=systemd,systemd-sysv,dbus,python3,python3-apt,curl,ca-certificates,iproute2,procps,sudo,less,\
build-essential,cmake,ninja-build,ccache,git,binutils,file,xz-utils,\
prometheus

# The image is labelled with a hash of this script: a changed recipe rebuilds,
# an unchanged one is reused.
recipe=$(sha256sum "$0" | cut -c1-16)
if [[ "${FORCE:-0}" != 1 ]] && podman image exists "$IMAGE" \
   && [[ $(podman image inspect --format '{{ index .Labels "dankfleet.recipe" }}' "$IMAGE") == "$recipe" ]]; then
  echo "lab image $IMAGE is up to date (recipe $recipe); FORCE=1 rebuilds" >&2
  exit 0
fi

for tool in debootstrap podman; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y debootstrap podman runc" >&2; exit 1; }
done

work=$(mktemp -d /var/tmp/dankfleet-lab.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
start=$(date +%s)
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$MIRROR" >&2
# A container has no consoles or hardware to wait for; these units only stall boot.
for unit in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
            systemd-remount-fs.service sys-kernel-debug.mount sys-kernel-tracing.mount \
            prometheus.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
echo dankfleet-lab > "$rootfs/etc/hostname"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | podman import \
  --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' \
  --change "LABEL dankfleet.recipe=$recipe" - "$IMAGE" >&2
echo "built $IMAGE in $(( $(date +%s) - start ))s" >&2
