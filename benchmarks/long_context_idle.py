"""Long contexts must not slow short requests (issue #25 point 1).

    python benchmarks/long_context_idle.py --url http://127.0.0.1:11435 --model qwen2.5-coder:0.5b \
        [--long-tokens 20000] [--runs 5] [--json FILE]

Against a running daemon, with the model loaded as a request without options gets it (its
trained context, in the pool sized from memory):

1. **before**: ``--runs`` short chat turns, one at a time (a one-line question, 128 tokens out at
   temperature 0, streamed): time to first token and time per output token;
2. **the long prompt**: one prompt of about ``--long-tokens`` tokens (different words every run),
   1 token out; it stays in the prefix cache, idle;
3. **after**: the same short turns again, and once more with the long prompt's next turn
   (the same prompt plus a question) to show it is served from the cache.

Prints the medians and the ratios after/before (1.0 = the idle long prefix costs nothing). The
daemon logs and /metrics say where the idle prefix went (the host-RAM tier). Sends only to
``--url``; bounded by ``--runs`` and the HTTP timeouts.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

import httpx

QUESTION = "In one short paragraph, why do programmers write tests?"


def chat(client: httpx.Client, model: str, messages: list[dict[str, str]], max_tokens: int) -> dict[str, float]:
    """One streamed chat turn: seconds to the first content token and per output token after it."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = last = None
    tokens = 0
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            if any((c.get("delta") or {}).get("content") for c in chunk.get("choices", [])):
                last = time.perf_counter()
                first = first or last
    assert first is not None and last is not None, "no content streamed"
    return {"ttft_s": first - started, "tpot_s": (last - first) / max(1, tokens - 1), "tokens": tokens}


def long_prompt(n_tokens: int, seed: int) -> str:
    """About ``n_tokens`` tokens of plain words (about 1.3 words a token in English-like text)."""
    rng = random.Random(seed)
    words = ("module function return value error request model cache token memory thread context "
             "server client stream batch prefix window agent tool call result file line test").split()
    return " ".join(rng.choice(words) for _ in range(int(n_tokens / 1.3)))


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in ("ttft_s", "tpot_s")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:11435")
    p.add_argument("--model", default="qwen2.5-coder:0.5b")
    p.add_argument("--long-tokens", type=int, default=20000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args()
    short = [{"role": "user", "content": QUESTION}]
    with httpx.Client(base_url=args.url, timeout=httpx.Timeout(1800.0, connect=10.0)) as client:
        chat(client, args.model, short, 8)  # load the model, warm the short prompt's cache
        before = [chat(client, args.model, short, 128) for _ in range(args.runs)]
        long_messages = [{"role": "user", "content": long_prompt(args.long_tokens, int(time.time()))}]
        started = time.perf_counter()
        chat(client, args.model, long_messages, 1)
        long_s = time.perf_counter() - started
        after = [chat(client, args.model, short, 128) for _ in range(args.runs)]
        follow = chat(client, args.model, [*long_messages, {"role": "assistant", "content": "OK."},
                                           {"role": "user", "content": "Which word comes first?"}], 8)
        ps = client.get("/api/ps").json()["models"]
    b, a = medians(before), medians(after)
    result: dict[str, Any] = {
        "model": args.model, "long_tokens": args.long_tokens, "runs": args.runs, "before": b, "after": a,
        "ratio_ttft": a["ttft_s"] / b["ttft_s"], "ratio_tpot": a["tpot_s"] / b["tpot_s"],
        "long_prompt_s": long_s, "long_follow_up_ttft_s": follow["ttft_s"],
        "ps": [{k: m.get(k) for k in ("name", "context_length", "context_pool", "num_parallel")} for m in ps],
    }
    print(f"short turn before: first token {b['ttft_s'] * 1000:.0f} ms, {b['tpot_s'] * 1000:.1f} ms/token")
    print(f"long prompt ({args.long_tokens} tokens): {long_s:.1f} s; its next turn's first token "
          f"{follow['ttft_s']:.2f} s")
    print(f"short turn after:  first token {a['ttft_s'] * 1000:.0f} ms, {a['tpot_s'] * 1000:.1f} ms/token")
    print(f"ratios after/before: first token {result['ratio_ttft']:.2f}, per token {result['ratio_tpot']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
