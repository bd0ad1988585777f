#!/usr/bin/env python3
"""A busy desktop: decode speed with other processes on the cores, localrun against llama-server (issue #29).

One run, in this order, on the same GGUF:

1. **quiet**: localrun and llama-server (llama.cpp's defaults: its thread count, repacking unless
   localrun's probe found it crashes here) decode ``--tokens`` tokens at 1 and 4 streams;
2. **busy**: the same while ``--busy`` processes spin (default: one per two cores), each stopping
   by itself after ``--busy-limit`` seconds whatever happens to this script;
3. **two models** (localrun, then two llama-servers): the starter and a second model stream at
   once, against each alone pinned to half the cores (``num_thread``).

Each figure is the best of ``--repeat`` rounds of non-streamed ``/v1/completions`` requests with
``ignore_eos`` (a 20-token prompt: decode dominates): aggregate tokens per second = all completion
tokens / (last end - first start). Writes ``busy_desktop.json`` and ``busy_desktop.md`` to ``--out``.

    .venv/bin/python benchmarks/busy_desktop.py --llama-server PATH/llama-server --out benchmarks/out/busy
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Write a long story about a lighthouse keeper who finds a map in a bottle on the beach."
SPIN = "import time, sys\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end: pass"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def post(url: str, body: dict[str, object], timeout: float = 600) -> dict[str, object]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        result: dict[str, object] = json.load(r)
        return result


def wait_ready(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{what} not ready after {timeout:.0f} s")


def localrun_env(work: Path, port: int, **extra: str) -> dict[str, str]:
    """The environment of a ``localrun`` daemon (and of CLI calls to it) on 127.0.0.1:``port`` whose HOME,
    store and data live under ``work``: the user's models, settings and prefix cache stay untouched."""
    return {**os.environ, "HOME": str(work), "XDG_CACHE_HOME": str(work / "cache"), "XDG_DATA_HOME": str(work / "data"),
            "LOCALRUN_MODELS": str(work / "models"), "LOCALRUN_HOST": f"127.0.0.1:{port}", "LOCALRUN_KEEP_ALIVE": "-1",
            **extra}


