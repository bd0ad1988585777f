#!/usr/bin/env bash
# Rebuild llama-cpp-python (the engine localrun runs on) for one backend, in the given Python environment.
#
#     packaging/build-llama-cpp.sh BACKEND [--dry-run] [--python PY] [--version X.Y.Z]
#
# BACKEND: cpu           native CPU build (the default pip build: AVX2/AVX-512/NEON as this CPU has)
#          cpu-portable  every x86 CPU variant as loadable modules, picked at run time (for images)
#          cuda          NVIDIA (needs the CUDA toolkit: nvcc)
#          metal         Apple Silicon (needs Xcode command line tools; on by default on arm64 macOS)
#          vulkan        any Vulkan 1.2 GPU (needs the Vulkan headers/loader and glslc)
#          rocm          AMD via HIP (needs ROCm: hipconfig, and the GPU's gfx target)
# --dry-run    print what would run and exit (nothing is installed)
# --python PY  the interpreter of the environment localrun lives in (default: .venv/bin/python, else python3)
# --version V  llama-cpp-python version (default: the one installed now, else 0.3.36)
#
# Settings (environment): CUDA_ARCHS (e.g. "90" for H100/H200, "89" for RTX 40xx; default "native" when
# nvidia-smi sees a GPU), AMDGPU_TARGETS (e.g. gfx1100; default from rocminfo), CMAKE_BUILD_PARALLEL_LEVEL
# (default: all cores), EXTRA_CMAKE_ARGS (appended).
# Afterwards it runs `localrun info --json` and fails unless the build reports the backend it was asked for.
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

BACKEND=${1:-}
[ -n "$BACKEND" ] || usage
shift
DRY_RUN=0
PY=""
VERSION=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --python) PY=${2:?--python needs a path}; shift ;;
        --version) VERSION=${2:?--version needs a version}; shift ;;
        -h|--help) usage ;;
        *) echo "unknown option: $1" >&2; usage ;;
    esac
    shift
done

if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ -z "$VERSION" ]; then
    VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || echo 0.3.36)
fi

ENV_PREFIX=()
EXPECT=""
case "$BACKEND" in
    cpu)
        CMAKE_ARGS="-DGGML_NATIVE=on"; EXPECT=CPU ;;
    cpu-portable)
        CMAKE_ARGS="-DGGML_NATIVE=off -DGGML_BACKEND_DL=on -DGGML_CPU_ALL_VARIANTS=on"; EXPECT=CPU ;;
    cuda)
        CMAKE_ARGS="-DGGML_CUDA=on"; EXPECT=CUDA
        if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
            ENV_PREFIX+=("CUDACXX=/usr/local/cuda/bin/nvcc")
        elif ! command -v nvcc >/dev/null 2>&1; then
            echo "note: nvcc not found; install the CUDA toolkit or set CUDACXX" >&2
        fi
        ARCHS=${CUDA_ARCHS:-}
        if [ -z "$ARCHS" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
            ARCHS=native  # only this machine's GPU: a much shorter build than every architecture
        fi
        [ -z "$ARCHS" ] || CMAKE_ARGS="$CMAKE_ARGS -DCMAKE_CUDA_ARCHITECTURES=$ARCHS" ;;
    metal)
        CMAKE_ARGS="-DGGML_METAL=on"; EXPECT=Metal
        if [ "$(uname -s)" != Darwin ]; then echo "note: Metal builds only on macOS" >&2; fi ;;
    vulkan)
        CMAKE_ARGS="-DGGML_VULKAN=on"; EXPECT=Vulkan
        command -v glslc >/dev/null 2>&1 || echo "note: glslc not found (Debian/Ubuntu: apt install glslc libvulkan-dev)" >&2 ;;
    rocm)
        CMAKE_ARGS="-DGGML_HIP=on"; EXPECT=ROCm
        TARGETS=${AMDGPU_TARGETS:-}
        if [ -z "$TARGETS" ] && command -v rocminfo >/dev/null 2>&1; then
            TARGETS=$(rocminfo 2>/dev/null | grep -o -m1 'gfx[0-9a-f]*' || true)
        fi
        [ -z "$TARGETS" ] || CMAKE_ARGS="$CMAKE_ARGS -DAMDGPU_TARGETS=$TARGETS"
        if command -v hipconfig >/dev/null 2>&1; then
            ENV_PREFIX+=("HIPCXX=$(hipconfig -l)/clang" "HIP_PATH=$(hipconfig -R)")
        else
            echo "note: hipconfig not found; install ROCm (https://rocm.docs.amd.com)" >&2
        fi ;;
    *) echo "unknown backend: $BACKEND" >&2; usage ;;
esac
CMAKE_ARGS="$CMAKE_ARGS${EXTRA_CMAKE_ARGS:+ $EXTRA_CMAKE_ARGS}"
JOBS=${CMAKE_BUILD_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}

# --no-cache-dir: pip would otherwise reuse the wheel it built before (for another backend);
# --no-deps: numpy and friends stay as they are.
CMD=("$PY" -m pip install --force-reinstall --no-cache-dir --no-deps --verbose "llama-cpp-python==$VERSION")
echo "CMAKE_ARGS=\"$CMAKE_ARGS\" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS ${ENV_PREFIX[*]:-}${ENV_PREFIX[*]:+ }${CMD[*]}"
[ "$DRY_RUN" = 1 ] && exit 0

LOG=$(mktemp -t llama-build.XXXXXX.log)
echo "building (several minutes; log: $LOG)" >&2
if ! env CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" "${ENV_PREFIX[@]}" "${CMD[@]}" >"$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    echo "build failed; full log: $LOG" >&2
    exit 1
fi

GOT=$("$PY" -m localrun info --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["build"]["backend"])')
echo "localrun info: build backend $GOT" >&2
case "$GOT" in
    *"$EXPECT"*) echo "ok: llama-cpp-python $VERSION built with $EXPECT" >&2 ;;
    *) echo "the build reports '$GOT', not $EXPECT: see $LOG" >&2; exit 1 ;;
esac
