#!/usr/bin/env bash
# Agent workload, localrun against llama.cpp's server in one run (issue #25 point 5): benchmarks/agent_replay.py
# with a daemon restart and a llama-server restart, both on the same GGUF, same threads.
#
#   BIN=$(../shared/bench/build_llama_server.sh) GGUF=path/to/model.gguf MODEL=qwen2.5-coder:0.5b \
#       bash benchmarks/run_agents.sh [OUT_DIR] [AGENTS...]
#
# localrun runs in a temporary HOME (its own store, prefix cache and log) on port 11590, llama-server on 8090
# with 16 slots in one unified 65,536-token KV cache (-np 16 --kv-unified -c 65536, as the issue measured it).
# Both are stopped at the end. On a 2-core CPU, Claude Code's first request takes minutes in either server.
# With CACHE_REUSE=N both reuse cached runs of N tokens or more at shifted positions: llama-server with
# --cache-reuse N, localrun through a model made FROM the same GGUF with PARAMETER cache_reuse N.
set -euo pipefail
OUT=${1:-bench/out/agents}; shift || true
AGENTS=${*:-claude codex}
: "${BIN:?BIN: the llama-server bin folder}" "${GGUF:?GGUF: the model file}" "${MODEL:?MODEL: its localrun name}"
PY=${PY:-.venv/bin/python}
HOME_LR=$(mktemp -d); mkdir -p "$OUT"
export LOCALRUN_HOST=127.0.0.1:11590
LR="env HOME=$HOME_LR LOCALRUN_HOST=$LOCALRUN_HOST $PY -m localrun"
start_lr() { (setsid $LR serve >> "$OUT/localrun.log" 2>&1 &); }
REUSE_ARGS=()
if [ -n "${CACHE_REUSE:-}" ]; then REUSE_ARGS=(--cache-reuse "$CACHE_REUSE"); fi
NO_REPACK=$($PY -c 'from localrun.hardware import repack; print("" if repack.allowed() else "--no-repack")')
start_ls() { (LD_LIBRARY_PATH=$BIN setsid "$BIN/llama-server" -m "$GGUF" --jinja -np 16 --kv-unified -c 65536 \
              $NO_REPACK "${REUSE_ARGS[@]}" --port 8090 >> "$OUT/llama-server.log" 2>&1 & echo $! > "$OUT/llama.pid"); }
stop_all() { $LR daemon stop >/dev/null 2>&1 || true; kill "$(cat "$OUT/llama.pid" 2>/dev/null)" 2>/dev/null || true; }
trap stop_all EXIT
start_lr; start_ls
for _ in $(seq 60); do curl -sf http://127.0.0.1:8090/health >/dev/null && curl -sf "http://$LOCALRUN_HOST/health" >/dev/null && break; sleep 1; done
lscpu | grep -E "Model name" | tee "$OUT/cpu.txt"
if [ -n "${CACHE_REUSE:-}" ]; then
    printf 'FROM %s\nPARAMETER cache_reuse %s\n' "$GGUF" "$CACHE_REUSE" > "$HOME_LR/Modelfile.reuse"
    MODEL="reuse-$CACHE_REUSE"; $LR create "$MODEL" -f "$HOME_LR/Modelfile.reuse" >/dev/null
fi
# shellcheck disable=SC2086
$PY benchmarks/agent_replay.py --model "$MODEL" --localrun "http://$LOCALRUN_HOST" \
    --llama-server http://127.0.0.1:8090 --llama-model "$(basename "$GGUF")" --agents $AGENTS --out "$OUT" \
    --restart-localrun "$LR daemon stop && (setsid $LR serve >> $OUT/localrun.log 2>&1 &)" \
    --restart-llama "kill \$(cat $OUT/llama.pid); sleep 1; (LD_LIBRARY_PATH=$BIN setsid $BIN/llama-server -m $GGUF --jinja -np 16 --kv-unified -c 65536 $NO_REPACK ${REUSE_ARGS[*]} --port 8090 >> $OUT/llama-server.log 2>&1 & echo \$! > $OUT/llama.pid)"
