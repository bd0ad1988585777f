"""Statistics of a bench level: percentiles, measurement windows, TTFT/TPOT, errors never hidden."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.bench.stats import Outcome, RequestRecord, TokenSource, Window, percentile, summarize


def test_percentile_interpolates_between_closest_ranks() -> None:
    data = [1.0, 2.0, 3.0, 4.0]
    assert percentile(data, 0) == 1.0
    assert percentile(data, 100) == 4.0
    assert percentile(data, 50) == pytest.approx(2.5)
    assert percentile(data, 95) == pytest.approx(3.85)  # rank 2.85: 3 + 0.85 * (4 - 3)


def test_percentile_of_one_value_and_of_nothing() -> None:
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def test_percentile_order_of_input_does_not_matter() -> None:
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0


def test_percentile_rejects_out_of_range_q() -> None:
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy_linear(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-6)


def _req(start: float, first: float, n: int, step: float, client: int = 0) -> RequestRecord:
    times = [first + i * step for i in range(n)]
    return RequestRecord(
        client=client, start=start, end=times[-1] + 0.01, first_token=first, chunk_times=times,
        output_tokens=n, token_source=TokenSource.USAGE, finish_reason="length",
    )


def test_only_requests_started_inside_the_window_are_measured() -> None:
    warm = _req(start=0.0, first=0.5, n=10, step=0.1)  # started during warm-up
    inside = _req(start=1.0, first=1.2, n=10, step=0.1)
    after = _req(start=5.0, first=5.1, n=10, step=0.1)  # started after the window closed
    stats = summarize([warm, inside, after], Window(1.0, 3.0), concurrency=1)
    assert stats.requests == 1
    assert stats.warmup_requests == 1
    assert stats.ttft.count == 1
    assert stats.ttft.p50 == pytest.approx(0.2)


def test_throughput_counts_tokens_received_inside_the_window_over_its_length() -> None:
    # Warm-up request's tokens arrive at 0.55..1.45: 5 of them (1.05..1.45) fall inside [1.0, 3.0).
    warm = _req(start=0.0, first=0.55, n=10, step=0.1)
    inside = _req(start=1.0, first=1.2, n=10, step=0.1)  # tokens at 1.2..2.1, all inside
    stats = summarize([warm, inside], Window(1.0, 3.0), concurrency=2)
    assert stats.output_tokens_in_window == pytest.approx(15)
    assert stats.output_tok_s == pytest.approx(7.5)


def test_tokens_are_spread_over_chunks_when_usage_differs_from_chunk_count() -> None:
    rec = _req(start=0.0, first=0.1, n=4, step=0.1)
    rec.output_tokens = 8  # the server merged two tokens per chunk
    assert rec.tokens_between(0.0, 0.25) == pytest.approx(4)


def test_tpot_excludes_the_first_token() -> None:
    rec = _req(start=0.0, first=1.0, n=11, step=0.05)  # 10 gaps of 50 ms after a slow first token
    stats = summarize([rec], Window(0.0, 10.0), concurrency=1)
    assert stats.tpot.p50 == pytest.approx(0.05)
    assert stats.ttft.p50 == pytest.approx(1.0)


def test_errors_and_timeouts_are_counted_and_excluded_from_latency() -> None:
    ok = _req(start=0.0, first=0.2, n=5, step=0.1)
    err = RequestRecord(client=1, start=0.1, end=0.2, outcome=Outcome.ERROR, error="HTTP 500: boom")
    slow = RequestRecord(client=2, start=0.1, end=9.0, outcome=Outcome.TIMEOUT, error="no complete response")
    stats = summarize([ok, err, slow], Window(0.0, 10.0), concurrency=3)
    assert (stats.requests, stats.ok, stats.errors, stats.timeouts) == (3, 1, 1, 1)
    assert stats.ttft.count == 1
    assert "HTTP 500: boom" in stats.error_samples


def test_failed_warmup_requests_are_reported_too() -> None:
    err = RequestRecord(client=0, start=0.0, end=0.1, outcome=Outcome.ERROR, error="connection refused")
    stats = summarize([err], Window(1.0, 2.0), concurrency=1)
    assert stats.warmup_failures == 1
    assert stats.error_samples == ("connection refused",)


def test_short_outputs_are_counted() -> None:
    full = _req(start=0.0, first=0.1, n=8, step=0.1)
    short = _req(start=0.0, first=0.1, n=3, step=0.1)
    stats = summarize([full, short], Window(0.0, 5.0), concurrency=2, expected_output=8)
    assert stats.short_outputs == 1
    assert (stats.min_output_tokens, stats.max_output_tokens) == (3, 8)


def test_empty_window_gives_no_numbers_rather_than_a_crash() -> None:
    stats = summarize([], Window(1.0, 1.0), concurrency=4)
    assert stats.output_tok_s == 0.0
    assert stats.ttft.p95 is None and stats.requests == 0


def test_window_rejects_end_before_start() -> None:
    with pytest.raises(ValueError):
        Window(2.0, 1.0)
