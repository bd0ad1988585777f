#!/usr/bin/env bash
# Device run: build libllama/libggml with CUDA from .gpu/llama.cpp, then localrun's GPU tests and
# the engine smoke run. Usage (repo root): bash .gpu/run.sh   (writes $OUT/log.txt, $OUT/smoke.json)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export OUT
T0=$(date +%s)
stamp() { echo "=== [+$(( $(date +%s) - T0 ))s] $*"; }
die() { stamp "FATAL: $*"; exit 2; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
REPO=$PWD
SRC=$REPO/.gpu/llama.cpp
B=${B:-/tmp/lcpp-build}      # outside the repo: kept between calls on a warm machine
SEARCH=${CUBLAS_SEARCH:-/usr/local /opt /usr/lib /usr/lib64}
PY=${PY:-python3}   # LOCAL_TEST=1 (this machine, no GPU): skip the build, do not die on a CPU-only lib

main() {
stamp "machine"
nvidia-smi || die "no nvidia-smi"
nproc; free -g | head -2; df -h /tmp | tail -1
PY=$(command -v $PY); echo "python3: $PY $($PY --version 2>&1)"
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || die "no nvcc"
echo "nvcc: $NVCC"; "$NVCC" --version | tail -2
cmake --version | head -1; ninja --version; (gcc --version || cc --version) | head -1

# --- CUDA libraries the build links: cuBLAS (toolkit or pip wheels) and the driver --------------
CUDA_HOME_GUESS=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
echo "toolkit root guess: $CUDA_HOME_GUESS"
EXTRA=()
LIBDIRS=()
if ! ls "$CUDA_HOME_GUESS"/lib64/libcublas.so "$CUDA_HOME_GUESS"/targets/x86_64-linux/lib/libcublas.so >/dev/null 2>&1 \
   && ! ls /usr/local/cuda/lib64/libcublas.so >/dev/null 2>&1; then
  stamp "no libcublas.so in the toolkit: looking for a pip cuBLAS"
  CUBLAS=$(find $SEARCH -name 'libcublas.so*' 2>/dev/null | grep -v '\.a$' | sort | head -1)
  CUBLASLT=$(find $SEARCH -name 'libcublasLt.so*' 2>/dev/null | grep -v '\.a$' | sort | head -1)
  HDR=$(find $SEARCH /usr/include -name cublas_v2.h 2>/dev/null | head -1)
  echo "cublas=$CUBLAS cublasLt=$CUBLASLT header=$HDR"
  [ -n "$CUBLAS" ] && [ -n "$CUBLASLT" ] && [ -n "$HDR" ] || die "cuBLAS not found"
  SHIM=/tmp/cublas-shim; mkdir -p $SHIM/include $SHIM/lib
  for h in "$(dirname "$HDR")"/cublas*.h; do ln -sf "$h" $SHIM/include/; done
  ln -sf "$CUBLAS" $SHIM/lib/libcublas.so; ln -sf "$CUBLASLT" $SHIM/lib/libcublasLt.so
  EXTRA+=(-DCUDA_cublas_LIBRARY=$SHIM/lib/libcublas.so -DCUDA_cublasLt_LIBRARY=$SHIM/lib/libcublasLt.so
          "-DCMAKE_CUDA_FLAGS=-I$SHIM/include" "-DCMAKE_CXX_FLAGS=-I$SHIM/include")
  LIBDIRS+=("$(dirname "$(readlink -f "$CUBLAS")")")
fi
if ! ls "$CUDA_HOME_GUESS"/lib64/stubs/libcuda.so "$CUDA_HOME_GUESS"/targets/x86_64-linux/lib/stubs/libcuda.so \
        /usr/lib/x86_64-linux-gnu/libcuda.so /usr/local/cuda/lib64/stubs/libcuda.so >/dev/null 2>&1; then
  LIBCUDA=$(ldconfig -p | awk '/libcuda\.so(\.1)? /{print $NF; exit}')
  [ -z "$LIBCUDA" ] && LIBCUDA=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name 'libcuda.so*' 2>/dev/null | head -1)
  echo "libcuda for linking: ${LIBCUDA:-none}"
  if [ -n "$LIBCUDA" ]; then EXTRA+=(-DCUDA_cuda_driver_LIBRARY=$LIBCUDA); else EXTRA+=(-DGGML_CUDA_NO_VMM=ON); fi
fi

# --- build ----------------------------------------------------------------------------------
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
  grep -E "CUDA|cublas|Flash" $OUT/cmake.txt | head -20
  stamp "build (ninja -j 16, target llama)"
  BT0=$(date +%s)
  if [ "${LOCAL_TEST:-0}" = 1 ]; then
    mkdir -p $B/bin && cp -a "$LOCAL_LIBS"/lib*.so* $B/bin/ && touch $B/bin/libggml-cuda.so; rc=0
  else
    timeout 430 cmake --build $B --target llama -j 16 > $OUT/build.txt 2>&1
    rc=$?
  fi
  BUILD_S=$(( $(date +%s) - BT0 ))
  stamp "build rc=$rc in ${BUILD_S}s"
  if [ $rc -ne 0 ]; then grep -B2 -A12 -m3 "error\|FAILED" $OUT/build.txt | head -60; tail -5 $OUT/build.txt; die "build failed"; fi
  rm -f $OUT/build.txt
fi
ls -la $B/bin/*.so*
export LLAMA_CPP_LIB_PATH=$B/bin
export LD_LIBRARY_PATH=$B/bin:$CUDA_HOME_GUESS/lib64:$CUDA_HOME_GUESS/lib${LIBDIRS:+:${LIBDIRS[*]}}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$REPO:$REPO/.gpu/site
ldd $B/bin/libggml-cuda.so | grep -E "not found|cublas|cudart|libcuda" || true
ldd $B/bin/libggml-cuda.so | grep -q "not found" && die "libggml-cuda.so has unresolved libraries"
[ "${LOCAL_TEST:-0}" = 1 ] && rm -f $B/bin/libggml-cuda.so

stamp "library check"
$PY - <<'EOF' || { [ "${LOCAL_TEST:-0}" = 1 ] && echo "(LOCAL_TEST: going on)"; } || die "llama_cpp does not load the CUDA build or offers no GPU offload"
import llama_cpp as lc
from localrun.hardware import devices
print("llama_cpp", lc.__version__, "from", lc.llama_cpp._base_path)
print("supports_gpu_offload", lc.llama_supports_gpu_offload())
assert lc.llama_supports_gpu_offload()
r = devices.probe_native()
print("build", r.build)
for d in r.devices: print("device", d)
assert any(d.is_gpu for d in r.devices), "no GPU device listed"
EOF

if [ "${MODE:-}" = diag ]; then
FAIL=0
stamp "diag: one model load per process (tests/gpu/test_offload.py::_load's code), variants"
for a in "3 --logcb" "3" "3 --warm --logcb" "99 --logcb" "-1 --logcb" "3 --init" "-1 --layers 2"; do
  timeout 60 $PY .gpu/diag_load.py $a > $OUT/d.txt 2>&1; rc=$?
  grep -v "^llama_model_loader\|^print_info\|^load_tensors\|^load:\|^llama_model_load" $OUT/d.txt | tail -4
  echo ">>> diag_load [$a] rc=$rc"
done
stamp "pytest tests/gpu with -p gpuwarm (the backend registry initialised before any load)"
timeout 90 $PY -m pytest -p gpuwarm -p no:cacheprovider -q tests/gpu -rs -v 2>&1 | grep -v "^  File" || { echo "!!! tests/gpu (gpuwarm) FAILED"; FAIL=1; }
CGDB=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
stamp "native backtrace: $CGDB diag_load.py 3 --logcb"
[ -n "$CGDB" ] && timeout 100 $CGDB -batch -ex "set pagination off" -ex "handle SIGALRM SIGPIPE nostop noprint" \
  -ex run -ex bt -ex "info sharedlibrary libggml" --args $PY .gpu/diag_load.py 3 --logcb > $OUT/gdb.txt 2>&1
grep -v "^\[New Thread\|^\[Thread\|^llama_model_loader\|^print_info\|^load" $OUT/gdb.txt | tail -45
stamp "bonus with -p gpuwarm"
LEFT=$(( ${DEADLINE:-540} - ($(date +%s) - T0) - 45 ))
echo "seconds left: $LEFT"
if [ $LEFT -gt 30 ]; then
timeout $LEFT $PY -m pytest -p gpuwarm -p no:cacheprovider -q --timeout 60 tests/integration/engine/test_engine_speculative.py \
  tests/integration/engine/test_engine_tiny.py -rs -W ignore::pytest.PytestConfigWarning 2>&1 | grep -v "^  File" | tail -80 \
  || { echo "!!! engine tests (gpuwarm) FAILED"; FAIL=1; }
fi
stamp "pytest tests/gpu without jaxtyping/xdist/benchmark/cov/anyio/mock plugins, no gpuwarm"
timeout 30 $PY -m pytest -p no:jaxtyping -p no:xdist -p no:benchmark -p no:cov -p no:anyio -p no:mock -p no:cacheprovider -q tests/gpu -x 2>&1 | grep -v "^  File" | tail -8
stamp "diag done FAIL=$FAIL"
return $FAIL
fi

FAIL=0
stamp "pytest tests/gpu"
timeout 150 $PY -m pytest -p no:cacheprovider -q tests/gpu -rs -v || { echo "!!! tests/gpu FAILED rc=$?"; FAIL=1; }

stamp "smoke (.gpu/smoke.py --cpu-compare)"
timeout 150 $PY .gpu/smoke.py --cpu-compare || { echo "!!! smoke FAILED rc=$?"; FAIL=1; }

stamp "bonus: engine integration tests on the GPU build (num_gpu None: llama.cpp's default offload)"
LEFT=$(( ${DEADLINE:-540} - ($(date +%s) - T0) - 10 ))
echo "seconds left for the bonus tests: $LEFT"
if [ $LEFT -le 30 ]; then echo "bonus tests skipped: no time left"; else
timeout $LEFT $PY -m pytest -p no:cacheprovider -q --timeout 100 tests/integration/engine/test_engine_speculative.py \
  tests/integration/engine/test_engine_tiny.py -rs -W ignore::pytest.PytestConfigWarning \
  || { echo "!!! engine tests FAILED rc=$?"; FAIL=1; }
fi

stamp "done FAIL=$FAIL"
return $FAIL
}

main 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
