#!/usr/bin/env python3
"""Code completion in the editor: llama.vim's /infill requests, localrun against llama-server.

Replays an editing session as llama.vim (autoload/llama.vim) sends it: the cursor walks down a
source file (``--file``, by default this repository's ``localrun/server/llamacpp.py``); at every
``--step``-th line it asks for a completion of the line's first half, with up to 256 lines
before the cursor as the prefix, 64 after as the suffix, and 16 chunks of 64 lines of another
file (``--extra``) as the repository context, 128 tokens at most, llama.vim's sampler chain
(``top_k``, ``top_p``, ``infill``) and a fixed seed, so both servers write the same text (the
same kernels). Each request is sent to both servers in turn, in one run, on the same GGUF;
llama-server runs as llama.vim's README starts it for a 1.5B Qwen coder (``-ub 1024 -b 1024
--cache-reuse 256``), one slot; localrun at its /infill defaults (``n_cache_reuse`` 256, the
same), or ``--n-cache-reuse N`` (0: exact prefixes only, as before shifted reuse). Reported: the
time to the reply (median, p90), prompt tokens read and taken from the cache, on each side, and
the ratios.

    .venv/bin/python benchmarks/fim_editor.py --llama-server PATH/llama-server --gguf MODEL.gguf
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from busy_desktop import (  # this folder is on sys.path when a script here runs
    create_model,
    localrun_env,
    start_llama_server,
    start_localrun,
    stop_all,
)

ROOT = Path(__file__).resolve().parent.parent
RESPONSE_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/predicted_n",
                   "timings/predicted_ms", "timings/cache_n", "tokens_evaluated"]


def requests_of(source: list[str], extra: list[str], step: int, limit: int) -> list[dict[str, Any]]:
    """llama.vim's request at every ``step``-th non-empty line of ``source`` (its first half typed)."""
    chunks = [{"filename": "extra.py", "text": "\n".join(extra[i:i + 64]) + "\n"} for i in range(0, len(extra), 64)]
    out = []
    for y in range(1, len(source), step):
        line = source[y]
        if not line.strip():
            continue
        x = len(line) // 2
        out.append({
            "input_prefix": "\n".join(source[max(0, y - 256):y]) + "\n",
            "input_suffix": line[x:] + "\n" + "\n".join(source[y + 1:y + 65]) + "\n",
            "input_extra": chunks[:16], "prompt": line[:x], "n_predict": 128,
            "n_indent": len(line) - len(line.lstrip()),
            "top_k": 40, "top_p": 0.90, "samplers": ["top_k", "top_p", "infill"], "seed": 1, "stream": False,
            "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "response_fields": RESPONSE_FIELDS,
        })
        if len(out) == limit:
            break
    return out


def cpu_name() -> str:
    """The CPU as /proc/cpuinfo names it, with its family and model (one VM name covers several)."""
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or "unknown"
    return f"{name} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", type=Path, required=True)
    ap.add_argument("--gguf", type=Path, required=True, help="a FIM model (the starter's GGUF, a Qwen2.5-Coder)")
    ap.add_argument("--file", type=Path, default=ROOT / "localrun" / "server" / "llamacpp.py")
    ap.add_argument("--extra", type=Path, default=ROOT / "localrun" / "engine" / "infill.py")
    ap.add_argument("--step", type=int, default=3)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--n-cache-reuse", type=int, default=None, help="sent to localrun (default: the route's, 256)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "fim_editor.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fim-editor-"))
    env = localrun_env(work, 11632)
    ours, theirs = "http://127.0.0.1:11632", "http://127.0.0.1:11633"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(start_localrun(work, env))
        create_model(work, env, "coder", args.gguf)
        procs.append(start_llama_server(args.llama_server, work, 11633, [
            "-m", str(args.gguf), "-np", "1", "-ub", "1024", "-b", "1024", "--cache-reuse", "256", "-c", "32768"]))
        bodies = requests_of(args.file.read_text().splitlines(), args.extra.read_text().splitlines(), args.step,
                             args.requests)
        results: dict[str, list[dict[str, Any]]] = {"localrun": [], "llama-server": []}
        with httpx.Client(timeout=600) as client:
            client.post(ours + "/infill", json={**bodies[0], "model": "coder", "n_predict": 1})  # load it
            client.post(theirs + "/infill", json={**bodies[0], "n_predict": 1})
            for body in bodies:
                mine = {"model": "coder"} if args.n_cache_reuse is None else {"model": "coder",
                                                                              "n_cache_reuse": args.n_cache_reuse}
                for name, url, extra in (("localrun", ours, mine), ("llama-server", theirs, {})):
                    t0 = time.perf_counter()
                    reply = client.post(url + "/infill", json={**body, **extra}).json()
                    reply["wall_ms"] = (time.perf_counter() - t0) * 1e3
                    results[name].append(reply)
        same = sum(a["content"] == b["content"] for a, b in zip(results["localrun"], results["llama-server"],
                                                               strict=True))
        summary: dict[str, Any] = {"cpu": cpu_name(), "cores": os.cpu_count(), "requests": len(bodies),
                                   "same_text": same, "gguf": args.gguf.name, "n_cache_reuse": args.n_cache_reuse}
        for name, rows in results.items():
            walls = sorted(r["wall_ms"] for r in rows)
            summary[name] = {
                "median_ms": statistics.median(walls), "p90_ms": walls[int(0.9 * (len(walls) - 1))],
                "prompt_read": sum(r["timings/prompt_n"] for r in rows),
                "prompt_cached": sum(r.get("timings/cache_n", 0) for r in rows),
                "prompt_tokens": sum(r["tokens_evaluated"] for r in rows),
                "generated": sum(r["timings/predicted_n"] for r in rows),
            }
        summary["ratio_median"] = summary["llama-server"]["median_ms"] / summary["localrun"]["median_ms"]
        summary["ratio_p90"] = summary["llama-server"]["p90_ms"] / summary["localrun"]["p90_ms"]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "results": results}, indent=1))
        print(json.dumps(summary, indent=1))
    finally:
        stop_all(procs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
