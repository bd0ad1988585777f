#!/usr/bin/env bash
# Reproduce BENCHMARKS.md "localrun against llama.cpp's server" in one command:
#
#     benchmarks/run_all.sh        (from anywhere; about 60 minutes on 2 cores, QUICK=1 about 15)
#
# For each model (Gemma 3 270M Q4_K_M, the starter; Qwen2.5-Coder 0.5B Instruct Q4_K_M, both from PyPI):
#   1. the decode ceiling of the kernels (../shared/bench/ceiling.py), while no server runs;
#   2. four servers, all loaded, measured in turn (interleaved per level by `localrun bench`, never at once):
#      - localrun with its defaults (slots sized from memory, fastest kernels), its own HOME and store;
#      - llama-server "tuned":          -np 16 --kv-unified -c 65536   (llama.cpp's C++ server)
#      - llama-server "Ollama default": -np 1 -c 4096                 (what Ollama v0.30+ runs per model)
#        both at llama.cpp's default threads and repacking (--no-repack only where localrun's probe,
#        hardware/repack.py, found repacked weights crash this CPU: the AMX VM of ../shared/ENGINE_NOTES.md);
#      - llama-cpp-python's server, all cores, n_ctx 4096, --interrupt_requests False
#        (through benchmarks/launch_llama_cpp_server.py, for the same crash);
#   3. scenarios (streaming /v1/completions, prompts built with the model's own tokenizer, exact
#      output lengths, a fresh prompt seed per run, printed and stored in each JSON):
#      concurrency 1,4,8,16 (128 tokens in, 64 out); 8 streams with a 1,300-token shared prefix;
#      one 2,000-token prompt at a time; repeated prompts at 1 and 8 streams (a prompt cache's
#      TTFT), then localrun and llama-server tuned restarted and the same prompts measured again;
# then benchmarks/startup.py (start-up, switching, daemon RSS; point 5) and benchmarks/summarize.py, which
# writes $OUT/summary.md: every target of issue #15 as a ratio to llama-server of the same run.
#
# Settings (environment): PY (python with localrun installed; default .venv/bin/python, else python3),
# OUT (results folder), MODELS ("gemma qwen"), REQUESTS (per level, default 32; QUICK=1: 8),
# LCP (1: also llama-cpp-python's server; 0: only localrun and llama-server), SHARED (the shared folder with benchmarks/ceiling.py and benchmarks/build_llama_server.sh; default ../shared),
# LLAMA_SERVER (binary; default: built or reused by $SHARED/bench/build_llama_server.sh, 15-25 min once).
# Every server runs in its own process group and is stopped on exit, on error and on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
OUT=${OUT:-bench/out/$(date -u +%Y%m%dT%H%M%SZ)}
MODELS=${MODELS:-gemma qwen}
QUICK=${QUICK:-0}
REQUESTS=${REQUESTS:-$([ "$QUICK" = 1 ] && echo 8 || echo 32)}
PREFIX_REQUESTS=${PREFIX_REQUESTS:-$([ "$QUICK" = 1 ] && echo 8 || echo 16)}
LCP=${LCP:-1}  # 0: leave out llama-cpp-python's server (no target of issue #15 is a ratio to it)
SHARED=${SHARED:-$ROOT/../shared}
THREADS=$(nproc)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

if [ -z "${LLAMA_SERVER:-}" ]; then
    LLAMA_SERVER=$(bash "$SHARED/bench/build_llama_server.sh" | tail -1)/llama-server
fi
BIN_DIR=$(dirname "$LLAMA_SERVER")
NO_REPACK=$("$PY" -c 'from localrun.hardware import repack; print("" if repack.allowed() else "--no-repack")')
[ "$LCP" = 1 ] && { "$PY" -c 'import uvicorn, fastapi, sse_starlette, starlette_context, pydantic_settings' 2>/dev/null ||
    "$PY" -m pip install -q uvicorn fastapi sse-starlette starlette-context pydantic-settings; }  # the [bench] extra

