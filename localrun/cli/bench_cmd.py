"""``localrun bench``: load-test localrun or any OpenAI-compatible server, optionally several side by side."""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from .. import config
from ..bench.baseline import BASELINE_THRESHOLD, compare, print_changes, read_baseline
from ..bench.chart import to_html
from ..bench.loadgen import Endpoint
from ..bench.report import print_table, to_json, to_markdown
from ..bench.runner import BenchConfig, BenchResult, run_bench
from ..client import Client
from ..errors import OptionError
from .connect import require_daemon

EPILOG = """\
examples:
  localrun bench --model gemma3 --concurrency 1,4,8
  localrun bench --model gemma3 --compare http://127.0.0.1:8000 --json out.json --chart out.html
  localrun bench --compare 127.0.0.1:8000 --compare-label llama-cpp-python \
                 --compare 127.0.0.1:8080 --compare-label llama.cpp --concurrency 1,8
  localrun bench --base-url http://127.0.0.1:8080 --shared-prefix 1300 --input-tokens 40 --concurrency 8

Prompts are built to --input-tokens with the target's tokenizer where it exposes one (else the
lengths are approximate and reported as such); --shared-prefix N puts the same N tokens before
every prompt. --output-tokens is enforced with max_tokens plus ignore_eos/min_tokens where the
server accepts them; the report shows the tokens actually received.
"""


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,4,8,16, got {text!r}") from None
    if not levels or any(c < 1 or c > 1024 for c in levels):
        raise argparse.ArgumentTypeError("each concurrency level must be from 1 to 1024")
    return levels


def _positive(kind: type, minimum: float) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}")
        return value  # type: ignore[no-any-return]

    return parse


