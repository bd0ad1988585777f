#!/usr/bin/env bash
# Device run for issue #29 point 5: localrun against llama-server on one GPU, a random-weight
# Llama-3-8B-shaped Q4_K_M GGUF, 1/8/32/64 streams, 512-token prompts, 256 tokens out.
#
#     bash .gpu/serve_run.sh          (repo root, .gpu/ made by benchmarks/gpu/prepare.sh; no network)
#
# 1. unpacks .gpu/wheels into $W/site (zip extraction: no pip, no network);
# 2. builds `llama`, `mtmd` and `llama-server` with CUDA from .gpu/llama.cpp in one cmake tree ($B),
#    while gen_q4km.py writes the model and `localrun create` stores it, in the background;
# 3. starts llama-server (-ngl 99 -np 64 --kv-unified -fa on -c 64*832) and `localrun serve`
#    (LLAMA_CPP_LIB_PATH and MTMD_CPP_LIB = the CUDA build: the engine loads libmtmd too;
#    LOCALRUN_NUM_PARALLEL=64, LOCALRUN_CONTEXT_LENGTH=832, LOCALRUN_PREFIX_CACHE=off (nothing saved
#    at shutdown), LOCALRUN_TRACE on), checks and prints that both hold the model on the GPU
#    (localrun: /api/ps processor "100% GPU"; llama-server: its GPU memory), warms both;
# 4. `localrun bench` at 1,8,32,64 streams, llama-server measured interleaved (--compare), a
#    measurement window per level sized to the time left;
# 5. stops the daemon (its runner writes its trace) and reports, from the engine's trace marks,
#    the Python share of a steady decode step at each level: step to step minus llama_decode
#    (which the engine times up to llama_synchronize on pure decode steps).
# Writes $OUT/log.txt (everything), serve_gpu.json/.md (the bench), summary.md (ratios, step
# share), step_share.json, trace_report.md, the servers' logs, gpu.csv (nvidia-smi once a second).
# Every phase is stamped with elapsed seconds; each has a timeout from the time left before
# DEADLINE (default 540 s), and a watchdog stops everything at DEADLINE.
#
# Settings: OUT (/tmp/out), DEADLINE, PY (python3), SPEC (LOCALRUN_SPECULATIVE for the daemon,
# default 0: greedy output of a random model loops, and prompt-lookup drafts would then measure
# the drafter, not serving), BENCH_DURATION / BENCH_WARMUP (seconds per level; default: sized to
# the time left), B (build dir, /tmp/lcpp-build, reused when it holds both targets), W (/tmp/lr-gpu).
# LOCAL_TEST=1 (no GPU): no build, llama_cpp's own CPU libs and the CPU llama-server at
# $LOCAL_LLAMA_SERVER, a tiny model, 4 slots, levels 1,4, 64 tokens in, 16 out; PY defaults to
# .venv/bin/python and the wheels are skipped unless WHEELS=DIR names some (e.g. cp311 ones from
# prepare.sh's CLOSURE311, with PY=/usr/bin/python3.11: the device's import path, locally).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); export OUT
DEADLINE=${DEADLINE:-540}
T0=$(date +%s)
LOCAL=${LOCAL_TEST:-0}
REPO=$PWD
G=$REPO/.gpu
W=${W:-/tmp/lr-gpu}
B=${B:-/tmp/lcpp-build}
LS_PORT=${LS_PORT:-18080}
LR_PORT=${LR_PORT:-18081}
SPEC=${SPEC:-0}
ENGINE_TESTS_S=${ENGINE_TESTS_S:-40}   # seconds kept after the bench for the engine tests (0: none)
# A second daemon with other settings (ALT_ENV="VAR=value ..."), measured against the first at ALT_LEVELS
# after the main bench (an A/B of one setting in the same run); ALT_S seconds are kept for it.
ALT_ENV=${ALT_ENV:-}; ALT_LEVELS=${ALT_LEVELS:-1}; ALT_PORT=${ALT_PORT:-18082}; ALT_S=${ALT_S:-0}
[ -n "$ALT_ENV" ] || ALT_S=0
MODEL=$W/model.gguf
LR_MODEL=rand8b
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
if [ "$LOCAL" = 1 ]; then
  PY=${PY:-$REPO/.venv/bin/python}
  WHEELS=${WHEELS:-}
  NP=4; LEVELS=1,4; IN=64; OUTTOK=16; CTX_PER=$((64 + 16 + 64))
  GEN_ARGS="--n-layer 2 --n-embd 256 --n-ff 512 --n-head 4 --n-head-kv 2"
  BENCH_DURATION=${BENCH_DURATION:-4}; BENCH_WARMUP=${BENCH_WARMUP:-1}; TAILS=4; ENGINE_TESTS_S=0
  LOCAL_LLAMA_SERVER=${LOCAL_LLAMA_SERVER:-/tmp/llama-server/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server}