PIDS=()
stop_servers() {  # each server runs in its own process group (setsid): stop it with its children
    for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
    PIDS=()
}
trap stop_servers EXIT INT TERM

wait_ready() {  # URL NAME PID LOG
    for _ in $(seq 600); do
        if "$PY" - "$1" <<'EOF' 2>/dev/null; then return 0; fi
import sys, httpx
sys.exit(0 if httpx.get(sys.argv[1] + "/v1/models", timeout=2).status_code == 200 else 1)
EOF
        kill -0 "$3" 2>/dev/null || { echo "$2 exited; see $4" >&2; tail -20 "$4" >&2; exit 1; }
        sleep 0.5
    done
    echo "$2 did not answer at $1 within 5 minutes; see $4" >&2
    exit 1
}

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

{ echo "start: $(date -u) $(uptime)"; echo "cpus: $THREADS"; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200
  echo "llama-server: $LLAMA_SERVER"; git -C "$ROOT" log -1 --format="localrun: %h %s"; } >"$OUT/machine.txt"

start_localrun() {  # DIR -> sets LR_PID (the daemon keeps its store and prefix cache in DIR between restarts)
    LOCALRUN_HOST=127.0.0.1:$LR_PORT LOCALRUN_KEEP_ALIVE=-1 LOCALRUN_MODELS=$1/models HOME=$1 \
        XDG_CACHE_HOME=$1/cache XDG_DATA_HOME=$1/data setsid "$PY" -m localrun serve >>"$1/serve.log" 2>&1 &
    LR_PID=$!; PIDS+=("$LR_PID")
    wait_ready "http://127.0.0.1:$LR_PORT" localrun "$LR_PID" "$1/serve.log"
}

start_tuned() {  # MODEL LOG
    LD_LIBRARY_PATH=$BIN_DIR setsid "$LLAMA_SERVER" -m "$1" $NO_REPACK --host 127.0.0.1 \
        --port "$LST_PORT" -np 16 --kv-unified -c 65536 >>"$2" 2>&1 &
    LST_PID=$!; PIDS+=("$LST_PID")
    wait_ready "http://127.0.0.1:$LST_PORT" "llama-server (tuned)" "$LST_PID" "$2"
}

