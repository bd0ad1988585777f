#!/usr/bin/env bash
# Device run: speculative decoding on the GPU (.gpu/spec_bench.py) with a ~0.8B random F16 llama.
# Build libllama with CUDA as .gpu/run.sh does (same cmake lines) while the model is generated in
# the background; then the bench. Usage (repo root): bash .gpu/spec_run.sh [TOTAL_S]
# Writes $OUT/log.txt, $OUT/spec_gpu.json. LOCAL_TEST=1: no build, CPU libs, tiny model.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
TOTAL=${1:-330}
T0=$(date +%s)
stamp() { echo "=== [+$(( $(date +%s) - T0 ))s] $*"; }
die() { stamp "FATAL: $*"; exit 2; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
REPO=$PWD
SRC=$REPO/.gpu/llama.cpp
B=${B:-/tmp/lcpp-build}
PY=${PY:-python3}
MODEL=/tmp/rand-0.8b.gguf

main() {
stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || [ "${LOCAL_TEST:-0}" = 1 ] || die "no nvidia-smi"
PY=$(command -v $PY); echo "python3: $PY"

stamp "model generation (background, nice)"
if [ "${LOCAL_TEST:-0}" = 1 ]; then GEN_ARGS="--n-embd 128 --n-layer 2 --n-ff 256 --n-head 4 --n-head-kv 2"; else GEN_ARGS=""; fi
PYTHONPATH=$REPO/.gpu/site nice -n 10 $PY .gpu/gen_model.py $MODEL $GEN_ARGS > $OUT/gen.txt 2>&1 &
GEN_PID=$!

if [ "${LOCAL_TEST:-0}" = 1 ]; then
  export LLAMA_CPP_LIB_PATH=$LOCAL_LIBS
else
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || die "no nvcc"
CUDA_HOME_GUESS=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
EXTRA=()
if ! ls "$CUDA_HOME_GUESS"/lib64/stubs/libcuda.so "$CUDA_HOME_GUESS"/targets/x86_64-linux/lib/stubs/libcuda.so \
        /usr/lib/x86_64-linux-gnu/libcuda.so /usr/local/cuda/lib64/stubs/libcuda.so >/dev/null 2>&1; then
  LIBCUDA=$(ldconfig -p | awk '/libcuda\.so(\.1)? /{print $NF; exit}')
  [ -z "$LIBCUDA" ] && LIBCUDA=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name 'libcuda.so*' 2>/dev/null | head -1)
  echo "libcuda for linking: ${LIBCUDA:-none}"
  if [ -n "$LIBCUDA" ]; then EXTRA+=(-DCUDA_cuda_driver_LIBRARY=$LIBCUDA); else EXTRA+=(-DGGML_CUDA_NO_VMM=ON); fi
fi
if [ -f $B/bin/libllama.so ] && [ -f $B/bin/libggml-cuda.so ]; then
  stamp "reusing the build in $B"
else
  stamp "configure"
  cmake -S "$SRC" -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=ON \
    -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA_QUANTS=f16-f16 -DGGML_CUDA_COMPRESSION_MODE=none -DGGML_CCACHE=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF "${EXTRA[@]}" > $OUT/cmake.txt 2>&1 \
    || { tail -40 $OUT/cmake.txt; die "cmake configure failed"; }
  rm -f $OUT/cmake.txt
  stamp "build (ninja -j 16, target llama)"
  timeout $(( TOTAL - 60 - ($(date +%s) - T0) )) cmake --build $B --target llama -j 16 > $OUT/build.txt 2>&1
  rc=$?
  stamp "build rc=$rc"
  if [ $rc -ne 0 ]; then grep -B2 -A12 -m3 "error\|FAILED" $OUT/build.txt | head -60; tail -5 $OUT/build.txt; die "build failed"; fi
  rm -f $OUT/build.txt
fi
export LLAMA_CPP_LIB_PATH=$B/bin
export LD_LIBRARY_PATH=$B/bin:$CUDA_HOME_GUESS/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ldd $B/bin/libggml-cuda.so | grep -q "not found" && die "libggml-cuda.so has unresolved libraries"
fi
export PYTHONPATH=$REPO:$REPO/.gpu/site
[ "${LOCAL_TEST:-0}" = 1 ] && export PYTHONPATH=$REPO

stamp "waiting for the model"
wait $GEN_PID; grc=$?
cat $OUT/gen.txt; rm -f $OUT/gen.txt
[ $grc -eq 0 ] || die "model generation failed rc=$grc"

LEFT=$(( TOTAL - ($(date +%s) - T0) - 8 ))
stamp "bench ($LEFT s left)"
timeout $LEFT $PY .gpu/spec_bench.py $MODEL --rounds ${ROUNDS:-4} --deadline $(( $(date +%s) + LEFT - 10 ))
rc=$?
stamp "bench rc=$rc"
return $rc
}

main 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
