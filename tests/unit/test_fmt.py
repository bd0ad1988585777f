"""The formatters people read: keep-alive countdowns, byte sizes, the PROCESSOR column, durations."""

from __future__ import annotations

import datetime as dt

from localrun import fmt


def test_countdown_and_sizes() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert fmt.countdown("2026-01-01T00:04:12Z", now) == "4m 12s"
    assert fmt.countdown("2026-01-01T01:05:00+00:00", now) == "1h 05m"
    assert fmt.countdown("2025-12-31T23:59:00Z", now) == "unloading"
    assert fmt.countdown(None, now) == "forever"
    assert fmt.countdown("2318-01-01T00:00:00Z", now) == "forever"
    assert fmt.human_bytes(253_000_000) == "253 MB" and fmt.human_bytes(1_500_000_000) == "1.5 GB"
    assert fmt.processor_column({"size": 100, "size_vram": 52}) == "48%/52% CPU/GPU"
    assert fmt.processor_column({"size": 100, "processor": "100% GPU"}) == "100% GPU"


def test_measured_times_read_like_go_durations() -> None:
    assert fmt.format_seconds(0.0004) == "400µs" and fmt.format_seconds(125) == "2m05s"
