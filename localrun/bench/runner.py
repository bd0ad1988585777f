"""A whole bench run: prepare every target, then each concurrency level for each target in turn.

Targets are interleaved per level (A then B at level 1, B then A at the next level, ...) so slow
drifts of the machine (thermal state, other load) fall on both engines alike. Before the levels,
each target is prepared once: its model resolved (``GET /v1/models`` when none was given), its
tokenizer found and prompts calibrated, and one priming request sent, which also loads the model
and finds which optional request fields it accepts (``ignore_eos``/``min_tokens`` pin the output
length, ``stream_options.include_usage`` gives exact token counts).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace

import httpx

from ..errors import BenchError
from ..jsontypes import JSONObject, JSONValue
from .cpu import CpuMeter, CpuUsage, find_server, is_local, warnings_for
from .loadgen import Endpoint, LevelRun, LoadPlan, run_level, send_one
from .prompts import CountFn, PromptBuilder, TokenizerInfo, calibrate, find_tokenizer
from .stats import LevelStats, Outcome, RequestRecord, summarize

log = logging.getLogger(__name__)

EXTRA_FIELDS: tuple[tuple[str, Callable[[int], JSONValue]], ...] = (
    ("ignore_eos", lambda n: True),
    ("min_tokens", lambda n: n),
)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    targets: tuple[Endpoint, ...]  # --base-url first, then each --compare; model may be ""
    concurrency: tuple[int, ...]
    api: str = "completions"
    input_tokens: int = 128
    output_tokens: int = 64
    shared_prefix: int = 0
    requests: int | None = None  # per level; None with duration None means max(8, 2 x concurrency)
    duration_s: float | None = None
    warmup_s: float = 0.0
    timeout_s: float = 300.0
    temperature: float = 0.0
    send_extras: bool = True
    pause_s: float = 1.0
    seed: int = 0  # prompt text seed; the CLI draws a fresh one per run unless --seed is given
    tokenizer_url: str | None = None  # build every target's prompts with this server's tokenizer
    # Measure prompts the server has seen: each level first sends its prompts once, unmeasured (the
    # "first pass"), then measures the same prompts again; with first_pass False that pass is left
    # out because an earlier run with the same seed sent them (e.g. before a server restart).
    repeat_prompts: bool = False
    first_pass: bool = True


@dataclass(frozen=True, slots=True)
class TargetInfo:
    label: str
    base_url: str
    model: str
    tokenizer: TokenizerInfo
    extras_sent: tuple[str, ...]
    usage_requested: bool


@dataclass(frozen=True, slots=True)
class LevelResult:
    target: str
    stats: LevelStats
    cpu: CpuUsage
    requests_planned: int | None
    records: tuple[RequestRecord, ...] = ()
    window_start: float = 0.0

    def request_rows(self) -> list[JSONValue]:
        """Every request of the level (warm-up included) as an object, times in seconds from the window start."""
        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - self.window_start, 4)

        return [
            {"client": r.client, "start": rel(r.start), "measured": r.start >= self.window_start,
             "ttft": None if r.ttft is None else round(r.ttft, 4), "end": rel(r.end),
             "output_tokens": r.output_tokens, "token_source": r.token_source.value,
             "prompt_tokens": r.prompt_tokens, "outcome": r.outcome.value, "error": r.error,
             "finish_reason": r.finish_reason}
            for r in sorted(self.records, key=lambda r: r.start)
        ]


@dataclass(slots=True)
class BenchResult:
    config: BenchConfig
    targets: list[TargetInfo] = field(default_factory=list)
    levels: list[LevelResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    machine: JSONObject = field(default_factory=dict)
    interrupted: bool = False  # stopped early; ``levels`` holds the levels measured before that

    def as_dict(self) -> JSONObject:
        """A JSON-ready view (the format of ``--json``; version bumps on incompatible changes)."""
        cfg = asdict(self.config)
        cfg["targets"] = [{"label": t.label, "base_url": t.base_url, "model": t.model} for t in self.config.targets]
        return {
            "version": 1,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at)),
            "machine": self.machine,
            "config": cfg,
            "targets": [
                {**asdict(t), "tokenizer": t.tokenizer.as_dict(), "extras_sent": list(t.extras_sent)}
                for t in self.targets
            ],
            "levels": [
                {"target": lv.target, "requests_planned": lv.requests_planned, **asdict(lv.stats),
                 "cpu": lv.cpu.as_dict(), "requests_detail": lv.request_rows()}
                for lv in self.levels
            ],
            "warnings": list(self.warnings),
            "interrupted": self.interrupted,
        }


def requests_for(config: BenchConfig, concurrency: int) -> int | None:
    """Measured requests at one level: ``--requests`` but at least one per client."""
    if config.duration_s is not None:
        return None
    if config.requests is None:
        return max(8, 2 * concurrency)
    return max(config.requests, concurrency)


async def _resolve_model(client: httpx.AsyncClient, target: Endpoint) -> Endpoint:
    if target.model:
        return target
    try:
        resp = await client.get(target.base_url + "/v1/models", headers=target.headers, timeout=30)
    except httpx.HTTPError as exc:
        raise BenchError(f"{target.label}: cannot reach {target.base_url} ({exc})") from exc
    if resp.status_code != 200:
        raise BenchError(f"{target.label}: GET /v1/models answered HTTP {resp.status_code}; pass --model")
    data = resp.json().get("data") or []
    if not data:
        raise BenchError(f"{target.label}: the server lists no models; pass --model")
    return replace(target, model=str(data[0]["id"]))


async def _shared_tokenizer(client: httpx.AsyncClient, config: BenchConfig) -> tuple[str, CountFn] | None:
    """The --tokenizer-url endpoint, asked for the model it serves (a daemon like localrun needs a name).

    When the URL is one of the targets, that target's model and API key are used; otherwise no
    model first (llama.cpp-style servers serve one), then the first model its /v1/models lists.
    """
    url = config.tokenizer_url
    assert url is not None
    owner = next((t for t in config.targets if t.base_url == url), None)
    if owner is not None:
        owner = await _resolve_model(client, owner)
        return await find_tokenizer(client, url, owner.model, owner.headers)
    found = await find_tokenizer(client, url, None, {})
    if found is None:
        try:
            listed = await _resolve_model(client, Endpoint("--tokenizer-url", url, ""))
        except BenchError:
            return None
        found = await find_tokenizer(client, url, listed.model, {})
    return found


async def _prime(client: httpx.AsyncClient, target: Endpoint, plan: LoadPlan, prompt: str) -> LoadPlan:
    """Send one short request, dropping optional fields the server rejects; returns the plan to use."""
    candidates = [plan]
    if plan.extras:
        no_extra = {k: v for k, v in plan.extras.items() if k == "stream_options"}
        candidates += [replace(plan, extras=no_extra), replace(plan, extras={})]
    last: RequestRecord | None = None
    for cand in candidates:
        last = await send_one(client, target, cand, prompt, max_tokens=4)
        if last.outcome is Outcome.OK:
            return cand
        if not (last.error or "").startswith(("HTTP 400", "HTTP 422")):
            break
    msg = last.error if last else "no request sent"
    raise BenchError(f"{target.label}: the priming request to {target.base_url} failed: {msg}")


async def _prepare(
    client: httpx.AsyncClient, config: BenchConfig, target: Endpoint, base_plan: LoadPlan
) -> tuple[Endpoint, TargetInfo, LoadPlan, PromptBuilder]:
    target = await _resolve_model(client, target)
    if config.tokenizer_url:
        found = await _shared_tokenizer(client, config)
        if found is None:
            raise BenchError(f"--tokenizer-url {config.tokenizer_url}: no tokenizer endpoint answers there")
        found = (config.tokenizer_url + found[0], found[1])
    else:
        found = await find_tokenizer(client, target.base_url, target.model, target.headers)
    path, count = found if found else (None, None)

    def sample(builder: PromptBuilder) -> list[tuple[str, int]]:
        return [
            (builder.prompt(i, config.input_tokens, config.shared_prefix), config.input_tokens + config.shared_prefix)
            for i in (0, 1, 997)
        ]

    builder, tok_info = await calibrate(count, path, config.seed, sample)
    plan = await _prime(client, target, base_plan, builder.prompt(10**6, 8))
    info = TargetInfo(
        label=target.label,
        base_url=target.base_url,
        model=target.model,
        tokenizer=tok_info,
        extras_sent=tuple(k for k in plan.extras if k != "stream_options"),
        usage_requested="stream_options" in plan.extras,
    )
    return target, info, plan, builder


async def run_bench(config: BenchConfig, progress: Callable[[str], None] | None = None) -> BenchResult:
    """Run every level for every target; raises BenchError when a target cannot be measured at all."""
    say = progress or (lambda _msg: None)
    cpu_count = os.cpu_count()
    result = BenchResult(config, machine={"cpu_count": cpu_count, "platform": platform.platform()})
    extras: JSONObject = {"stream_options": {"include_usage": True}}
    if config.send_extras:
        extras.update({k: f(config.output_tokens) for k, f in EXTRA_FIELDS})
    base_plan = LoadPlan(
        api=config.api, output_tokens=config.output_tokens, duration_s=config.duration_s,
        warmup_s=config.warmup_s, timeout_s=config.timeout_s, temperature=config.temperature, extras=extras,
    )
    max_c = max(config.concurrency)
    limits = httpx.Limits(max_connections=max_c + 4, max_keepalive_connections=max_c + 4)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(config.timeout_s, connect=10)) as client:
        prepared = []
        for target in config.targets:
            say(f"preparing {target.label} at {target.base_url}")
            prepared.append(await _prepare(client, config, target, base_plan))
        result.targets = [p[1] for p in prepared]
        for info in result.targets:
            say(f"{info.label}: model {info.model}; prompt lengths {info.tokenizer.note}")
        if any(is_local(t.base_url) for t in config.targets) and (cpu_count or 1) <= 2:
            result.warnings.append(
                f"the load generator runs on the same {cpu_count} cores as the server"
            )
        # One prompt counter per target: every target gets the same prompt sequence, and no prompt twice.
        counters = {info.label: itertools.count() for info in result.targets}
        current = ""
        try:
            for li, c in enumerate(config.concurrency):
                order = prepared if li % 2 == 0 else prepared[::-1]
                for target, info, plan, builder in order:
                    current = f"{info.label} @ {c}"
                    await _measure_level(client, config, result, c, target, info, plan, builder,
                                         counters[info.label], say)
                    if config.pause_s > 0:
                        await asyncio.sleep(config.pause_s)
        except asyncio.CancelledError:
            # Interrupted (Ctrl-C, SIGTERM, an outer timeout): keep what was measured, say what was not.
            result.interrupted = True
            result.warnings.append(f"interrupted during {current}: that level and the ones after it were not measured")
    return result


async def _measure_level(
    client: httpx.AsyncClient, config: BenchConfig, result: BenchResult, c: int, target: Endpoint,
    info: TargetInfo, plan: LoadPlan, builder: PromptBuilder, numbers: Iterator[int], say: Callable[[str], None],
) -> None:
    """Run one level for one target and append its result and warnings to ``result``."""
    n = requests_for(config, c)
    level_plan = replace(plan, requests=n)
    meter = CpuMeter(find_server(target.base_url))
    say(f"{info.label}: concurrency {c}, " + (f"{n} requests" if n else f"{config.duration_s:g} s"))

    next_prompt = _prompt_source(config, builder, numbers, n)
    if config.repeat_prompts and config.first_pass and n:
        say(f"{info.label}: concurrency {c}: first pass, {n} requests (not measured)")
        first = await run_level(client, target, level_plan, c, next_prompt)
        failed = [r for r in first.records if r.outcome is not Outcome.OK]
        if failed:
            result.warnings.append(f"{info.label} @ {c}: {len(failed)} of {len(first.records)} first-pass requests "
                                   f"failed ({failed[0].error}); their prompts are measured uncached")
    meter.start()
    run: LevelRun = await run_level(client, target, level_plan, c, next_prompt)
    cpu = meter.stop()
    stats = summarize(run.records, run.window, c, config.output_tokens)
    result.levels.append(LevelResult(info.label, stats, cpu, n, tuple(run.records), run.window.start))
    result.warnings += warnings_for(cpu, f"{info.label} @ {c}")
    if stats.errors or stats.timeouts:
        result.warnings.append(
            f"{info.label} @ {c}: {stats.errors} errors, {stats.timeouts} timeouts of "
            f"{stats.requests} measured requests ({'; '.join(stats.error_samples[:2])})"
        )
    if stats.short_outputs:
        result.warnings.append(
            f"{info.label} @ {c}: {stats.short_outputs} of {stats.ok} successful requests received "
            f"fewer than {config.output_tokens} output tokens (the server stopped early)"
        )
    say(f"{info.label}: concurrency {c}: {stats.output_tok_s:.1f} tok/s, {stats.ok}/{stats.requests} ok")


def _prompt_source(config: BenchConfig, builder: PromptBuilder, numbers: Iterator[int],
                   n: int | None) -> Callable[[], str]:
    """The prompts of one level: fresh ones (numbers never used before in this run), or with
    ``repeat_prompts`` a pool of ``n`` fresh ones that each pass sends in the same order."""
    def build(number: int) -> str:
        return builder.prompt(number, config.input_tokens, config.shared_prefix)

    if not config.repeat_prompts or not n:
        return lambda: build(next(numbers))
    pool = [build(next(numbers)) for _ in range(n)]
    cursor = itertools.cycle(range(n))
    return lambda: pool[next(cursor)]
