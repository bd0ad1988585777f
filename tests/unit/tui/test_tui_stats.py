"""Dashboard numbers from /metrics and /api/ps, and the per-reply stats line."""

from __future__ import annotations

from tui_fakes import METRICS

from localrun.tui import stats as st
from localrun.tui.backend import ReplyStats


def test_parse_metrics_of_the_daemon_format() -> None:
    snap = st.parse_metrics(METRICS.format(generated=1000.0), at=10.0)
    assert snap.generated_tokens == 1000 and snap.prompt_tokens == 200 and snap.cached_tokens == 150
    assert snap.requests == 7 and snap.queue_depth == 1
    assert snap.cache_hit_rate == 0.75
    assert snap.kv_used == {"tiny:latest": 512} and snap.kv_total == {"tiny:latest": 2048}


def test_parse_metrics_tolerates_garbage_and_empty() -> None:
    assert st.parse_metrics("", 1.0).cache_hit_rate is None
    assert st.parse_metrics("this is { not prometheus", 1.0).generated_tokens == 0


def test_rate_between_snapshots_and_after_restart() -> None:
    a = st.MetricsSnapshot(at=10.0, generated_tokens=100)
    b = st.MetricsSnapshot(at=12.0, generated_tokens=180)
    assert st.rate(a, b) == 40.0
    assert st.rate(None, b) == 0.0
    assert st.rate(b, st.MetricsSnapshot(at=13.0, generated_tokens=5)) == 0.0  # counters reset


def test_reply_stats_line_and_verbose_block() -> None:
    done = {"done": True, "done_reason": "stop", "eval_count": 64, "eval_duration": 1_600_000_000,
            "prompt_eval_count": 12, "prompt_eval_duration": 30_000_000, "prompt_eval_cached_count": 8,
            "total_duration": 1_800_000_000, "load_duration": 2_000_000}
    stats = ReplyStats.from_done(done, ttft_s=0.12)
    assert stats.tokens_per_second == 40.0
    assert stats.summary() == "first token 120ms · 40.0 tok/s · 64 tokens · prompt 12 (8 cached)"
    verbose = "\n".join(stats.verbose_lines())
    assert "eval rate:            40.00 tokens/s" in verbose and "prompt eval count:    12 token(s)" in verbose
    assert "time to first token" in verbose
    assert ReplyStats.from_done({"eval_count": "x"}, None).summary() == "0 tokens · prompt 0"


def test_rate_is_live_from_token_latency_histograms() -> None:
    text = """\
# TYPE localrun_time_to_first_token_seconds histogram
localrun_time_to_first_token_seconds_bucket{model="m",le="+Inf"} 2.0
localrun_time_to_first_token_seconds_count{model="m"} 2.0
localrun_time_to_first_token_seconds_sum{model="m"} 0.4
# TYPE localrun_inter_token_latency_seconds histogram
localrun_inter_token_latency_seconds_bucket{model="m",le="+Inf"} {n}
localrun_inter_token_latency_seconds_count{model="m"} {n}
localrun_inter_token_latency_seconds_sum{model="m"} 1.0
"""
    a = st.parse_metrics(text.replace("{n}", "98.0"), at=1.0)
    b = st.parse_metrics(text.replace("{n}", "148.0"), at=2.0)
    assert a.streamed_tokens == 100 and st.rate(a, b) == 50.0