else
  PY=${PY:-python3}
  WHEELS=${WHEELS:-$G/wheels}
  NP=64; LEVELS=${LEVELS:-1,8,32,64}; IN=512; OUTTOK=256; CTX_PER=$((512 + 256 + 64))
  GEN_ARGS=""
  BENCH_WARMUP=${BENCH_WARMUP:-5}; TAILS=${TAILS:-25}   # TAILS: the last requests of every level, one target, s
fi
N_LEVELS=$(echo "$LEVELS" | tr ',' '\n' | wc -l)

elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(date +%s) + T0 )); }
stamp() { echo "=== [+$(elapsed)s] $*"; }
die() { stamp "FATAL: $*"; exit 2; }
PGIDS=$W/pgids   # process groups this script started (setsid), for cleanup and the watchdog

start_group() {  # LOG CMD...: run CMD in its own session (process group); prints its pid
  local log=$1; shift
  setsid "$@" >"$log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" >>"$PGIDS"
  echo "$pid"
}

stop_group() {  # PID [SECONDS]: SIGTERM the leader only (the daemon stops its runner), then the group
  local pid=$1 wait_s=${2:-15}
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq $((wait_s * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -TERM -- "-$pid" 2>/dev/null; sleep 0.5; kill -KILL -- "-$pid" 2>/dev/null
  return 0
}

cleanup() {
  [ -n "${WATCHDOG:-}" ] && { kill "$WATCHDOG" "$(cat "$W/watchdog.sleep" 2>/dev/null)" 2>/dev/null; }
  [ -f "$PGIDS" ] || return 0
  while read -r pid; do kill -TERM -- "-$pid" 2>/dev/null; done <"$PGIDS"
  sleep 1
  while read -r pid; do kill -KILL -- "-$pid" 2>/dev/null; done <"$PGIDS"
  rm -f "$PGIDS"
}

wait_http() {  # URL PID LOG SECONDS: until URL answers 200 (the process must stay alive)
  "$PY" - "$@" <<'EOF'
import sys, time, os, httpx
url, pid, log, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
end = time.monotonic() + limit
while time.monotonic() < end:
    try:
        if httpx.get(url, timeout=2).status_code == 200:
            sys.exit(0)
    except httpx.HTTPError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        print(f"process {pid} exited; last lines of {log}:")
        print("".join(open(log, errors="replace").readlines()[-25:]))
        sys.exit(1)
    time.sleep(0.25)
print(f"{url} did not answer within {limit:.0f}s; last lines of {log}:")
print("".join(open(log, errors="replace").readlines()[-25:]))
sys.exit(1)
EOF
}

main() {
trap cleanup EXIT
mkdir -p "$W"; : >"$PGIDS"
rm -rf "$W/site" "$W/trace" "$W/models" "$W/home" "$W/cache" "$W/data" "$W/config"
# The watchdog's sleep must not hold the pipe to tee (the script would end only when it does).
( sleep "$(left)" </dev/null >/dev/null 2>&1 & echo $! >"$W/watchdog.sleep"; wait $!
  echo "=== [+$(elapsed)s] DEADLINE ${DEADLINE}s reached: stopping everything"
  [ -f "$PGIDS" ] && while read -r pid; do kill -KILL -- "-$pid" 2>/dev/null; done <"$PGIDS" ) &
WATCHDOG=$!

stamp "machine (LOCAL_TEST=$LOCAL, DEADLINE=${DEADLINE}s)"
if [ "$LOCAL" != 1 ]; then
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || die "no nvidia-smi"
fi
nproc; free -g | head -2; df -h /tmp | tail -1
PY=$(command -v "$PY") || die "no python at $PY"
echo "python: $PY $($PY --version 2>&1)"
git -C "$REPO" log -1 --format="localrun: %h %s" 2>/dev/null | cut -c1-120
git -C "$REPO" status --short 2>/dev/null | head -20

# --- Python packages ------------------------------------------------------------------------
SITE=$W/site
if [ -n "$WHEELS" ]; then
  stamp "unpacking $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE"
  mkdir -p "$SITE"
  "$PY" - "$SITE" "$WHEELS"/*.whl <<'EOF' || die "wheel unpacking failed"
import sys, zipfile
for whl in sys.argv[2:]:
    with zipfile.ZipFile(whl) as z:
        z.extractall(sys.argv[1])
EOF
  export PYTHONPATH=$REPO:$SITE:$G/site
else
  export PYTHONPATH=$REPO
fi
"$PY" - <<'EOF' || die "a package the daemon or the bench imports is missing"
import importlib
mods = ["numpy", "aiohttp", "httpx", "jinja2", "markupsafe", "gguf", "yaml", "psutil", "prometheus_client",
        "rich", "platformdirs", "diskcache", "orjson", "yarl", "multidict", "frozenlist", "propcache", "aiosignal",
        "aiohappyeyeballs", "attr", "anyio", "h11", "httpcore", "idna", "certifi", "sniffio",
        "localrun.server.app", "localrun.bench.runner", "localrun.cli.store_cmds"]
for m in mods:
    mod = importlib.import_module(m)
print("imports ok:", ", ".join(f"{m} {getattr(importlib.import_module(m), '__version__', '')}".strip()
                               for m in mods[:12]))
EOF

# --- model (background): generate, then store it in localrun's store ---------------------------
stamp "model: gen_q4km.py $GEN_ARGS, then localrun create (background)"
mkdir -p "$W/home"
printf 'FROM %s\n' "$MODEL" >"$W/Modelfile"
LR_ENV=(LOCALRUN_HOST=127.0.0.1:$LR_PORT LOCALRUN_MODELS=$W/models HOME=$W/home XDG_CACHE_HOME=$W/cache
        XDG_DATA_HOME=$W/data XDG_CONFIG_HOME=$W/config)
# its own process group (setsid), a child of this shell (wait gives its status), stopped by cleanup
setsid bash -c 'set -o pipefail; model=$1 py=$2 g=$3 gen_args=$4 name=$5 modelfile=$6; shift 6
  rm -f "$model"
  nice -n 5 "$py" "$g/gen_q4km.py" "$model" --vocab-from "$g/tokenizer.json.gz" $gen_args || exit 1
  t=$(date +%s)
  env "$@" "$py" -m localrun create "$name" -f "$modelfile" 2>&1 | tail -3 || exit 1
  echo "localrun create: $(( $(date +%s) - t ))s"' \
  _ "$MODEL" "$PY" "$G" "$GEN_ARGS" "$LR_MODEL" "$W/Modelfile" "${LR_ENV[@]}" >"$OUT/gen.txt" 2>&1 </dev/null &
GEN_PID=$!
echo "$GEN_PID" >>"$PGIDS"

# --- build ----------------------------------------------------------------------------------
if [ "$LOCAL" = 1 ]; then
  LIB=$(env -u PYTHONPATH "$REPO/.venv/bin/python" -c \
    'import importlib.util as u, os; print(os.path.join(os.path.dirname(u.find_spec("llama_cpp").origin), "lib"))')
  LLAMA_SERVER=$LOCAL_LLAMA_SERVER
  SERVER_LIBS=$(dirname "$LLAMA_SERVER")
  [ -x "$LLAMA_SERVER" ] || die "no CPU llama-server at $LLAMA_SERVER (../shared/bench/build_llama_server.sh builds one)"
  stamp "LOCAL_TEST: no build; libs $LIB, server $LLAMA_SERVER"
else
  NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || die "no nvcc"
  CUDA_HOME_GUESS=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  echo "nvcc: $NVCC ($("$NVCC" --version | tail -1)); cmake $(cmake --version | head -1 | awk '{print $3}'); ninja $(ninja --version)"
  EXTRA=()
  if ! ls "$CUDA_HOME_GUESS"/lib64/stubs/libcuda.so "$CUDA_HOME_GUESS"/targets/x86_64-linux/lib/stubs/libcuda.so \
          /usr/lib/x86_64-linux-gnu/libcuda.so /usr/local/cuda/lib64/stubs/libcuda.so >/dev/null 2>&1; then
    LIBCUDA=$(ldconfig -p | awk '/libcuda\.so(\.1)? /{print $NF; exit}')
    [ -z "$LIBCUDA" ] && LIBCUDA=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name 'libcuda.so*' 2>/dev/null | head -1)
    echo "libcuda for linking: ${LIBCUDA:-none}"
    if [ -n "$LIBCUDA" ]; then EXTRA+=(-DCUDA_cuda_driver_LIBRARY=$LIBCUDA); else EXTRA+=(-DGGML_CUDA_NO_VMM=ON); fi
  fi
  if [ -x $B/bin/llama-server ] && [ -f $B/bin/libllama.so ] && [ -f $B/bin/libmtmd.so ] && [ -f $B/bin/libggml-cuda.so ]; then
    stamp "reusing the build in $B"
  else
    stamp "configure (CUDA, sm_90, server on)"
    cmake -S "$G/llama.cpp" -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" \
      -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=ON \
      -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA_QUANTS=f16-f16 -DGGML_CUDA_COMPRESSION_MODE=none -DGGML_CCACHE=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF "${EXTRA[@]}" >"$OUT/cmake.txt" 2>&1 \
      || { tail -40 "$OUT/cmake.txt"; die "cmake configure failed"; }
    grep -E "CUDA Toolkit|CUDA.*found|cuBLAS|Including CUDA|CMAKE_CUDA_ARCH" "$OUT/cmake.txt" | head -8
    BUILD_S=$(( $(left) - 175 ))
    [ $BUILD_S -gt 60 ] || die "only $(left)s left before the build"
    stamp "build: ninja -j 16 llama mtmd llama-server (timeout ${BUILD_S}s)"
    BT0=$(date +%s)
    timeout -k 5 $BUILD_S cmake --build $B --target llama mtmd llama-server -j 16 >"$OUT/build.txt" 2>&1
    rc=$?
    stamp "build rc=$rc in $(( $(date +%s) - BT0 ))s"
    if [ $rc -ne 0 ]; then
      grep -B2 -A12 -m3 "error\|FAILED" "$OUT/build.txt" | head -60; tail -5 "$OUT/build.txt"
      [ $rc -eq 124 ] && die "build timed out after ${BUILD_S}s"
      die "build failed"
    fi
    rm -f "$OUT/build.txt"
  fi
  ls -la $B/bin/ | grep -E "\.so$|llama-server$"
  LIB=$B/bin
  LLAMA_SERVER=$B/bin/llama-server
  SERVER_LIBS=$B/bin:$CUDA_HOME_GUESS/lib64
  export LD_LIBRARY_PATH=$B/bin:$CUDA_HOME_GUESS/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  ldd $B/bin/libggml-cuda.so | grep -E "not found|cublas|cudart" || true
  ldd $B/bin/libggml-cuda.so | grep -q "not found" && die "libggml-cuda.so has unresolved libraries"
fi
export LLAMA_CPP_LIB_PATH=$LIB MTMD_CPP_LIB=$LIB   # llama_cpp.mtmd_cpp (the engine loads it) reads MTMD_CPP_LIB

stamp "library check (llama_cpp with LLAMA_CPP_LIB_PATH=$LIB)"
"$PY" - "$LOCAL" <<'EOF' || die "llama_cpp does not load the build, or it offers no GPU offload"
import sys
import llama_cpp as lc
print("llama_cpp", lc.__version__, "from", lc.__file__, "libs", lc.llama_cpp._base_path)
from llama_cpp import mtmd_cpp
print("mtmd from", mtmd_cpp._libmtmd_base_path)
print("supports_gpu_offload", lc.llama_supports_gpu_offload())
print(lc.llama_print_system_info().decode())
assert sys.argv[1] == "1" or lc.llama_supports_gpu_offload()
EOF

stamp "waiting for the model ($(left)s left)"
for _ in $(seq $(( $(left) - 150 > 5 ? $(left) - 150 : 5 ))); do kill -0 $GEN_PID 2>/dev/null || break; sleep 1; done
kill -0 $GEN_PID 2>/dev/null && { cat "$OUT/gen.txt"; die "model generation still running"; }
wait $GEN_PID; grc=$?
cat "$OUT/gen.txt"
[ $grc -eq 0 ] || die "model generation or localrun create failed (rc=$grc)"
ls -la "$MODEL"

# --- servers --------------------------------------------------------------------------------
[ "$LOCAL" != 1 ] && MEM0=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
stamp "start llama-server (-ngl 99 -np $NP --kv-unified -fa on -c $((NP * CTX_PER))) and localrun serve"
LS_PID=$(start_group "$OUT/llama_server.log" env LD_LIBRARY_PATH="$SERVER_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$LLAMA_SERVER" -m "$MODEL" -ngl 99 -np $NP --kv-unified -fa on -c $((NP * CTX_PER)) \
  --host 127.0.0.1 --port $LS_PORT --no-webui)
LR_PID=$(start_group "$OUT/localrun_serve.log" env "${LR_ENV[@]}" LOCALRUN_KEEP_ALIVE=-1 LOCALRUN_NUM_PARALLEL=$NP \
  LOCALRUN_CONTEXT_LENGTH=$CTX_PER LOCALRUN_TRACE="$W/trace" LOCALRUN_PREFIX_CACHE=off LOCALRUN_SPECULATIVE=$SPEC \
  "$PY" -m localrun serve)
wait_http "http://127.0.0.1:$LR_PORT/api/version" "$LR_PID" "$OUT/localrun_serve.log" 60 || die "localrun serve did not start"
stamp "localrun is up; loading $LR_MODEL"
"$PY" - "$LR_PORT" "$LR_MODEL" <<'EOF' || die "localrun could not load the model"
import sys, httpx, json
port, model = sys.argv[1], sys.argv[2]
r = httpx.post(f"http://127.0.0.1:{port}/api/generate", json={"model": model, "prompt": "", "keep_alive": -1},
               timeout=180)
print("load:", r.status_code, r.text[:300])
r.raise_for_status()
ps = httpx.get(f"http://127.0.0.1:{port}/api/ps", timeout=10).json()
for m in ps.get("models", []):
    print("api/ps:", json.dumps({k: m.get(k) for k in ("name", "size", "size_vram", "context_length")}),
          m.get("details", {}).get("quantization_level"))
EOF
if [ -n "$ALT_ENV" ]; then
  stamp "second daemon on :$ALT_PORT with $ALT_ENV"
  mkdir -p "$W/alt/home"
  # shellcheck disable=SC2086
  ALT_PID=$(start_group "$OUT/alt_serve.log" env LOCALRUN_HOST=127.0.0.1:$ALT_PORT LOCALRUN_MODELS=$W/models \
    HOME=$W/alt/home XDG_CACHE_HOME=$W/alt/cache XDG_DATA_HOME=$W/alt/data XDG_CONFIG_HOME=$W/alt/config \
    LOCALRUN_KEEP_ALIVE=-1 LOCALRUN_NUM_PARALLEL=$NP LOCALRUN_CONTEXT_LENGTH=$CTX_PER LOCALRUN_PREFIX_CACHE=off \
    LOCALRUN_SPECULATIVE=$SPEC $ALT_ENV "$PY" -m localrun serve)
  wait_http "http://127.0.0.1:$ALT_PORT/api/version" "$ALT_PID" "$OUT/alt_serve.log" 60 || die "the second daemon did not start"
  "$PY" -c "import httpx,sys; r = httpx.post('http://127.0.0.1:$ALT_PORT/api/generate', json={'model': '$LR_MODEL', 'prompt': '', 'keep_alive': -1}, timeout=180); print('alt load:', r.status_code, r.text[:200]); r.raise_for_status()" \
    || die "the second daemon could not load the model"
fi
wait_http "http://127.0.0.1:$LS_PORT/health" "$LS_PID" "$OUT/llama_server.log" 120 || die "llama-server did not start"
stamp "both up"

stamp "where the model runs"
echo "--- llama-server:"
grep -E "offloaded|using device|model buffer|KV buffer|GPU|CUDA|n_slots|n_ctx_slot|threadpool" \
  "$OUT/llama_server.log" | head -14
echo "--- localrun:"
grep -E "loading |loaded |placed|processor|offload|GPU|CUDA" "$OUT/localrun_serve.log" | grep -v "GET \|POST " | head -14
# llama-server logs no load lines at its default verbosity (and -lv 4 would log every request): its
# evidence is the GPU memory it holds (its process in nvidia-smi, else the growth of memory.used).
if [ "$LOCAL" != 1 ]; then
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits >"$W/apps.csv" 2>&1
  cat "$W/apps.csv"
  MEM1=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
fi
"$PY" - "$LR_PORT" "$OUT" "$LOCAL" "$LS_PID" "$MODEL" "$W/apps.csv" "${MEM0:-0}" "${MEM1:-0}" <<'EOF'
import os, sys, httpx
port, out, local, ls_pid, model, apps, mem0, mem1 = sys.argv[1:]
local = local == "1"
ps = httpx.get(f"http://127.0.0.1:{port}/api/ps", timeout=10).json()["models"]
# processor "100% GPU": every layer offloaded, as llama.cpp reported it (the scheduler reconciles its plan
# with the load report); token embeddings stay in host memory in both servers, as llama.cpp always does
lr_full = bool(ps) and all(m.get("processor") == "100% GPU" for m in ps)
for m in ps:
    print(f"localrun /api/ps: processor {m.get('processor')!r}, gpu_layers {m.get('gpu_layers')}, "
          f"size_vram {m.get('size_vram')} of {m.get('size')}, llama.cpp buffers {m.get('split')}")
print(f"localrun: every layer on the GPU: {lr_full}")
model_mib = os.path.getsize(model) / 2**20
used = {}
if os.path.exists(apps):
    for line in open(apps):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and parts[2].isdigit():
            used[int(parts[0])] = (parts[1], int(parts[2]))
if int(ls_pid) in used:
    ls_full = used[int(ls_pid)][1] >= 0.95 * model_mib
    print(f"llama-server (pid {ls_pid}) holds {used[int(ls_pid)][1]} MiB of GPU memory, model file {model_mib:.0f} MiB: "
          f"weights on the GPU: {ls_full}")
elif len(used) >= 2:  # other pids (a container's pid namespace): both servers' processes must hold the weights
    big = [mib for _, mib in used.values() if mib >= 0.95 * model_mib]
    ls_full = len(big) >= 2
    print(f"nvidia-smi lists {len(used)} processes (not by this namespace's pids), {len(big)} holding at least "
          f"the model file ({model_mib:.0f} MiB): both servers' weights on the GPU: {ls_full}")
else:
    grown = int(mem1) - int(mem0)
    others = sum(mib for pid, (_, mib) in used.items() if pid != int(ls_pid))
    ls_full = grown - max(others, model_mib) >= 0.95 * model_mib
    print(f"llama-server not in nvidia-smi's process list; GPU memory grew {grown} MiB since before the servers "
          f"(localrun's part >= {max(others, model_mib):.0f} MiB), model file {model_mib:.0f} MiB: weights on the GPU: {ls_full}")
log = open(f"{out}/llama_server.log", errors="replace").read()
if "no usable GPU" in log:
    ls_full = False
    print("llama-server: 'no usable GPU found' in its log")
if not local and not (lr_full and ls_full):
    print("!!! NOT EVERY LAYER IS ON THE GPU IN BOTH SERVERS: the comparison below is not the one asked for")
EOF
if [ "$LOCAL" != 1 ]; then
  setsid nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv -l 1 \
    >"$OUT/gpu.csv" 2>&1 </dev/null &
  SMI_PID=$!
  echo "$SMI_PID" >>"$PGIDS"
fi

BENCH=("$PY" -m localrun bench --base-url "127.0.0.1:$LR_PORT" --model "$LR_MODEL" --label localrun
       --tokenizer-url "127.0.0.1:$LR_PORT" --compare "127.0.0.1:$LS_PORT" --compare-label llama-server
       --input-tokens $IN --timeout 120)
stamp "warm-up: both servers, 8 streams, $IN tokens in, 32 out"
timeout -k 5 60 "${BENCH[@]}" --concurrency 8 --requests 8 --output-tokens 32 --pause 0 -q \
  --json "$OUT/warmup.json" >"$OUT/warmup.txt" 2>&1 || { tail -20 "$OUT/warmup.txt"; die "warm-up failed"; }
grep -E "│ (localrun|llama-server)" "$OUT/warmup.txt" | cut -c1-150

# --- the bench --------------------------------------------------------------------------------
BENCH_S=$(( $(left) - 30 - ENGINE_TESTS_S - ALT_S ))
[ $BENCH_S -ge 20 ] || die "only $(left)s left: no time for the bench"
if [ -z "${BENCH_DURATION:-}" ]; then
  BENCH_DURATION=$(( (BENCH_S - 5 - 2 * TAILS - 2 * N_LEVELS * (BENCH_WARMUP + 1)) / (2 * N_LEVELS) ))
  [ $BENCH_DURATION -gt 15 ] && BENCH_DURATION=15
  [ $BENCH_DURATION -lt 3 ] && BENCH_DURATION=3
fi
stamp "bench: levels $LEVELS, $IN in / $OUTTOK out, window ${BENCH_DURATION}s after ${BENCH_WARMUP}s of warm-up per level and target (timeout ${BENCH_S}s)"
BENCH_T0=$("$PY" -c 'import time; print(time.monotonic_ns())')   # the trace's clock: steps before it are warm-up
timeout -k 10 $BENCH_S "${BENCH[@]}" --concurrency $LEVELS --output-tokens $OUTTOK --duration $BENCH_DURATION \
  --warmup $BENCH_WARMUP --pause 1 --json "$OUT/serve_gpu.json" --markdown "$OUT/serve_gpu.md" 2>&1 \
  | grep -v "^\s*$"
stamp "bench rc=${PIPESTATUS[0]}"
[ -n "${SMI_PID:-}" ] && kill $SMI_PID 2>/dev/null

if [ -n "$ALT_ENV" ] && [ "$(left)" -gt $(( ALT_S / 2 + 30 )) ]; then
  A_S=$(( $(left) - 30 - ENGINE_TESTS_S ))
  [ $A_S -gt $ALT_S ] && A_S=$ALT_S
  A_DUR=$(( (A_S - 10) / 2 - BENCH_WARMUP - 4 )); [ $A_DUR -lt 3 ] && A_DUR=3
  stamp "A/B: $ALT_ENV against the default daemon, levels $ALT_LEVELS, window ${A_DUR}s (timeout ${A_S}s)"
  timeout -k 5 $A_S "$PY" -m localrun bench --base-url "127.0.0.1:$ALT_PORT" --model "$LR_MODEL" --label "alt" \
    --tokenizer-url "127.0.0.1:$LR_PORT" --compare "127.0.0.1:$LR_PORT" --compare-label localrun --input-tokens $IN \
    --timeout 120 --concurrency $ALT_LEVELS --output-tokens $OUTTOK --duration $A_DUR --warmup $BENCH_WARMUP --pause 1 \
    --json "$OUT/alt.json" --markdown "$OUT/alt.md" 2>&1 | grep -E "│ (alt|localrun)|warning" | cut -c1-160
  stamp "A/B rc=${PIPESTATUS[0]}"
  stop_group "$ALT_PID" 10
fi

stamp "stopping localrun (its runner writes its trace)"
curl_ps=$("$PY" -c "import httpx,sys; print(httpx.get('http://127.0.0.1:$LR_PORT/metrics', timeout=5).text)" 2>/dev/null \
  | grep -E "^localrun_speculative_(draft|accepted)_tokens" | tr '\n' ' ')
echo "speculative counters: ${curl_ps:-none}"
stop_group "$LR_PID" 20
ls -la "$W/trace" 2>/dev/null | tail -4

stamp "Python's share of a decode step (engine trace marks)"
"$PY" - "$W/trace" "$LEVELS" "$OUT" "$BENCH_T0" <<'EOF'
import json, statistics, sys
from pathlib import Path
trace, levels, out = Path(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")], Path(sys.argv[3])
bench_t0 = int(sys.argv[4])
steps = []
for path in sorted(trace.glob("trace-*.jsonl")):
    recs, cur = [], None
    events = sorted((json.loads(l) for l in path.read_text().splitlines() if l.strip()), key=lambda e: e[0])
    for t, stage, _key, value in events:
        if stage == "step":
            cur = {"t": t, "n": value}
            recs.append(cur)
        elif cur is not None and stage == "decoded":
            cur["dec"], cur["part"] = t, value
        elif cur is not None and stage == "advanced":
            cur["adv"] = t
    for a, b in zip(recs, recs[1:]):
        a["next"] = b
    steps += [r for r in recs if r["t"] >= bench_t0]
steps.sort(key=lambda r: r["t"])
if not steps:
    print("no engine steps in the trace"); sys.exit(0)
# A steady decode step: all rows decode (no prompt or draft rows), and the next step is one too, with
# the same sequences (nothing finished or was admitted between them: no idle wait in the gap).
def steady(s):
    nx = s.get("next")
    return ("dec" in s and "adv" in s and nx is not None and "dec" in nx and s["n"] == s["part"]
            and nx["n"] == nx["part"] == s["part"])
# Levels: the engine idles while llama-server is measured and for the 1 s pause after each level, so split
# the steps at gaps over 0.5 s and
# give each level the longest run whose largest batch is exactly that level.
segs, seg = [], [steps[0]]
for a, b in zip(steps, steps[1:]):
    if b["t"] - a["t"] > 0.5e9:
        segs.append(seg); seg = []
    seg.append(b)
segs.append(seg)
ms = lambda v: v / 1e6
def pct(v, q):
    v = sorted(v); return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]
rows, result = [], {}
for level in levels:
    cands = [s for s in segs if max(x.get("part", 0) for x in s) == level]
    if not cands:
        continue
    seg = max(cands, key=len)
    st = [s for s in seg if steady(s) and s["part"] >= max(1, level * 3 // 4)]
    if len(st) < 5:
        continue
    step = [ms(s["next"]["t"] - s["t"]) for s in st]
    dec = [ms(s["dec"] - s["t"]) for s in st]
    after = [ms(s["adv"] - s["dec"]) for s in st]
    gap = [ms(s["next"]["t"] - s["adv"]) for s in st]
    py = [a - b for a, b in zip(step, dec)]
    r = {"level": level, "steps": len(st), "batch_median": statistics.median(s["part"] for s in st),
         "step_ms_p50": statistics.median(step), "step_ms_p90": pct(step, 0.9),
         "llama_decode_ms_p50": statistics.median(dec), "python_ms_p50": statistics.median(py),
         "python_ms_p90": pct(py, 0.9), "after_decode_ms_p50": statistics.median(after),
         "before_next_ms_p50": statistics.median(gap), "python_share_of_time": sum(py) / sum(step),
         "python_share_p50": statistics.median(p / s for p, s in zip(py, step))}
    result[level] = r
    rows.append(f"| {level} | {r['steps']} | {r['batch_median']:g} | {r['step_ms_p50']:.2f} / {r['step_ms_p90']:.2f} | "
                f"{r['llama_decode_ms_p50']:.2f} | {r['python_ms_p50']:.2f} ({r['after_decode_ms_p50']:.2f} + "
                f"{r['before_next_ms_p50']:.2f}) | **{r['python_share_of_time']:.1%}** |")
table = ("| streams | steady decode steps | batch (median) | step to step ms (p50 / p90) | llama_decode + sync ms (p50) "
         "| Python ms p50 (after decode + before the next) | Python share of the step time |\n|---|---|---|---|---|---|---|\n"
         + "\n".join(rows))
print(table)
(out / "step_share.json").write_text(json.dumps(result, indent=1))
(out / "step_share.md").write_text(table + "\n")
EOF
timeout 30 "$PY" "$REPO/benchmarks/trace_report.py" "$W/trace" $(echo "$LEVELS" | tr ',' '\n' | sed 's/^/--decode-batch /') \
  >"$OUT/trace_report.md" 2>&1 || tail -5 "$OUT/trace_report.md"
tar -C "$W" -czf "$OUT/trace.tgz" trace 2>/dev/null
[ "$(stat -c %s "$OUT/trace.tgz" 2>/dev/null || echo 0)" -gt $((20 << 20)) ] && rm -f "$OUT/trace.tgz"

stamp "summary"
"$PY" - "$OUT" "$LOCAL" <<'EOF'
import json, sys
from pathlib import Path
out, local = Path(sys.argv[1]), sys.argv[2] == "1"
try:
    d = json.loads((out / "serve_gpu.json").read_text())
except (OSError, ValueError) as exc:
    print("no bench JSON:", exc); sys.exit(0)
share = {}
if (out / "step_share.json").exists():
    share = {int(k): v for k, v in json.loads((out / "step_share.json").read_text()).items()}
by = {(lv["target"], lv["concurrency"]): lv for lv in d["levels"]}
def ms(value):  # a p50 is None when no request of the level finished inside the window
    return "-" if value is None else f"{value * 1000:.0f}"
lines = ["| streams | localrun tok/s | llama-server tok/s | aggregate ratio (>= 1.0) | TTFT p50 localrun / llama-server "
         "| TTFT ratio (<= 1.05) | TPOT p50 ms localrun / llama-server | ok / requests | Python share of a step (<= 10 %) |",
         "|---|---|---|---|---|---|---|---|---|"]
for c in d["config"]["concurrency"]:
    a, b = by.get(("localrun", c)), by.get(("llama-server", c))
    if not a or not b:
        lines.append(f"| {c} | not measured | | | | | | | |"); continue
    agg = a["output_tok_s"] / b["output_tok_s"] if b["output_tok_s"] else float("nan")
    ta, tb = a["ttft"]["p50"], b["ttft"]["p50"]
    tr = ta / tb if ta is not None and tb else float("nan")
    pa, pb = a["tpot"]["p50"], b["tpot"]["p50"]
    s = share.get(c)
    lines.append(f"| {c} | {a['output_tok_s']:.0f} | {b['output_tok_s']:.0f} | {agg:.2f} {'ok' if agg >= 1.0 else 'MISS'} | "
                 f"{ms(ta)} / {ms(tb)} ms | {tr:.2f} {'ok' if tr <= 1.05 else 'MISS'} | "
                 f"{(pa or 0) * 1000:.1f} / {(pb or 0) * 1000:.1f} | {a['ok']}/{a['requests']}, {b['ok']}/{b['requests']} | "
                 + (f"{s['python_share_of_time']:.1%} ({s['python_ms_p50']:.2f} of {s['step_ms_p50']:.2f} ms)" if s else "-") + " |")
text = "\n".join(lines)
if d.get("warnings"):
    text += "\n\nwarnings:\n" + "\n".join(f"- {w}" for w in d["warnings"])
print(text)
(out / "summary.md").write_text(text + "\n")
EOF
stop_group "$LS_PID" 5

# --- the engine's numerics on this GPU (deterministic mode, logprob and embedding tolerances) -------
if [ "$LOCAL" != 1 ] && [ "$ENGINE_TESTS_S" -gt 0 ] && [ "$(left)" -gt 25 ]; then
  T=$(( $(left) - 12 ))
  stamp "engine tests on the GPU (-p gpuwarm, ${T}s): speculative, tiny, backend sampling"
  ( cd "$REPO" && PYTHONPATH=$G:$PYTHONPATH timeout -k 3 $T "$PY" -m pytest -p gpuwarm -p no:cacheprovider -q \
      --timeout 60 -rs -W ignore::pytest.PytestConfigWarning tests/integration/engine/test_engine_speculative.py \
      tests/integration/engine/test_engine_tiny.py tests/integration/engine/test_engine_backend_sampling.py ) \
      >"$OUT/engine_tests.txt" 2>&1
  stamp "engine tests rc=$?"
  grep -E "^(FAILED|ERROR)|passed|failed|^E  .*(assert|Expected|Obtained|difference)" "$OUT/engine_tests.txt" | head -40
fi
# at most 8 files come back from the device: the small ones stay, the rest travel in one archive
( cd "$OUT" && tar -czf extra.tgz --remove-files $(ls | grep -vxE \
    "log.txt|serve_gpu.json|serve_gpu.md|summary.md|step_share.md|trace_report.md|engine_tests.txt|alt.md") 2>/dev/null )
ls "$OUT"
stamp "done"
}

main 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
