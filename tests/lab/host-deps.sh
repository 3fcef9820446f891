#!/usr/bin/env bash
# `make host-deps`: the OS packages `make lab` and `make test` need, in one place.
#   all installed (dpkg-query)          -> nothing to do, in well under a second
#   missing, root on Debian/Ubuntu      -> apt-get install them
#   missing, anything else              -> stop, naming the packages and the command
# HOST_DEPS_CHECK_ONLY=1 never installs (it stops with the command instead).
set -euo pipefail

PACKAGES=(
  # Python venv for .venv (Debian splits venv/ensurepip out of python3)
  python3 python3-venv
  # the lab: a debootstrap-built image run by rootless-capable podman with runc
  podman runc debootstrap uidmap slirp4netns fuse-overlayfs
  # the test llama-server build (tests/lab/build-llama-server.sh) and its ccache
  ccache build-essential cmake ninja-build git curl ca-certificates
  # what the tests call on the host: ss/ip, ps, readelf, shellcheck (sanity), promtool
  iproute2 procps binutils shellcheck prometheus
  # nft -c checks the rpc worker allowlist (tests/unit/roles/llama_rpc_worker/test_templates.py)
  nftables
)

log() { printf 'host-deps: %s\n' "$*" >&2; }

if ! command -v dpkg-query >/dev/null 2>&1; then
  log "this is not a Debian/Ubuntu host (no dpkg-query); install the equivalents of:"
  log "  ${PACKAGES[*]}"
  log "then run make again."
  exit 1
fi

# One dpkg-query for all of them (it runs before every make target: one process, not twenty);
# a package it does not know is not printed, so it stays missing.
declare -A installed=()
while read -r pkg status; do
  [[ $status == installed ]] && installed[$pkg]=1
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)
missing=()
for p in "${PACKAGES[@]}"; do
  [[ -n ${installed[$p]:-} ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) != 0 || ${HOST_DEPS_CHECK_ONLY:-0} == 1 ]] || ! command -v apt-get >/dev/null 2>&1; then
  log "missing OS packages: ${missing[*]}"
  log "install them as root, then run make again:"
  log "  sudo sh -c '$cmd'"
  exit 1
fi

log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed ${#missing[@]} package(s)"
