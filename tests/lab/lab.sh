#!/usr/bin/env bash
# `make lab`: start (or reuse) the systemd lab container `dankfleet-lab` and run
# the real deploy against it. Writes only under .lab/, the build cache
# ($DANKFLEET_CACHE) and podman's storage. Extra args go to ansible-playbook.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
# shellcheck source=tests/lab/podman-env.sh
source tests/lab/podman-env.sh
cache=${DANKFLEET_CACHE:-$HOME/.cache/dankfleet}
name=${LAB_CONTAINER:-dankfleet-lab}
image=${LAB_IMAGE:-localhost/dankfleet-lab:bookworm}

if ! podman container exists "$name"; then
  podman run -d --name "$name" --hostname "$name" --systemd=always --network host --cap-add SYS_ADMIN \
    -v "$cache:/srv/dankfleet-cache:ro" "$image" /sbin/init >/dev/null
elif [[ $(podman inspect -f '{{.State.Running}}' "$name") != true ]]; then
  podman start "$name" >/dev/null
fi
for _ in $(seq 1 60); do
  state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
  [[ $state == running || $state == degraded ]] && break
  sleep 1
done
export ANSIBLE_CONFIG="$repo/ansible.cfg"
ansible-playbook -i inventory/lab tests/lab/lab-prepare.yml
ansible-playbook -i inventory/lab deploy-frank-medium.yml "$@"
