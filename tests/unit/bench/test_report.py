"""Rendering a bench result: terminal table, JSON, Markdown and the HTML/SVG chart."""

from __future__ import annotations

import io
import json
import re
import xml.dom.minidom

from rich.console import Console

from localrun.bench.chart import to_html
from localrun.bench.cpu import CpuUsage
from localrun.bench.loadgen import Endpoint
from localrun.bench.prompts import TokenizerInfo
from localrun.bench.report import print_table, to_json, to_markdown
from localrun.bench.runner import BenchConfig, BenchResult, LevelResult, TargetInfo
from localrun.bench.stats import Outcome, RequestRecord, TokenSource, Window, summarize


def _level(label: str, c: int, step: float, errors: int = 0) -> LevelResult:
    recs = []
    for i in range(c):
        times = [0.1 * c + k * step for k in range(16)]
        recs.append(RequestRecord(client=i, start=0.0, end=times[-1], first_token=times[0], chunk_times=times,
                                  output_tokens=16, token_source=TokenSource.USAGE, finish_reason="length"))
    for i in range(errors):
        recs.append(RequestRecord(client=i, start=0.0, end=0.1, outcome=Outcome.ERROR, error="HTTP 503: busy"))
    stats = summarize(recs, Window(0.0, 0.1 * c + 16 * step), c, 16)
    return LevelResult(label, stats, CpuUsage(1.0, 0.05, 1.9, 2.0, 2), c)


def _result() -> BenchResult:
    cfg = BenchConfig(targets=(Endpoint("localrun", "http://127.0.0.1:11435", "m"),
                               Endpoint("other", "http://127.0.0.1:8000", "m")), concurrency=(1, 8))
    res = BenchResult(cfg)
    tok = TokenizerInfo("/extras/tokenize", True, "exact: built with /extras/tokenize, 3 prompts verified")
    res.targets = [TargetInfo("localrun", "http://127.0.0.1:11435", "m", tok, ("ignore_eos",), True),
                   TargetInfo("other", "http://127.0.0.1:8000", "m", tok, (), True)]
    res.levels = [_level("localrun", 1, 0.02), _level("other", 1, 0.05),
                  _level("other", 8, 0.4, errors=2), _level("localrun", 8, 0.03)]
    res.warnings = ["other @ 8: 2 errors, 0 timeouts of 10 measured requests (HTTP 503: busy)"]
    return res


def test_json_is_machine_readable_and_keeps_errors() -> None:
    data = json.loads(to_json(_result()))
    assert data["version"] == 1
    assert [t["label"] for t in data["targets"]] == ["localrun", "other"]
    other8 = next(lv for lv in data["levels"] if lv["target"] == "other" and lv["concurrency"] == 8)
    assert other8["errors"] == 2 and other8["requests"] == 10
    assert other8["ttft"]["p95"] is not None and other8["cpu"]["client_cores"] == 0.05
    assert data["warnings"]


def test_table_shows_every_target_level_and_the_failures() -> None:
    buf = io.StringIO()
    print_table(_result(), Console(file=buf, width=200))
    text = buf.getvalue()
    assert "localrun" in text and "other" in text
    assert re.search(r"other\s+│\s+8\s+│\s+8/10\s+│\s+2/0", text)
    assert "warning" in text and "exact: built with /extras/tokenize" in text


def test_narrow_terminal_still_shows_throughput_and_ttft() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=90, force_terminal=True)
    print_table(_result(), console)
    text = re.sub(r"\x1b\[[0-9;]*m", "", buf.getvalue())
    assert "out tok/s" in text and "TTFT p95" in text and "server cores" not in text


def test_markdown_table_groups_levels_by_concurrency() -> None:
    md = to_markdown(_result())
    rows = [line for line in md.splitlines() if line.startswith("| ") and "conc" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["localrun", "other", "localrun", "other"]


def test_chart_is_self_contained_html_with_valid_svg() -> None:
    page = to_html(_result())
    assert not re.search(r"<script|<link|<img|\ssrc=|\shref=", page)  # nothing fetched from elsewhere
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 2
    for svg in svgs:
        xml.dom.minidom.parseString(svg)
    assert "Aggregate output tokens/s" in page and "Time to first token" in page
    assert page.count("<polyline") == 2 + 4  # throughput per target; TTFT p50 and p95 per target
