#!/usr/bin/env bash
# Run HERE (a machine with PyPI), not on the device: recreates the git-ignored .gpu/ folder that
# benchmarks/gpu/serve_run.sh (and run.sh, spec_run.sh) need on a lent GPU machine without network.
#
#     bash benchmarks/gpu/prepare.sh        (from anywhere; about a minute; needs PyPI for the wheels)
#
# .gpu/ then holds:
#   llama.cpp/   the llama.cpp that the installed llama-cpp-python vendors, trimmed to what one cmake
#                configure needs to build `llama` (the libs llama-cpp-python loads) and `llama-server`:
#                CMakeLists.txt cmake/ include/ src/ ggml/ (CPU and CUDA backends only) common/ vendor/
#                tools/ (no tests or media; tools/ui without its web sources: the server embeds no UI)
#                scripts/ui-assets.cmake licenses/
#   site/        llama_cpp's Python package (same version, without its lib/: the device builds it)
#   wheels/      cp312 manylinux x86_64 wheels of every package `localrun serve`, `create` and `bench`
#                import (pinned to the versions of this venv), numpy excepted (the device has it)
#   tokenizer.json.gz   the Qwen2.5 tokenizer (the starter model's), for gen_q4km.py
#   the scripts of benchmarks/gpu/
# and is checked: a CPU cmake configure of the trimmed tree with the server on, and every source or
# header the local CPU build of llama-server compiled (its .d files) present in the trimmed copy.
# Settings: PY (default .venv/bin/python), LCPP_SRC (a llama.cpp tree of the same version; default
# /tmp/llama-server/llama_cpp_python-$VERSION/vendor/llama.cpp, else the sdist is downloaded),
# CLOSURE311=DIR: also download the same packages as cp311 wheels (plus numpy) into DIR, for a local
# LOCAL_TEST of serve_run.sh through the wheel path.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
G=$ROOT/.gpu
PY=${PY:-$ROOT/.venv/bin/python}
VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')
LCPP_SRC=${LCPP_SRC:-/tmp/llama-server/llama_cpp_python-$VERSION/vendor/llama.cpp}
say() { echo "== $*" >&2; }

if [ ! -f "$LCPP_SRC/CMakeLists.txt" ]; then
    say "no llama.cpp source at $LCPP_SRC: downloading the llama-cpp-python $VERSION sdist"
    mkdir -p /tmp/llama-server
    "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d /tmp/llama-server
    tar xzf "/tmp/llama-server/llama_cpp_python-$VERSION.tar.gz" -C /tmp/llama-server
    LCPP_SRC=/tmp/llama-server/llama_cpp_python-$VERSION/vendor/llama.cpp
fi

rm -rf "$G"
mkdir -p "$G/llama.cpp" "$G/site" "$G/wheels"

say "trimmed llama.cpp from $LCPP_SRC"
DROP_BACKENDS=""
for d in "$LCPP_SRC"/ggml/src/ggml-*/; do
    name=$(basename "$d")
    case $name in ggml-cpu|ggml-cuda|ggml-blas|ggml-rpc) ;; *) DROP_BACKENDS="$DROP_BACKENDS --exclude=ggml/src/$name";; esac
done
# shellcheck disable=SC2086
tar -C "$LCPP_SRC" -cf - \
    --exclude='*/tests' --exclude='*/test-*.jpeg' --exclude='*/test-*.mp3' --exclude='*/test-*.mp4' \
    --exclude='*/README*.md' --exclude='__pycache__' --exclude='*.py' --exclude='tools/server/bench' \
    --exclude='tools/ui/*' $DROP_BACKENDS \
    CMakeLists.txt LICENSE cmake include src ggml common vendor tools licenses scripts/ui-assets.cmake \
    | tar -C "$G/llama.cpp" -xf -
for f in CMakeLists.txt ui.cpp.in ui.h.in sources.cmake; do cp "$LCPP_SRC/tools/ui/$f" "$G/llama.cpp/tools/ui/"; done

say "check: CPU configure of the trimmed tree (server on)"
CFG=$(mktemp -d /tmp/gpu-cfg-check.XXXXXX)
cmake -S "$G/llama.cpp" -B "$CFG" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$CFG.log" 2>&1 \
    || { tail -30 "$CFG.log"; echo "the trimmed tree does not configure" >&2; exit 1; }
