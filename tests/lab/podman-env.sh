# shellcheck shell=bash
# Sourced by the Makefile and the lab scripts: point podman at the project's own
# containers.conf (under .lab/) instead of editing /etc/containers on the host.
# Measured on this machine kind: Debian's default crun fails on its cgroup layout,
# runc works; systemd-less hosts need cgroupfs and file events; default ulimits
# must not exceed the host's hard limits or every container start fails.
_lab_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$_lab_root/.lab"
_nofile=$(ulimit -Hn); [ "$_nofile" = unlimited ] && _nofile=1048576
_nproc=$(ulimit -Hu); { [ "$_nproc" = unlimited ] || [ "$_nproc" -gt 32768 ]; } && _nproc=32768
cat > "$_lab_root/.lab/containers.conf.tmp" <<CONF
[containers]
default_ulimits = ["nofile=${_nofile}:${_nofile}", "nproc=${_nproc}:${_nproc}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
mv "$_lab_root/.lab/containers.conf.tmp" "$_lab_root/.lab/containers.conf"
export CONTAINERS_CONF="$_lab_root/.lab/containers.conf"
unset _lab_root _nofile _nproc
