#!/usr/bin/env python3
"""Decode at depth, localrun against llama-server in one run: time per output token after a long prompt.

    python benchmarks/decode_at_depth.py --localrun http://127.0.0.1:11590 --llama-server http://127.0.0.1:8090 \\
        [--model qwen2.5-coder:0.5b] [--depth 16000] [--rounds 5] [--tokens 128] [--json FILE]

One request of 64 tokens after a fresh long prompt (``localrun bench --input-tokens 16000``) is a thin
sample of decode: on a shared 2-vCPU VM its time per token moved by a third between runs. Here each
server reads the same ``--depth``-token prompt once (its time to first token is printed, not compared:
``localrun bench`` measures that), then answers the same prompt ``--rounds`` more times from its prompt
cache, alternating which server goes first, ``--tokens`` tokens each (``ignore_eos``, temperature 0,
streaming ``/v1/completions``). Prints every round and the medians' ratio. The prompt is random common
words cut to ``--depth`` tokens by llama-server's ``/tokenize``. Sends only to the two URLs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localrun.bench.prompts import WORDS  # noqa: E402


def build_prompt(client: httpx.Client, llama: str, depth: int) -> str:
    rng = random.Random(11)
    words = [rng.choice(WORDS) for _ in range(depth)]
    count = len(client.post(f"{llama}/tokenize", json={"content": " ".join(words)}).json()["tokens"])
    return " ".join(words[: int(len(words) * depth / count)])


def stream(client: httpx.Client, url: str, model: str, prompt: str, max_tokens: int) -> tuple[float, float]:
    """(seconds to the first token, seconds per token after it) of one streamed completion."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    started = time.perf_counter()
    times: list[float] = []
    with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                if any(c.get("text") for c in json.loads(line[6:]).get("choices", [])):
                    times.append(time.perf_counter())
    if len(times) < 2:
        raise SystemExit(f"{url}: fewer than two tokens streamed")
    return times[0] - started, (times[-1] - times[0]) / (len(times) - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--localrun", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", default="qwen2.5-coder:0.5b", help="the model's name in localrun")
    ap.add_argument("--depth", type=int, default=16000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    targets = {"localrun": (args.localrun, args.model), "llama-server": (args.llama_server, "model")}
    with httpx.Client(timeout=7200) as client:
        prompt = build_prompt(client, args.llama_server, args.depth)
        for name, (url, model) in targets.items():
            print(f"{name}: prompt read in {stream(client, url, model, prompt, 2)[0]:.1f} s", flush=True)
        tpot: dict[str, list[float]] = {name: [] for name in targets}
        order = list(targets)
        for i in range(args.rounds):
            for name in order if i % 2 == 0 else order[::-1]:
                url, model = targets[name]
                ttft, per_token = stream(client, url, model, prompt, args.tokens)
                tpot[name].append(per_token)
                print(f"round {i} {name}: first token {ttft * 1000:.0f} ms, {per_token * 1000:.1f} ms a token", flush=True)
    lr, ls = statistics.median(tpot["localrun"]), statistics.median(tpot["llama-server"])
    result = {"depth": args.depth, "rounds": args.rounds, "tokens": args.tokens,
              "localrun_tpot_ms": round(lr * 1000, 1), "llama_server_tpot_ms": round(ls * 1000, 1),
              "ratio": round(lr / ls, 3), "localrun_ms": [round(x * 1000, 1) for x in tpot["localrun"]],
              "llama_server_ms": [round(x * 1000, 1) for x in tpot["llama-server"]]}
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
