#!/usr/bin/env bash
# usage: ab.sh OUTDIR  -- starts before/after localrun daemons + llama-server tuned on Qwen, runs benches
set -uo pipefail
OUT=$1; mkdir -p $OUT
PY=/work/main/.venv/bin/python
WT=/work/wt/i15c
LS=/work/cache/llama-server/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server
M=/work/cache/qwen/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
fp() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM -- -$p 2>/dev/null; done; sleep 2; for p in "${PIDS[@]}"; do kill -KILL -- -$p 2>/dev/null; done; }
trap cleanup EXIT
start_lr() { # NAME SRC PORT
  local H=$OUT/$1; mkdir -p $H
  printf 'FROM %s\n' "$M" > $H/Modelfile
  LOCALRUN_HOST=127.0.0.1:$3 LOCALRUN_MODELS=$H/models HOME=$H PYTHONPATH=$2 $PY -m localrun create bench-qwen -f $H/Modelfile >/dev/null 2>&1
  LOCALRUN_HOST=127.0.0.1:$3 LOCALRUN_KEEP_ALIVE=-1 LOCALRUN_MODELS=$H/models HOME=$H XDG_CACHE_HOME=$H/cache XDG_DATA_HOME=$H/data PYTHONPATH=$2 ${EXTRA_ENV:-} setsid $PY -m localrun serve >>$H/serve.log 2>&1 &
  PIDS+=($!)
}
PB=$(fp); PA=$(fp); PL=$(fp)
start_lr before /tmp/i15c/before $PB
start_lr after $WT $PA
LD_LIBRARY_PATH=$(dirname $LS) setsid $LS -m $M -t 2 --no-repack --host 127.0.0.1 --port $PL -np 16 --kv-unified -c 65536 >$OUT/ls.log 2>&1 &
PIDS+=($!)
for port in $PB $PA $PL; do for i in $(seq 240); do curl -sf http://127.0.0.1:$port/v1/models >/dev/null && break; sleep 0.5; done; done
COMMON=(--base-url 127.0.0.1:$PA --model bench-qwen --label after --tokenizer-url 127.0.0.1:$PA --output-tokens 64 --timeout 600 --pause 1
  --compare 127.0.0.1:$PB --compare-model bench-qwen --compare-label before --compare 127.0.0.1:$PL --compare-label llama-server)
# warm both localrun daemons (load the model)
for port in $PB $PA; do curl -s http://127.0.0.1:$port/api/generate -d '{"model":"bench-qwen","prompt":"hi","stream":false,"options":{"num_predict":2}}' >/dev/null; done
shift
for scen in "$@"; do
  case $scen in
    conc) args=(--concurrency ${LEVELS:-1,8} --input-tokens 128 --requests ${REQ:-8});;
    long) args=(--concurrency 1 --input-tokens 2000 --requests ${LREQ:-2});;
  esac
  echo "== $scen $(uptime)" >> $OUT/log
  PYTHONPATH=$WT timeout 1500 $PY -m localrun bench "${COMMON[@]}" "${args[@]}" --json $OUT/$scen.json --markdown $OUT/$scen.md >>$OUT/log 2>&1
  cat $OUT/$scen.md | grep '^|'
done