def start_localrun(work: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``localrun serve`` in ``env`` (:func:`localrun_env`), logging to work/localrun.log, once it answers.
    Its process group is stopped here if it does not come up; after that, :func:`stop_all` stops it."""
    log = (work / "localrun.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "localrun", "serve"], env=env, stdout=log, stderr=log,
                            start_new_session=True)
    try:
        wait_ready(f"http://{env['LOCALRUN_HOST']}/api/version", proc, "localrun")
    except BaseException:
        stop_all([proc])
        raise
    return proc


def create_model(work: Path, env: dict[str, str], name: str, gguf: Path) -> None:
    """``localrun create NAME`` from one GGUF, in the daemon's store."""
    modelfile = work / f"Modelfile.{name}"
    modelfile.write_text(f"FROM {gguf}\n")
    subprocess.run([sys.executable, "-m", "localrun", "create", name, "-f", str(modelfile)], env=env, check=True,
                   capture_output=True)


def repack_args() -> list[str]:
    """llama-server's ``--no-repack`` where localrun loads without repacked weights (they crash on some
    CPUs: ENGINE_NOTES.md), so both sides run the same kernels."""
    from localrun.hardware import repack

    return [] if repack.allowed() else ["--no-repack"]


def start_llama_server(binary: Path, work: Path, port: int, args: list[str]) -> subprocess.Popen[bytes]:
    """llama-server (``binary``) on 127.0.0.1:``port`` with ``args`` (``-m MODEL ...``) and :func:`repack_args`,
    logging to work/llama-server-PORT.log, once ``/health`` answers; stopped here if it never does, after
    that by :func:`stop_all`."""
    log = (work / f"llama-server-{port}.log").open("ab")
    proc = subprocess.Popen([str(binary), *args, "--host", "127.0.0.1", "--port", str(port), *repack_args()],
                            env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}, stdout=log, stderr=log,
                            start_new_session=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", proc, f"llama-server on port {port}")
    except BaseException:
        stop_all([proc])
        raise
    return proc


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop each server's process group (started with ``start_new_session``): TERM, then KILL after 20 s."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def rate(base: str, model: str, streams: int, tokens: int, options: dict[str, object] | None = None,
         deadline: float = 60.0) -> float:
    """Aggregate decode tokens/s of ``streams`` concurrent streamed requests of ``tokens`` tokens each.

    Tokens are counted as they stream (one SSE chunk with text per token on both servers); a round
    stops at ``deadline`` seconds, so a server that crawls under load is measured in bounded time."""
    body: dict[str, object] = {"model": model, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0,
                               "ignore_eos": True, "stream": True}
    if options:
        body["options"] = options
    start = time.perf_counter()
    stop_at = start + deadline

    def one(_: int) -> tuple[float, int]:
        req = urllib.request.Request(f"{base}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        n = 0
        with urllib.request.urlopen(req, timeout=deadline + 30) as r:
            for line in r:
                if line.startswith(b"data: {"):
                    choices = json.loads(line[6:]).get("choices") or []
                    n += sum(1 for c in choices if c.get("text"))
                if time.perf_counter() > stop_at:
                    break
        return time.perf_counter(), n

    with ThreadPoolExecutor(streams) as pool:
        done = list(pool.map(one, range(streams)))
    return sum(n for _, n in done) / (max(e for e, _ in done) - start)


def best(repeat: int, fn: object, *args: object, **kwargs: object) -> float:
    assert callable(fn)
    return max(fn(*args, **kwargs) for _ in range(repeat))


@contextmanager
def busy(n: int, limit: float) -> Iterator[None]:
    """``n`` processes spinning on a core each; every one stops by itself after ``limit`` seconds."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(limit)]) for _ in range(n)]
    time.sleep(1.0)  # let them take their cores (and the policy see them)
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


class Servers:
    """A localrun daemon with its own store, and llama-servers on the same GGUFs; all stopped at exit."""

    def __init__(self, llama_server: Path, work: Path) -> None:
        self.llama_server = llama_server
        self.work = work
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = localrun_env(work, 11620)
        self.env.pop("LOCALRUN_NUM_THREAD", None)
        self.localrun = "http://127.0.0.1:11620"

    def start_localrun(self) -> None:
        self.procs.append(start_localrun(self.work, self.env))

    def pull(self, name: str) -> Path:
        subprocess.run([sys.executable, "-m", "localrun", "pull", name], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        code = ("import sys; from localrun.store import ModelStore; from localrun import config; "
                "print(ModelStore(config.models_dir()).resolve(sys.argv[1]).model_path)")
        out = subprocess.run([sys.executable, "-c", code, name], env=self.env, check=True, capture_output=True)
        return Path(out.stdout.decode().strip())

    def start_llama(self, gguf: Path, port: int) -> str:
        self.procs.append(start_llama_server(self.llama_server, self.work, port,
                                             ["-m", str(gguf), "-np", "4", "--kv-unified", "-c", "16384"]))
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        stop_all(self.procs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", type=Path, required=True)
    ap.add_argument("--model", default="qwen2.5-coder:0.5b")
    ap.add_argument("--second", default="gemma3:270m", help="the other model of the two-model scenario")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--busy", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="spinning processes")
    ap.add_argument("--busy-limit", type=float, default=900, help="seconds after which each spinner stops itself")
    ap.add_argument("--phases", default="decode,two", help="decode (quiet and busy), two (two models at once)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "busy")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from localrun.engine.threads import usable_cores
    from localrun.hardware import repack

    cores = len(usable_cores())
    no_repack = not repack.allowed()
    work = Path(tempfile.mkdtemp(prefix="busy-desktop-"))
    servers = Servers(args.llama_server, work)
    results: dict[str, object] = {"cpu": cpu_name(), "cores": cores, "busy_processes": args.busy,
                                  "tokens": args.tokens, "repeat": args.repeat, "repack": not no_repack,
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    t = args.tokens
    try:
        servers.start_localrun()
        gguf, second = servers.pull(args.model), servers.pull(args.second)
        ls = servers.start_llama(gguf, 18095)
        lr = servers.localrun
        targets = {"localrun": (lr, args.model), "llama-server": (ls, "x")}
        for base, model in targets.values():
            rate(base, model, 1, 8)  # load and warm
        table: dict[str, dict[str, float]] = {}
        for phase in ("quiet", "busy") if "decode" in args.phases else ():
            with busy(args.busy, args.busy_limit) if phase == "busy" else nullcontext():
                for label, (base, model) in targets.items():
                    for streams in (1, 4):
                        key = f"{label} {streams}"
                        table.setdefault(key, {})[phase] = round(best(args.repeat, rate, base, model, streams, t), 2)
                        print(f"{phase:5} {key:15} {table[key][phase]:8.2f} tok/s", flush=True)
        results["decode"] = table
        if "decode" in args.phases:  # the ceiling with the free cores only: localrun pinned to them, quiet
            free = max(1, cores - args.busy)
            ceiling = {streams: round(best(args.repeat, rate, lr, args.model, streams, t, {"num_thread": free}), 2)
                       for streams in (1, 4)}
            results["ceiling"] = {"num_thread": free, "tok_s": ceiling}
            print(f"quiet localrun pinned to {free} thread(s): {ceiling}", flush=True)
            rate(lr, args.model, 1, 4)  # back to the followed thread count (a reload)
        if "two" in args.phases:
            half = max(1, cores // 2)
            two: dict[str, float] = {}
            for name in (args.model, args.second):  # each alone on half the cores, then both at once on all
                two[f"{name} alone, num_thread {half}"] = round(best(args.repeat, rate, lr, name, 1, t,
                                                                     {"num_thread": half}), 2)
            rate(lr, args.model, 1, 4)
            rate(lr, args.second, 1, 4)  # back to the followed thread count (a reload each)

            def both(base_a: str, model_a: str, base_b: str, model_b: str) -> tuple[float, float]:
                with ThreadPoolExecutor(2) as pool:
                    fa = pool.submit(rate, base_a, model_a, 1, t)
                    fb = pool.submit(rate, base_b, model_b, 1, t)
                    return fa.result(), fb.result()

            runs = [both(lr, args.model, lr, args.second) for _ in range(args.repeat)]
            a, b = max(runs, key=sum)
            two["localrun both at once: " + args.model] = round(a, 2)
            two["localrun both at once: " + args.second] = round(b, 2)
            ls2 = servers.start_llama(second, 18096)
            rate(ls2, "x", 1, 4)
            runs = [both(ls, "x", ls2, "x") for _ in range(args.repeat)]
            a2, b2 = max(runs, key=sum)
            two["llama-server both at once: " + args.model] = round(a2, 2)
            two["llama-server both at once: " + args.second] = round(b2, 2)
            results["two_models"] = two
            for k, v in two.items():
                print(f"{k:55} {v:8.2f} tok/s", flush=True)
    finally:
        servers.stop()
        shutil.copy(work / "localrun.log", args.out / "localrun.log") if (work / "localrun.log").exists() else None
    (args.out / "busy_desktop.json").write_text(json.dumps(results, indent=1))
    (args.out / "busy_desktop.md").write_text(markdown(results, args))
    print(markdown(results, args))
    return 0


def markdown(r: dict[str, object], args: argparse.Namespace) -> str:
    decode = r.get("decode") or {}
    assert isinstance(decode, dict)
    lines = [f"CPU: {r['cpu']}, {r['cores']} cores; busy = {r['busy_processes']} spinning process(es); "
             f"{r['tokens']} tokens per request, best of {r['repeat']}; repack {'on' if r['repack'] else 'off'}", "",
             "| target, streams | quiet tok/s | busy tok/s | busy / quiet |", "|---|---|---|---|"]
    for key, v in decode.items():
        lines.append(f"| {key} | {v['quiet']:.1f} | {v['busy']:.1f} | {v['busy'] / v['quiet']:.2f} |")
    ceiling = r.get("ceiling")
    if isinstance(ceiling, dict):
        tok = ceiling["tok_s"]
        lines += ["", f"Ceiling with the free cores only (localrun, quiet, num_thread {ceiling['num_thread']}): "
                  + ", ".join(f"{n} stream(s) {v:.1f} tok/s" for n, v in tok.items())]
    two = r.get("two_models")
    if isinstance(two, dict):
        lines += ["", "| two models | tok/s |", "|---|---|"] + [f"| {k} | {v:.1f} |" for k, v in two.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
