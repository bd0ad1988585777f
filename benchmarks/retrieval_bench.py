#!/usr/bin/env python3
"""Embeddings and reranking, localrun against llama-server in one run (issue #30 point 4).

No embedding or reranker model is on PyPI, so the script writes random-weight ones shaped like
bge-small-en-v1.5 (BERT, 384 wide, 12 layers, 30,522 tokens, f16: ``tests/tinyencoder.py``
``BGE_SMALL_SHAPE``) and a cross-encoder reranker of the same shape: the kernels' cost is the real
model's, only the numbers are random. It creates both in a localrun daemon of its own and starts
llama-server on the same files (``--embedding`` / ``--rerank``, 16 slots of 512 tokens, so it may
put many inputs in one batch as localrun does), then measures, each server in turn, one request at
a time:

- ``short``: 256 texts of 8-16 words in one ``/v1/embeddings`` request (texts per second);
- ``long``: 16 texts of 510 tokens in one request (texts per second);
- ``rerank``: 1 query against 64 documents of about 100 tokens in one ``/v1/rerank`` request
  (documents per second);
- ``rerank_causal``: the same with a causal reranker shaped like Qwen3-Reranker (1,024 wide, 8 of its
  28 layers, f16, its rerank template): every pair starts with the same template and query, which
  localrun reads once a request and llama-server once per slot (its prompt cache).

Each workload is warmed up, then timed ``--repeat`` times alternating the servers; the best time
of each counts. The machine's other CPU use is sampled around each timed request (``localrun.bench.cpu``):
a run with the warning is not a figure of record. Prints the table and writes ``retrieval.json`` /
``retrieval.md`` to ``--out``.

    .venv/bin/python benchmarks/retrieval_bench.py --llama-server PATH/llama-server --out benchmarks/out/retrieval

Targets (#30): localrun >= 1.0x llama-server on each workload.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from busy_desktop import (  # this folder is on sys.path when a script here runs
    cpu_name,
    create_model,
    localrun_env,
    start_llama_server,
    start_localrun,
    stop_all,
)

from localrun.bench.cpu import CpuMeter, find_server

ROOT = Path(__file__).resolve().parent.parent
LOCALRUN = "http://127.0.0.1:11640"
LLAMA_EMBED, LLAMA_RERANK, LLAMA_CAUSAL = "http://127.0.0.1:18140", "http://127.0.0.1:18141", "http://127.0.0.1:18142"
OTHER_LOAD_WARN = 0.25  # cores used by neither server nor this script


def corpus(words: list[str], n: int, low: int, high: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(low, high))) for _ in range(n)]


def long_texts(words: list[str], tokenize: object, n: int, tokens: int, seed: int) -> list[str]:
    """``n`` texts of exactly ``tokens`` tokens as the model counts them ([CLS] and [SEP] included)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        picked: list[str] = []
        while True:
            candidate = [*picked, rng.choice(words)]
            if len(tokenize(" ".join(candidate))) > tokens:  # type: ignore[operator]
                break
            picked = candidate
        out.append(" ".join(picked))
    return out


