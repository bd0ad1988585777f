#!/usr/bin/env bash
# localrun (speculative auto) vs localrun (LOCALRUN_SPECULATIVE=0) vs llama-server tuned, one model, one run.
set -uo pipefail
cd /work/main
PY=.venv/bin/python
KEY=$1; OUT=$2; LEVELS=${3:-1,4,8}; REQ=${4:-8}
mkdir -p $OUT; H=/tmp/b/homes/$KEY; rm -rf $H; mkdir -p $H
MODEL=$($PY bench/models.py $KEY)
BIN=/root/.cache/llama-server/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -TERM -- -$p 2>/dev/null; done' EXIT
for name in spec nospec; do
  mkdir -p $H/$name
  if [ $KEY = qwen ]; then printf 'FROM %s\n' "$MODEL" > $H/$name/Modelfile
    LOCALRUN_MODELS=$H/$name/models HOME=$H/$name $PY -m localrun create bench-$KEY -f $H/$name/Modelfile >/dev/null 2>&1; fi
done
[ $KEY = qwen ] && LR_MODEL=bench-qwen || LR_MODEL=gemma3:270m
start_lr() { # name port spec
  LOCALRUN_SPECULATIVE=$3 LOCALRUN_HOST=127.0.0.1:$2 LOCALRUN_KEEP_ALIVE=-1 LOCALRUN_MODELS=$H/$1/models HOME=$H/$1 \
  XDG_CACHE_HOME=$H/$1/cache XDG_DATA_HOME=$H/$1/data setsid $PY -m localrun serve >>$H/$1/serve.log 2>&1 &
  PIDS+=($!)
}
start_lr spec 18101 1
start_lr nospec 18102 0
LD_LIBRARY_PATH=$BIN setsid $BIN/llama-server -m $MODEL -t 2 --no-repack --host 127.0.0.1 --port 18103 -np 16 --kv-unified -c 65536 >$OUT/llama_server.log 2>&1 &
PIDS+=($!)
for port in 18101 18102 18103; do
  for i in $(seq 240); do curl -sf http://127.0.0.1:$port/v1/models >/dev/null && break; sleep 0.5; done
done
for port in 18101 18102; do curl -s http://127.0.0.1:$port/api/generate -d "{\"model\": \"$LR_MODEL\", \"prompt\": \"hi\", \"stream\": false, \"options\": {\"num_predict\": 1}}" >/dev/null; done
echo "start $(date -u) $(uptime)" > $OUT/machine.txt; lscpu | grep -E "Model name|CPU family|^Model:" >> $OUT/machine.txt
timeout 1500 $PY -m localrun bench --base-url 127.0.0.1:18101 --model $LR_MODEL --label "localrun" \
  --compare 127.0.0.1:18102 --compare-model $LR_MODEL --compare-label "localrun LOCALRUN_SPECULATIVE=0" \
  --compare 127.0.0.1:18103 --compare-label "llama-server tuned" \
  --tokenizer-url 127.0.0.1:18101 --concurrency $LEVELS --input-tokens 128 --output-tokens 64 --requests $REQ \
  --timeout 600 --pause 1 --json $OUT/concurrency.json --markdown $OUT/concurrency.md 2>&1 | tail -40
curl -s http://127.0.0.1:18101/metrics | grep -E "^localrun_speculative" > $OUT/spec_metrics.txt
echo "end $(date -u) $(uptime)" >> $OUT/machine.txt