for MODEL_KEY in $MODELS; do
    DIR=$OUT/$MODEL_KEY
    mkdir -p "$DIR/home"
    LR_PORT=$(free_port); LST_PORT=$(free_port); LSO_PORT=$(free_port); LCP_PORT=$(free_port)
    MODEL_PATH=$("$PY" benchmarks/models.py "$MODEL_KEY")
    echo "== $MODEL_KEY: $MODEL_PATH; results in $DIR" >&2
    if [ "$MODEL_KEY" = gemma ]; then LR_MODEL=gemma3:270m; else
        LR_MODEL=bench-$MODEL_KEY
        printf 'FROM %s\n' "$MODEL_PATH" >"$DIR/Modelfile"
        LOCALRUN_HOST=127.0.0.1:$LR_PORT LOCALRUN_MODELS=$DIR/home/models HOME=$DIR/home \
            "$PY" -m localrun create "$LR_MODEL" -f "$DIR/Modelfile" >&2  # no daemon there yet: into the store
    fi

    echo "== ceiling" >&2
    "$PY" "$SHARED/bench/ceiling.py" "$MODEL_PATH" --batch 1,4,8,16 --prompt 128 --steps 32 --threads "$THREADS" \
        | tee "$DIR/ceiling.jsonl"

    start_localrun "$DIR/home"
    start_tuned "$MODEL_PATH" "$DIR/llama_server_tuned.log"
    LD_LIBRARY_PATH=$BIN_DIR setsid "$LLAMA_SERVER" -m "$MODEL_PATH" $NO_REPACK --host 127.0.0.1 \
        --port "$LSO_PORT" -np 1 -c 4096 >"$DIR/llama_server_np1.log" 2>&1 &
    LSO_PID=$!; PIDS+=("$LSO_PID")
    if [ "$LCP" = 1 ]; then
        setsid "$PY" benchmarks/launch_llama_cpp_server.py --model "$MODEL_PATH" --host 127.0.0.1 --port "$LCP_PORT" \
            --n_threads "$THREADS" --n_threads_batch "$THREADS" --n_ctx 4096 --interrupt_requests False \
            >"$DIR/llama_cpp_server.log" 2>&1 &
        LCP_PID=$!; PIDS+=("$LCP_PID")
        wait_ready "http://127.0.0.1:$LCP_PORT" llama-cpp-python "$LCP_PID" "$DIR/llama_cpp_server.log"
    fi
    wait_ready "http://127.0.0.1:$LSO_PORT" "llama-server (np=1)" "$LSO_PID" "$DIR/llama_server_np1.log"

    COMMON=(--base-url "127.0.0.1:$LR_PORT" --model "$LR_MODEL" --label localrun
            --tokenizer-url "127.0.0.1:$LR_PORT" --output-tokens 64 --timeout 600 --pause 1)
    TUNED=(--compare "127.0.0.1:$LST_PORT" --compare-label llama-server)
    OTHERS=(--compare "127.0.0.1:$LSO_PORT" --compare-label "llama-server np=1")
    [ "$LCP" = 1 ] && OTHERS+=(--compare "127.0.0.1:$LCP_PORT" --compare-label llama-cpp-python)
    run_bench() {  # NAME ARGS...: an error or timeout makes bench exit 1; its results are still written
        local name=$1; shift
        echo "== $MODEL_KEY: $name" >&2
        timeout 3600 "$PY" -m localrun bench "${COMMON[@]}" "$@" --json "$DIR/$name.json" \
            --markdown "$DIR/$name.md" 2> >(tee -a "$DIR/bench.log" >&2) || true
    }
    run_bench concurrency "${TUNED[@]}" "${OTHERS[@]}" --concurrency 1,4,8,16 --input-tokens 128 --requests "$REQUESTS"
    run_bench shared_prefix "${TUNED[@]}" "${OTHERS[@]}" --concurrency 8 --shared-prefix 1300 --input-tokens 40 \
        --requests "$PREFIX_REQUESTS"
    run_bench long_prompt "${TUNED[@]}" "${OTHERS[@]}" --concurrency 1 --input-tokens 2000 --requests 4
    SEED=$RANDOM$RANDOM
    run_bench repeat "${TUNED[@]}" --repeat-prompts --seed "$SEED" --concurrency 1,8 --input-tokens 128 \
        --requests 16
    # The same prompts after a restart of both: localrun reloads its prefix cache from disk, llama-server starts empty.
    kill -TERM -- "-$LR_PID" "-$LST_PID" 2>/dev/null || true
    while kill -0 "$LR_PID" 2>/dev/null || kill -0 "$LST_PID" 2>/dev/null; do sleep 0.2; done
    start_localrun "$DIR/home"
    start_tuned "$MODEL_PATH" "$DIR/llama_server_tuned.log"
    run_bench repeat_restarted "${TUNED[@]}" --repeat-prompts --no-first-pass --seed "$SEED" --concurrency 1,8 \
        --input-tokens 128 --requests 16
    stop_servers
done

echo "== start-up and switching" >&2
timeout 1200 "$PY" benchmarks/startup.py --model-a "$("$PY" benchmarks/models.py gemma)" --model-b "$("$PY" benchmarks/models.py qwen)" \
    --llama-server "$LLAMA_SERVER" --json "$OUT/startup.json" >&2 || echo "startup.py failed" >&2
echo "end: $(date -u) $(uptime)" >>"$OUT/machine.txt"
"$PY" benchmarks/summarize.py "$OUT"
echo "results in $OUT" >&2