ninja -C "$CFG" -t targets all >"$CFG.targets" 2>&1
grep -q '^llama-server: phony' "$CFG.targets" || { echo "no llama-server target" >&2; exit 1; }
rm -rf "$CFG" "$CFG.log" "$CFG.targets"

LOCAL_BUILD=$LCPP_SRC/build
if ls "$LOCAL_BUILD"/tools/server/CMakeFiles/*/*.o.d >/dev/null 2>&1; then
    say "check: every file the local llama-server build compiled is in the trimmed copy"
    "$PY" - "$LCPP_SRC" "$G/llama.cpp" "$LOCAL_BUILD" <<'EOF'
import pathlib, sys
src, dst, build = (pathlib.Path(p).resolve() for p in sys.argv[1:])
dirs = ["src", "ggml", "common", "tools/server", "tools/mtmd", "tools/ui", "vendor"]
needed, missing = set(), set()
for d in dirs:
    for dep in (build / d).rglob("*.o.d"):
        for tok in dep.read_text(errors="replace").replace("\\\n", " ").split():
            if tok.endswith(":") or not tok.startswith("/"):
                continue
            p = pathlib.Path(tok).resolve()
            if p.is_relative_to(src) and not p.is_relative_to(build):
                needed.add(p.relative_to(src))
for rel in sorted(needed):
    if not (dst / rel).exists():
        missing.add(rel)
print(f"{len(needed)} files used by the local build; missing in the copy: {len(missing)}")
for rel in sorted(missing)[:20]:
    print("  missing:", rel)
sys.exit(1 if missing else 0)
EOF
else
    say "no local llama-server build at $LOCAL_BUILD: skipping the include check"
fi

say "site: llama_cpp $VERSION without lib/"
SITE_PKGS=$("$PY" -c 'import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))')
tar -C "$SITE_PKGS" -cf - --exclude=llama_cpp/lib --exclude=__pycache__ --exclude=llama_cpp/server \
    llama_cpp "llama_cpp_python-$VERSION.dist-info" | tar -C "$G/site" -xf -

# What `localrun serve`, its runner, `localrun create` and `localrun bench` import (PYTHONPROFILEIMPORTTIME
# over a local run), with their dependencies; numpy is on the device. Versions: this venv's.
PKGS="aiohttp aiohappyeyeballs aiosignal attrs frozenlist multidict propcache yarl
      httpx httpcore h11 anyio sniffio idna certifi
      jinja2 markupsafe platformdirs prometheus_client psutil
      rich pygments markdown-it-py mdurl orjson
      gguf pyyaml tqdm diskcache typing_extensions"
PINS=$("$PY" - $PKGS <<'EOF'
import importlib.metadata as m, sys
print(" ".join(f"{p}=={m.version(p)}" for p in sys.argv[1:]))
EOF
)
say "wheels (cp312, manylinux x86_64): $PINS"
PLAT=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
      --platform manylinux_2_34_x86_64)
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --abi abi3 --abi none "${PLAT[@]}" -d "$G/wheels" $PINS 2>&1 | { grep -v "is ignored: it is neither" || true; }
if [ -n "${CLOSURE311:-}" ]; then
    say "the same packages as cp311 wheels, plus numpy, in $CLOSURE311 (for LOCAL_TEST through the wheels)"
    mkdir -p "$CLOSURE311"
    NUMPY=$("$PY" -c 'import numpy; print(numpy.__version__)')
    # shellcheck disable=SC2086
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        --abi abi3 --abi none "${PLAT[@]}" -d "$CLOSURE311" $PINS "numpy==$NUMPY" 2>&1 \
        | { grep -v "is ignored: it is neither" || true; }
fi

say "tokenizer: the starter model's (Qwen2.5), for gen_q4km.py"
QWEN=$("$PY" benchmarks/models.py qwen)
"$PY" benchmarks/gpu/gen_q4km.py --export-vocab "$G/tokenizer.json.gz" --vocab-from "$QWEN"

cp benchmarks/gpu/*.sh benchmarks/gpu/*.py "$G/"
say "done"
ls "$G" "$G/wheels"
du -sh "$G"/* "$G"
