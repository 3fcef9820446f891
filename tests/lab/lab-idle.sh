#!/usr/bin/env bash
# `make test`'s first step: refuse to start while `make lab`'s container holds the lab's ports.
# The lab runs on the host network (mirror 18170, endpoint 18470: docs/DEVELOPING.md, ports), and
# the molecule `default` scenario deploys the same inventory on the same ports: its gate would talk
# to the lab's server, and fail after minutes. Say so before anything runs, and how to stop it.
# A fresh CI machine (no podman, no ss yet) has no lab: nothing to check.
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${LAB_CONTAINER:-dankfleet-lab}
ports=${LAB_PORTS:-18170 18470}

if command -v podman >/dev/null 2>&1; then
  # shellcheck source=tests/lab/podman-env.sh
  source tests/lab/podman-env.sh
  if [[ $(podman inspect -f '{{.State.Running}}' "$name" 2>/dev/null || true) == true ]]; then
    echo "lab-idle: the lab container $name is running and holds 127.0.0.1:${ports// /, :} (make lab);" >&2
    echo "lab-idle: the molecule scenarios use the same ports. Stop it with 'make clean-lab', then run the tests again." >&2
    exit 1
  fi
fi
if command -v ss >/dev/null 2>&1; then
  for port in $ports; do
    holder=$(ss -ltnpH "sport = :$port" 2>/dev/null | sed -n 's/.*users:((\(.*\))).*/\1/p' | head -1)
    if [[ -n $holder ]] || [[ -n $(ss -ltnH "sport = :$port" 2>/dev/null) ]]; then
      echo "lab-idle: 127.0.0.1:$port is held (${holder:-by a process of another user}): a lab or a molecule scenario still runs there;" >&2
      echo "lab-idle: wait for it or stop it ('make clean-lab' removes $name), then run the tests again." >&2
      exit 1
    fi
  done
fi
exit 0
