"""Statistics of one load level: pure functions over request records, no I/O.

Definitions (the same for every endpoint, so two engines are compared on one method):

- **Percentile**: linear interpolation between closest ranks (Hyndman & Fan type 7, NumPy's
  default): for sorted values ``x[0..n-1]`` the q-th percentile sits at rank ``(n - 1) * q / 100``
  and is interpolated between its two neighbours. Empty input gives ``None``.
- **Measurement window** ``[start, end)``: latency statistics (TTFT, TPOT, end-to-end) use only
  the requests *started* inside the window; requests started during warm-up are never measured.
  Aggregate output tokens/s is every output token *received* inside the window, whichever request
  it belongs to (the server produced it while the window was open), divided by the window length.
- **TTFT**: first non-empty content chunk minus request start (includes queueing and prefill).
- **TPOT**: (last content chunk - first content chunk) / (output tokens - 1): the time per output
  token *after* the first; requests with fewer than two tokens have none.
- Errors and timeouts among the measured requests are counted and reported next to the numbers
  they would otherwise bias; errors during warm-up are counted separately.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum


class Outcome(str, Enum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"


class TokenSource(str, Enum):
    """Where a request's output-token count came from, most to least reliable."""

    USAGE = "usage"  # the server's own usage.completion_tokens
    MAX_TOKENS = "max_tokens"  # finish_reason == "length": exactly max_tokens were produced
    CHUNKS = "chunks"  # one per non-empty streamed chunk (may undercount merged chunks)


@dataclass(slots=True)
class RequestRecord:
    """One request as the load generator saw it. Times are ``time.perf_counter()`` seconds.

    ``chunk_times`` holds the arrival time of every non-empty content chunk; ``output_tokens`` is
    the token count from ``token_source`` (it may differ from ``len(chunk_times)``).
    """

    client: int
    start: float
    end: float | None = None
    first_token: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    output_tokens: int = 0
    token_source: TokenSource = TokenSource.CHUNKS
    prompt_tokens: int | None = None
    outcome: Outcome = Outcome.OK
    error: str | None = None
    finish_reason: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    @property
    def tpot(self) -> float | None:
        if self.first_token is None or self.output_tokens < 2 or not self.chunk_times:
            return None
        return (self.chunk_times[-1] - self.first_token) / (self.output_tokens - 1)

    @property
    def latency(self) -> float | None:
        return None if self.end is None else self.end - self.start

    def tokens_between(self, start: float, end: float) -> float:
        """Output tokens received in ``[start, end)``: each chunk carries ``output_tokens / chunks``."""
        if not self.chunk_times:
            return 0.0
        inside = sum(1 for t in self.chunk_times if start <= t < end)
        return inside * self.output_tokens / len(self.chunk_times)


@dataclass(frozen=True, slots=True)
class Window:
    """The measurement window ``[start, end)`` in ``perf_counter`` seconds."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end < self.start:
            raise ValueError(f"bad window [{self.start}, {self.end})")

    @property
    def length(self) -> float:
        return self.end - self.start

    def contains(self, t: float) -> bool:
        return self.start <= t < self.end


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks; None if empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    data = sorted(values)
    if not data:
        return None
    rank = (len(data) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (rank - lo)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of a set of durations in seconds; all None when there were no samples."""

    count: int
    mean: float | None
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        if not values:
            return cls(0, None, None, None, None, None)
        return cls(
            count=len(values),
            mean=sum(values) / len(values),
            p50=percentile(values, 50),
            p95=percentile(values, 95),
            p99=percentile(values, 99),
            max=max(values),
        )


@dataclass(frozen=True, slots=True)
class LevelStats:
    """What one endpoint did at one concurrency level, inside one measurement window."""

    concurrency: int
    window_s: float
    requests: int  # measured: started inside the window
    ok: int
    errors: int
    timeouts: int
    warmup_requests: int
    warmup_failures: int
    output_tokens_in_window: float
    output_tok_s: float
    requests_per_s: float  # measured requests that completed inside the window, per second
    ttft: Distribution
    tpot: Distribution
    latency: Distribution
    mean_output_tokens: float | None
    min_output_tokens: int | None
    max_output_tokens: int | None
    mean_prompt_tokens: float | None
    token_sources: tuple[str, ...]
    error_samples: tuple[str, ...]
    short_outputs: int = 0  # successful measured requests with fewer output tokens than asked


def summarize(
    records: Sequence[RequestRecord], window: Window, concurrency: int, expected_output: int | None = None
) -> LevelStats:
    """Statistics of ``records`` for ``window`` (see the module docstring for every definition).

    ``expected_output``, when given, counts successful requests that received fewer tokens.
    """
    measured = [r for r in records if window.contains(r.start)]
    warmup = [r for r in records if r.start < window.start]
    ok = [r for r in measured if r.outcome is Outcome.OK]
    tokens = sum(r.tokens_between(window.start, window.end) for r in records)
    length = window.length
    completed = sum(1 for r in ok if r.end is not None and window.contains(r.end))
    out_counts = [r.output_tokens for r in ok]
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    samples: list[str] = []
    for r in measured + warmup:
        if r.error and r.error not in samples and len(samples) < 5:
            samples.append(r.error)
    return LevelStats(
        concurrency=concurrency,
        window_s=length,
        requests=len(measured),
        ok=len(ok),
        errors=sum(1 for r in measured if r.outcome is Outcome.ERROR),
        timeouts=sum(1 for r in measured if r.outcome is Outcome.TIMEOUT),
        warmup_requests=len(warmup),
        warmup_failures=sum(1 for r in warmup if r.outcome is not Outcome.OK),
        output_tokens_in_window=tokens,
        output_tok_s=tokens / length if length > 0 else 0.0,
        requests_per_s=completed / length if length > 0 else 0.0,
        ttft=Distribution.of([t for r in ok if (t := r.ttft) is not None]),
        tpot=Distribution.of([t for r in ok if (t := r.tpot) is not None]),
        latency=Distribution.of([t for r in ok if (t := r.latency) is not None]),
        mean_output_tokens=sum(out_counts) / len(out_counts) if out_counts else None,
        min_output_tokens=min(out_counts) if out_counts else None,
        max_output_tokens=max(out_counts) if out_counts else None,
        mean_prompt_tokens=sum(prompt_counts) / len(prompt_counts) if prompt_counts else None,
        token_sources=tuple(sorted({r.token_source.value for r in ok})),
        error_samples=tuple(samples),
        short_outputs=sum(1 for n in out_counts if expected_output is not None and n < expected_output),
    )