def timed(url: str, body: dict[str, object]) -> tuple[float, float]:
    """(seconds, cores used by processes other than this script and the server) for one request."""
    meter = CpuMeter(find_server(url))
    meter.start()
    started = time.perf_counter()
    reply = httpx.post(url, json=body, timeout=600)
    elapsed = time.perf_counter() - started
    usage = meter.stop()
    if reply.status_code != 200:
        raise SystemExit(f"{url}: {reply.status_code} {reply.text[:300]}")
    return elapsed, usage.other_cores or 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "retrieval")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="retrieval-bench-"))
    sys.path.insert(0, str(ROOT / "tests"))
    from tinyencoder import (
        BGE_SMALL_SHAPE,
        bert_vocab,
        write_tiny_bert,
        write_tiny_bert_reranker,
        write_tiny_qwen3_reranker,
    )
    from tinymodel import _WORDS

    emb = write_tiny_bert(work / "bge-small-random.gguf", **BGE_SMALL_SHAPE)
    rr = write_tiny_bert_reranker(work / "bge-reranker-random.gguf", **BGE_SMALL_SHAPE)
    qrr = write_tiny_qwen3_reranker(work / "qwen3-reranker-random.gguf", n_embd=1024, n_layer=8, n_head=16,
                                    n_head_kv=8, n_ff=3072, ftype="f16")
    words = [w for w in bert_vocab()[5:] if w.isalpha() and not w.startswith("#")][:400]
    env = localrun_env(work, int(LOCALRUN.rsplit(":", 1)[1]))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(start_localrun(work, env))
        for name, path in (("bge-small-random", emb), ("bge-reranker-random", rr), ("qwen3-reranker-random", qrr)):
            create_model(work, env, name, path)
        common = ["-np", "16", "-c", "8192", "-b", "8192", "-ub", "512"]
        causal = ["-np", "16", "-c", "16384", "-b", "8192", "-ub", "512"]
        for path, flag, url, opts in ((emb, "--embedding", LLAMA_EMBED, common), (rr, "--rerank", LLAMA_RERANK, common),
                                      (qrr, "--rerank", LLAMA_CAUSAL, causal)):
            procs.append(start_llama_server(args.llama_server, work, int(url.rsplit(":", 1)[1]),
                                            ["-m", str(path), flag, *opts]))

        def tokenize(text: str) -> list[int]:
            reply = httpx.post(LLAMA_EMBED + "/tokenize", json={"content": text, "add_special": True})
            return list(reply.json()["tokens"])

        short = corpus(words, 256, 8, 16, 1)
        long = long_texts(words, tokenize, 16, 510, 2)
        docs = corpus(words, 64, 70, 90, 3)
        causal_docs = corpus(list(_WORDS), 64, 70, 90, 4)
        query = "which of these documents talks about " + " ".join(words[:6])
        workloads = {
            "short": (256, "/v1/embeddings", "bge-small-random", {"input": short}),
            "long": (16, "/v1/embeddings", "bge-small-random", {"input": long}),
            "rerank": (64, "/v1/rerank", "bge-reranker-random", {"query": query, "documents": docs}),
            "rerank_causal": (64, "/v1/rerank", "qwen3-reranker-random",
                              {"query": "which of these documents talk about water and oil", "documents": causal_docs}),
        }
        servers = {"rerank": LLAMA_RERANK, "rerank_causal": LLAMA_CAUSAL}
        results: dict[str, dict[str, object]] = {}
        for key, (count, path, model, body) in workloads.items():
            llama = servers.get(key, LLAMA_EMBED)
            targets = {"localrun": (LOCALRUN + path, {**body, "model": model}),
                       "llama-server": (llama + path, {**body, "model": model})}
            for url, request in targets.values():  # warm-up: loads the model, fills caches
                timed(url, request)
            times: dict[str, list[float]] = {name: [] for name in targets}
            other = 0.0
            for _ in range(args.repeat):
                for name, (url, request) in targets.items():
                    seconds, load = timed(url, request)
                    times[name].append(seconds)
                    other = max(other, load)
            best = {name: min(ts) for name, ts in times.items()}
            results[key] = {"items": count, "seconds": times, "per_second": {n: count / s for n, s in best.items()},
                            "ratio": best["llama-server"] / best["localrun"], "other_cores": round(other, 2)}
        report = {"cpu": cpu_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "repeat": args.repeat, "llama_server_args": {"bert": common, "causal": causal}, "results": results}
        (args.out / "retrieval.json").write_text(json.dumps(report, indent=2))
        md = markdown(report)
        (args.out / "retrieval.md").write_text(md)
        print(md)
        return 0
    finally:
        stop_all(procs)


def markdown(report: dict[str, object]) -> str:
    results = report["results"]
    assert isinstance(results, dict)
    lines = [f"CPU: {report['cpu']}; {report['date']}; best of {report['repeat']}",
             "", "| workload | localrun | llama-server | ratio | other load (cores) |", "|---|---|---|---|---|"]
    names = {"short": "256 short texts (texts/s)", "long": "16 texts of 510 tokens (texts/s)",
             "rerank": "1 query x 64 documents (docs/s)",
             "rerank_causal": "the same, causal reranker (docs/s)"}
    for key, r in results.items():
        rate = r["per_second"]
        warn = " (busy: not of record)" if r["other_cores"] > OTHER_LOAD_WARN else ""
        lines.append(f"| {names[key]} | {rate['localrun']:.1f} | {rate['llama-server']:.1f} | "
                     f"**{r['ratio']:.2f}** | {r['other_cores']}{warn} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
