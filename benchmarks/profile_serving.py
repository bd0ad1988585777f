"""Profile the serving path: timestamps through it (LOCALRUN_TRACE) and py-spy, per concurrency level.

    python benchmarks/profile_serving.py --model gemma3:270m --levels 1,8 --requests 16 --out DIR

For each level it starts a daemon (``localrun serve``, the caller's environment plus
LOCALRUN_TRACE=DIR/cN/trace and a free port), runs ``localrun bench`` at that one level (128 tokens
in, 64 out) while ``py-spy record --subprocesses --nonblocking`` samples the daemon and its
runner, stops the daemon (so every process writes its trace) and prints:

- ``benchmarks/trace_report.py``: the first-token path stage by stage, and the steady decode steps;
- py-spy: per process, the share of samples in each thread, and the functions where the
  samples end (leaf frames; a ctypes call such as llama_decode shows as its Python caller), the top 12.

Everything it starts is stopped on exit. About 2 minutes per level on 2 cores for the starter.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
PY_SPY = Path(sys.executable).with_name("py-spy")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def summarize_py_spy(raw: Path) -> None:
    """Shares of samples by process and thread, then by leaf frame (raw format: 'a;b;c count')."""
    threads: collections.Counter[str] = collections.Counter()
    leaves: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        # --subprocesses: a runner's stacks start with the daemon's process frame, then its own
        last = max(i for i, f in enumerate(frames) if f.startswith("process ")) if frames[0].startswith("process ") else 0
        process, thread = frames[last], frames[last + 1] if len(frames) > last + 1 else "?"
        process = "runner" if "localrun.runtime.runner" in process else "daemon" if "localrun serve" in process else process
        threads[f"{process} | {thread}"] += int(count)
        leaves[process][frames[-1]] += int(count)
    total = sum(threads.values()) or 1
    print(f"py-spy: {total} samples (busy threads only)\n\n| process, thread | share |\n|---|---|")
    for name, n in threads.most_common(12):
        print(f"| {name[:110]} | {n / total:.1%} |")
    for process, counter in leaves.items():
        n_process = sum(counter.values())
        print(f"\n{process[:100]}: {n_process / total:.1%} of samples\n\n| leaf frame | share of the process |\n|---|---|")
        for frame, n in counter.most_common(12):
            print(f"| `{frame[:100]}` | {n / n_process:.1%} |")
    print()


def profile_level(args: argparse.Namespace, c: int) -> None:
    out = args.out / f"c{c}"
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "LOCALRUN_HOST": f"127.0.0.1:{port}", "LOCALRUN_TRACE": str(out / "trace"),
           "LOCALRUN_KEEP_ALIVE": "-1"}
    daemon = subprocess.Popen([sys.executable, "-m", "localrun", "serve"], env=env, start_new_session=True,
                              stdout=(out / "serve.log").open("w"), stderr=subprocess.STDOUT)
    spy = None
    try:
        for _ in range(400):
            try:
                httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        bench = [sys.executable, "-m", "localrun", "bench", "--base-url", f"127.0.0.1:{port}", "--model", args.model,
                 "--concurrency", str(c), "--requests", str(max(args.requests, c)), "--input-tokens", "128",
                 "--output-tokens", "64", "--pause", "0", "-q", "--json", str(out / "bench.json")]
        # load the model first (not profiled), then profile the measured run
        subprocess.run(bench[:bench.index("--concurrency")] + ["--concurrency", "1", "--requests", "1", "-q"],
                       env=env, check=False, capture_output=True)
        spy = subprocess.Popen([str(PY_SPY), "record", "-p", str(daemon.pid), "--subprocesses", "--nonblocking",
                                "--threads", "--nolineno", "--rate", "100", "--format", "raw",
                                "--output", str(out / "py-spy.txt")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        result = subprocess.run(bench, env=env, check=False, capture_output=True, text=True)
        print(f"## {args.model}, {c} stream(s)\n\n" + "\n".join(
            line for line in result.stdout.splitlines() if line.startswith("│")) + "\n")
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        daemon.send_signal(signal.SIGTERM)  # the daemon only: it closes its runner, which writes its trace
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
    subprocess.run([sys.executable, str(HERE / "trace_report.py"), str(out / "trace"), "--decode-batch", str(c)],
                   check=False)
    if (out / "py-spy.txt").exists():
        summarize_py_spy(out / "py-spy.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--levels", default="1,8")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    for c in (int(x) for x in args.levels.split(",")):
        profile_level(args, c)


if __name__ == "__main__":
    main()
