#!/usr/bin/env python3
"""The serving path's own cost: a tiny random-weight model, localrun against llama-server (issue #29 point 3).

With 2 layers of dimension 64 the kernels cost almost nothing, so what is measured is each
server: HTTP, templating-free completions, scheduling, sampling, detokenizing, the runner pipe
(localrun), streaming. A GPU makes every decode step nearly that cheap, so this is what a GPU user
pays. The script writes the GGUF (``tests/tinymodel.py``), creates it in a localrun daemon of its
own (``LOCALRUN_NUM_PARALLEL`` = the highest level), starts ``llama-server -np LEVEL --kv-unified``
on the same file, both with the same KV pool (``-c LEVEL x (in + out + 64)`` there,
``LOCALRUN_CONTEXT_LENGTH`` = in + out + 64 here: localrun's default pool for 64 slots is 262,144
cells, and at that size each host-tier copy of a finished request's cells, which scans every cell,
held the next wave of requests 40-50 ms at 8 streams), and runs ``localrun bench`` with
llama-server as ``--compare`` (interleaved, one run) at ``--levels``; prints the table and writes
``tiny_serving.json`` / ``.md`` to ``--out``.

    .venv/bin/python benchmarks/tiny_serving.py --llama-server PATH/llama-server --out benchmarks/out/tiny

Targets (#29): aggregate >= 1.0x llama-server at every level, first token <= llama-server's + 2 ms.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from busy_desktop import (  # this folder is on sys.path when a script here runs
    create_model,
    localrun_env,
    start_llama_server,
    start_localrun,
    stop_all,
)

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", type=Path, required=True)
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--input-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--duration", type=float, default=10.0, help="measurement window per level and target")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "tiny")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    top = max(int(x) for x in args.levels.split(","))
    work = Path(tempfile.mkdtemp(prefix="tiny-serving-"))
    sys.path.insert(0, str(ROOT / "tests"))
    from tinymodel import write_tiny_gguf

    gguf = write_tiny_gguf(work / "tiny.gguf", context_length=8192)
    slot_ctx = args.input_tokens + args.output_tokens + 64  # each slot's share of the one pool, on both sides
    env = localrun_env(work, 11630, LOCALRUN_NUM_PARALLEL=str(top), LOCALRUN_CONTEXT_LENGTH=str(slot_ctx))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(start_localrun(work, env))
        create_model(work, env, "tiny", gguf)
        procs.append(start_llama_server(args.llama_server, work, 18097, [
            "-m", str(gguf), "-np", str(top), "--kv-unified", "-c", str(top * slot_ctx)]))
        bench = [sys.executable, "-m", "localrun", "bench", "--base-url", "http://127.0.0.1:11630", "--model", "tiny",
                 "--label", "localrun", "--compare", "http://127.0.0.1:18097", "--compare-label", "llama-server",
                 "--concurrency", args.levels, "--input-tokens", str(args.input_tokens),
                 "--output-tokens", str(args.output_tokens), "--duration", str(args.duration), "--warmup", "2",
                 "--json", str(args.out / "tiny_serving.json"), "--markdown", str(args.out / "tiny_serving.md")]
        return subprocess.run(bench, env=env, check=False).returncode
    finally:
        stop_all(procs)


if __name__ == "__main__":
    sys.exit(main())