def normalize_url(url: str) -> str:
    """``host:port``, ``http://host:port/`` or ``.../v1`` -> ``http://host:port`` (no trailing /v1)."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://", url):
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "bench", help="measure throughput and latency of localrun or any OpenAI-compatible server",
        description="Closed-loop load test: fixed input/output lengths, warm-up, measurement window, "
        "concurrency levels; TTFT and TPOT percentiles, aggregate output tokens/s, errors and timeouts.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("targets")
    g.add_argument("--base-url", help="server to measure (default: the local daemon, LOCALRUN_HOST)")
    g.add_argument("--model", default="", help="model name (default: for the local daemon, the model it has "
                   "loaded, else the starter model; for --base-url, the first one GET /v1/models lists)")
    g.add_argument("--label", help="name of the target in reports (default: localrun, or host:port)")
    g.add_argument("--api-key", help="bearer token for --base-url (default: LOCALRUN_API_KEY for the daemon)")
    g.add_argument("--compare", metavar="URL", action="append", default=[],
                   help="another server, measured interleaved in the same run (repeat for several)")
    g.add_argument("--compare-model", action="append", default=[],
                   help="model name on the matching --compare (default: its first model)")
    g.add_argument("--compare-label", action="append", default=[],
                   help="name of the matching --compare target in reports")
    g.add_argument("--compare-api-key", action="append", default=[], help="bearer token for the matching --compare")
    g.add_argument("--tokenizer-url", metavar="URL",
                   help="build every target's prompts with this server's tokenizer (it must serve the same model), "
                   "e.g. when a target exposes no tokenizer")
    w = p.add_argument_group("workload")
    w.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                   help="stream /v1/completions or /v1/chat/completions (default: completions)")
    w.add_argument("--concurrency", type=_concurrency, default=(1, 4, 8, 16), help="levels, e.g. 1,4,8,16")
    w.add_argument("--input-tokens", type=_positive(int, 1), default=128, help="unique prompt tokens (default 128)")
    w.add_argument("--output-tokens", type=_positive(int, 1), default=64, help="tokens to generate (default 64)")
    w.add_argument("--shared-prefix", type=_positive(int, 0), default=0, metavar="N",
                   help="N tokens shared by every prompt, before the unique --input-tokens (default 0)")
    n = w.add_mutually_exclusive_group()
    n.add_argument("--requests", type=_positive(int, 1),
                   help="measured requests per level, at least one per client (default: max(8, 2 x concurrency))")
    n.add_argument("--duration", type=_positive(float, 0.1), metavar="SECONDS", help="measurement window per level")
    w.add_argument("--warmup", type=_positive(float, 0), default=0.0, metavar="SECONDS",
                   help="load before the window opens at each level; those requests are not measured (default 0)")
    w.add_argument("--timeout", type=_positive(float, 0.1), default=300.0, metavar="SECONDS",
                   help="per-request limit; late requests count as timeouts (default 300)")
    w.add_argument("--temperature", type=_positive(float, 0), default=0.0, help="sampling temperature (default 0)")
    w.add_argument("--no-extras", action="store_true", help="do not send ignore_eos/min_tokens")
    w.add_argument("--pause", type=_positive(float, 0), default=1.0, metavar="SECONDS",
                   help="idle time between runs (default 1)")
    w.add_argument("--seed", type=int, default=None,
                   help="prompt text seed (default: a fresh random one per run, printed, so a repeated run "
                   "never measures a server's cache of the last run's prompts)")
    w.add_argument("--repeat-prompts", action="store_true",
                   help="measure prompts the server has seen: each level sends its prompts once unmeasured, "
                   "then measures the same prompts again (a prompt cache's TTFT); needs --requests, not --duration")
    w.add_argument("--no-first-pass", dest="first_pass", action="store_false",
                   help="with --repeat-prompts and --seed: leave out the unmeasured pass, because the same "
                   "command sent these prompts before (e.g. to measure a cache across a server restart)")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="FILE", help="write machine-readable results ('-' for stdout)")
    o.add_argument("--chart", metavar="FILE", help="write a self-contained HTML page with SVG charts")
    o.add_argument("--markdown", metavar="FILE", help="write the table as Markdown")
    o.add_argument("--baseline", metavar="FILE",
                   help="compare with a stored --json result; a throughput drop or a latency rise of more than "
                   f"{BASELINE_THRESHOLD:.0%}% is flagged as a regression (exit status 1)")  # %% for argparse
    o.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> BenchConfig:
    if args.chart and not args.chart.lower().endswith((".html", ".htm")):
        raise OptionError("--chart writes HTML (with SVG charts): give a file name ending in .html")
    if args.repeat_prompts and args.duration is not None:
        raise OptionError("--repeat-prompts repeats a fixed set of prompts: give --requests, not --duration")
    if not args.first_pass and not (args.repeat_prompts and args.seed is not None):
        raise OptionError("--no-first-pass needs --repeat-prompts and the --seed of the run that sent the prompts")
    if args.base_url:
        base = normalize_url(args.base_url)
        key = args.api_key
        label = args.label or base.split("://", 1)[1]
    else:
        base = config.host().url
        key = args.api_key or config.api_key()
        label = args.label or "localrun"
    targets = [Endpoint(label, base, args.model, key)]
    for flag in ("compare_model", "compare_label", "compare_api_key"):
        if len(getattr(args, flag)) > len(args.compare):
            raise OptionError(f"--{flag.replace('_', '-')} given {len(getattr(args, flag))} times but --compare "
                              f"{len(args.compare)} times: the n-th one applies to the n-th --compare")
    for i, url in enumerate(args.compare):
        other = normalize_url(url)
        other_label = _nth(args.compare_label, i) or other.split("://", 1)[1]
        taken = {t.label for t in targets}
        if other_label in taken:
            n = 2
            while f"{other_label} ({n})" in taken:
                n += 1
            other_label = f"{other_label} ({n})"
        targets.append(Endpoint(other_label, other, _nth(args.compare_model, i) or "", _nth(args.compare_api_key, i)))
    return BenchConfig(
        targets=tuple(targets), concurrency=args.concurrency, api=args.endpoint,
        input_tokens=args.input_tokens, output_tokens=args.output_tokens, shared_prefix=args.shared_prefix,
        requests=args.requests, duration_s=args.duration, warmup_s=args.warmup, timeout_s=args.timeout,
        temperature=args.temperature, send_extras=not args.no_extras, pause_s=args.pause,
        seed=args.seed if args.seed is not None else random.SystemRandom().randrange(2**31),
        tokenizer_url=normalize_url(args.tokenizer_url) if args.tokenizer_url else None,
        repeat_prompts=args.repeat_prompts, first_pass=args.first_pass,
    )


def _nth(values: list[str], i: int) -> str | None:
    return values[i] if i < len(values) else None


def write_outputs(result: BenchResult, args: argparse.Namespace) -> None:
    if args.json == "-":
        sys.stdout.write(to_json(result) + "\n")
    elif args.json:
        Path(args.json).write_text(to_json(result) + "\n", encoding="utf-8")
    if args.chart:
        Path(args.chart).write_text(to_html(result), encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(to_markdown(result), encoding="utf-8")


def default_model(client: Client) -> tuple[str, str]:
    """The model ``bench`` measures on the local daemon when no --model is given, and why that one.

    The model the daemon has loaded (the most recently loaded of several), so the measurement
    loads nothing extra; with none loaded, the default starter model.
    """
    from ..store.starter import STARTER  # the store (and numpy, via gguf) only when needed

    loaded = sorted(client.ps(), key=lambda m: str(m.get("loaded_at") or ""), reverse=True)
    if not loaded:
        return str(STARTER), "the default starter model: nothing is loaded"
    name = str(loaded[0].get("name"))
    others = [str(m.get("name")) for m in loaded[1:]]
    also = f"; also loaded: {', '.join(others)} (pick one with --model)" if others else ""
    return name, f"the model the daemon has loaded{also}"


def run(args: argparse.Namespace) -> int:
    def progress(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    if not args.base_url and not args.model:
        with require_daemon() as client:
            args.model, why = default_model(client)
        print(f"bench: no --model given; measuring {args.model}, {why}", file=sys.stderr, flush=True)
    cfg = build_config(args)
    baseline = read_baseline(Path(args.baseline)) if args.baseline else None
    to_stdout = args.json == "-"
    # On stderr even with --quiet: the seed is what reproduces (or deliberately avoids) these prompts.
    print(f"prompt seed: {cfg.seed} (--seed {cfg.seed} sends the same prompts again)", file=sys.stderr, flush=True)
    result = asyncio.run(_run_interruptible(cfg, progress))
    if not to_stdout:
        print_table(result)
    write_outputs(result, args)
    regressions = 0
    if baseline is not None:
        changes = compare(result.as_dict(), baseline, BASELINE_THRESHOLD)
        print_changes(changes, args.baseline, BASELINE_THRESHOLD, file=sys.stderr if to_stdout else sys.stdout)
        regressions = sum(1 for ch in changes if ch.regression)
    if result.interrupted:
        return 130
    failed = sum(lv.stats.errors + lv.stats.timeouts for lv in result.levels)
    return 1 if failed or regressions else 0


async def _run_interruptible(cfg: BenchConfig, progress: Callable[[str], None]) -> BenchResult:
    """run_bench, where Ctrl-C or SIGTERM ends the run early but keeps the levels already measured."""
    task = asyncio.create_task(run_bench(cfg, progress))
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, task.cancel)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
            pass
    try:
        return await task
    except asyncio.CancelledError:  # interrupted before anything was measured
        raise KeyboardInterrupt from None
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
