"""Render a :class:`~localrun.bench.runner.BenchResult`: terminal table (rich), Markdown, JSON.

Every rendering shows errors and timeouts next to the throughput they belong to, and how prompt
lengths were obtained (exact with the target's tokenizer, or approximate).
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from .runner import BenchResult, LevelResult


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:,.0f} ms" if value < 10 else f"{value:,.1f} s"


def row_cells(lv: LevelResult) -> list[str]:
    s = lv.stats
    failed = s.errors + s.timeouts
    out_tok = "-" if s.mean_output_tokens is None else f"{s.mean_output_tokens:.0f}"
    if s.min_output_tokens is not None and s.min_output_tokens != s.max_output_tokens:
        out_tok += f" ({s.min_output_tokens}-{s.max_output_tokens})"
    server = "-" if lv.cpu.server_cores is None else f"{lv.cpu.server_cores:.2f}"
    return [
        lv.target,
        str(s.concurrency),
        f"{s.ok}/{s.requests}",
        f"{s.errors}/{s.timeouts}" if failed else "0",
        f"{s.output_tok_s:,.1f}",
        _ms(s.ttft.p50),
        _ms(s.ttft.p95),
        _ms(s.tpot.p50),
        _ms(s.tpot.p95),
        out_tok,
        f"{s.window_s:.2f} s" if s.window_s < 10 else f"{s.window_s:.0f} s",
        f"{lv.cpu.client_cores:.0%}",
        server,
    ]


HEADERS = [
    "target", "conc", "ok/req", "err/t.o.", "out tok/s", "TTFT p50", "TTFT p95",
    "TPOT p50", "TPOT p95", "tok/req", "window", "client CPU", "server cores",
]


def describe(result: BenchResult) -> list[str]:
    """Lines that say what was measured, for the head of every report."""
    cfg = result.config
    load = f"{cfg.duration_s:g} s per level" if cfg.duration_s else (
        f"{cfg.requests} requests per level (at least one per client)" if cfg.requests
        else "max(8, 2 x concurrency) requests per level")
    lines = [
        f"streaming /v1/{'chat/completions' if cfg.api == 'chat' else 'completions'}; "
        f"{cfg.input_tokens} input tokens"
        + (f" after a {cfg.shared_prefix}-token shared prefix" if cfg.shared_prefix else "")
        + f", {cfg.output_tokens} output tokens; {load}; warm-up {cfg.warmup_s:g} s; temperature {cfg.temperature:g}",
        f"prompt seed {cfg.seed}; " + (
            ("every prompt measured was sent once before, unmeasured" if cfg.first_pass else
             "every prompt measured was sent by an earlier run with this seed (no first pass)")
            if cfg.repeat_prompts else "fresh prompts: none was sent before in this run"),
    ]
    for t in result.targets:
        extras = (f"max_tokens + {', '.join(t.extras_sent)} (not rejected; honoured only if the server knows them)"
                  if t.extras_sent else "max_tokens only (the server rejected ignore_eos/min_tokens)")
        lines.append(f"{t.label}: {t.base_url} model {t.model}; prompts {t.tokenizer.note}; output length: {extras}")
    return lines


COMPACT = ("target", "conc", "ok/req", "err/t.o.", "out tok/s", "TTFT p50", "TTFT p95", "TPOT p50")


def ordered(result: BenchResult) -> list[LevelResult]:
    """Levels grouped by concurrency, targets in command-line order within each level."""
    rank = {t.label: i for i, t in enumerate(result.targets)}
    return sorted(result.levels, key=lambda lv: (lv.stats.concurrency, rank.get(lv.target, 99)))


def print_table(result: BenchResult, console: Console | None = None) -> None:
    """Print the run description, the table and the warnings; narrow terminals get fewer columns."""
    console = console or Console()
    if not console.is_terminal:
        console = Console(file=console.file, width=max(console.width, 160))
    keep = [i for i, h in enumerate(HEADERS) if console.width >= 130 or h in COMPACT]
    table = Table(title="localrun bench", title_justify="left")
    for i in keep:
        table.add_column(HEADERS[i], justify="left" if i == 0 else "right", no_wrap=True)
    for lv in ordered(result):
        cells = row_cells(lv)
        style = "red" if lv.stats.errors or lv.stats.timeouts else None
        table.add_row(*(cells[i] for i in keep), style=style)
    for line in describe(result):
        console.print(line, highlight=False, soft_wrap=True)
    console.print(table)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False, soft_wrap=True)


def to_markdown(result: BenchResult) -> str:
    lines = [f"- {line}" for line in describe(result)] + [""]
    lines.append("| " + " | ".join(HEADERS) + " |")
    lines.append("|" + "---|" * len(HEADERS))
    for lv in ordered(result):
        lines.append("| " + " | ".join(row_cells(lv)) + " |")
    if result.warnings:
        lines.append("")
        lines += [f"- warning: {w}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def to_json(result: BenchResult) -> str:
    def default(obj: object) -> object:
        if hasattr(obj, "value"):
            return obj.value
        raise TypeError(f"cannot serialise {type(obj).__name__}")

    return json.dumps(result.as_dict(), indent=2, default=default)
