"""Numbers for the dashboard, computed from what the daemon exposes (headless, no textual).

:func:`parse_metrics` reads the daemon's Prometheus text (``GET /metrics``) with
prometheus_client's own parser into a :class:`MetricsSnapshot`; two snapshots give rates
(:func:`rate`). The ``/api/ps`` fields are formatted by :mod:`localrun.fmt`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

MODEL_ENDPOINTS = ("/api/chat", "/api/generate", "/api/embed", "/v1/chat", "/v1/completions", "/v1/embeddings")


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Totals since the daemon started (counters) and current values (gauges), at time ``at``."""

    at: float
    generated_tokens: float = 0.0
    prompt_tokens: float = 0.0
    cached_tokens: float = 0.0
    requests: float = 0.0
    queue_depth: float = 0.0
    kv_used: dict[str, float] = field(default_factory=dict)
    kv_total: dict[str, float] = field(default_factory=dict)
    active: dict[str, float] = field(default_factory=dict)
    # Tokens streamed so far, counted as they go out (first-token + inter-token histogram
    # counts): live during a long reply, where the generated-tokens counter moves only at the end.
    streamed_tokens: float = 0.0

    @property
    def cache_hit_rate(self) -> float | None:
        """Share of prompt tokens served from the prefix cache, or None before any prompt."""
        if self.prompt_tokens <= 0:
            return None
        return min(1.0, self.cached_tokens / self.prompt_tokens)


def parse_metrics(text: str, at: float) -> MetricsSnapshot:
    """Parse the daemon's /metrics; unknown or malformed families are ignored (never raises ValueError)."""
    counters: dict[str, float] = defaultdict(float)
    by_model: dict[str, dict[str, float]] = defaultdict(dict)
    queue = 0.0
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError):
        families = []
    for family in families:
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            base = name.removesuffix("_total")
            if base == "localrun_requests" and name.endswith("_total"):
                # Only requests that use a model: the dashboard's own polling must not count.
                if labels.get("endpoint", "").startswith(MODEL_ENDPOINTS):
                    counters[base] += value
            elif base in ("localrun_generated_tokens", "localrun_prompt_tokens",
                          "localrun_prefix_cache_hit_tokens") and name.endswith("_total"):
                counters[base] += value
            elif name in ("localrun_time_to_first_token_seconds_count",
                          "localrun_inter_token_latency_seconds_count"):
                counters["streamed"] += value
            elif name == "localrun_queue_depth":
                queue = value
            elif name in ("localrun_kv_cache_used_cells", "localrun_kv_cache_cells", "localrun_active_requests"):
                by_model[name][labels.get("model", "")] = value
    return MetricsSnapshot(
        at=at,
        generated_tokens=counters["localrun_generated_tokens"],
        prompt_tokens=counters["localrun_prompt_tokens"],
        cached_tokens=counters["localrun_prefix_cache_hit_tokens"],
        requests=counters["localrun_requests"],
        queue_depth=queue,
        kv_used=dict(by_model["localrun_kv_cache_used_cells"]),
        kv_total=dict(by_model["localrun_kv_cache_cells"]),
        active=dict(by_model["localrun_active_requests"]),
        streamed_tokens=counters["streamed"],
    )


def rate(previous: MetricsSnapshot | None, current: MetricsSnapshot) -> float:
    """Tokens per second streamed between two snapshots; 0 when unknown or the daemon restarted.

    Uses the live streamed-token count when the daemon exports it, else the generated-tokens counter.
    """
    if previous is None or current.at <= previous.at:
        return 0.0
    if current.streamed_tokens or previous.streamed_tokens:
        delta = current.streamed_tokens - previous.streamed_tokens
    else:
        delta = current.generated_tokens - previous.generated_tokens
    if delta < 0:  # counters went back: a new daemon
        return 0.0
    return delta / (current.at - previous.at)
