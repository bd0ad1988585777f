"""Prometheus metrics for ``GET /metrics`` (prometheus_client writes the text format).

Each app owns its own CollectorRegistry, so several apps in one process (tests) never clash.
Counters and histograms are updated as requests run; gauges about resident models are
refreshed by :meth:`Metrics.refresh` just before each scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..upstream.router import MemberSnapshot

disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series only add noise to a single-process daemon

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "localrun_requests", "HTTP requests by route and status", ["endpoint", "status"], registry=r
        )
        self.ttft = Histogram(
            "localrun_time_to_first_token_seconds", "Time from request to first generated token",
            ["model"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.token_latency = Histogram(
            "localrun_inter_token_latency_seconds", "Time between generated tokens of one stream",
            ["model"], buckets=_TOKEN_BUCKETS, registry=r,
        )
        self.prompt_tokens = Counter("localrun_prompt_tokens", "Prompt tokens evaluated", ["model"], registry=r)
        self.generated_tokens = Counter("localrun_generated_tokens", "Tokens generated", ["model"], registry=r)
        self.cached_tokens = Counter(
            "localrun_prefix_cache_hit_tokens", "Prompt tokens served from the prefix cache", ["model"], registry=r
        )
        self.queue_depth = Gauge("localrun_queue_depth", "Requests waiting for a model or a slot", registry=r)
        self.loaded_models = Gauge("localrun_loaded_models", "Models resident in memory", registry=r)
        self.model_memory = Gauge(
            "localrun_model_memory_bytes", "Estimated memory of a resident model", ["model", "kind"], registry=r
        )
        self.kv_used = Gauge("localrun_kv_cache_used_cells", "KV cache cells in use", ["model"], registry=r)
        self.kv_total = Gauge("localrun_kv_cache_cells", "KV cache cells allocated", ["model"], registry=r)
        self.host_cache_tokens = Gauge(
            "localrun_prefix_cache_host_tokens", "Cached prefix tokens moved out of the KV cache to host RAM",
            ["model"], registry=r,
        )
        self.host_cache_bytes = Gauge(
            "localrun_prefix_cache_host_bytes", "Host RAM held by the prefix cache's second tier", ["model"], registry=r
        )
        self.draft_tokens = Gauge(
            "localrun_speculative_draft_tokens", "Tokens drafted for speculative decoding since the model loaded",
            ["model"], registry=r,
        )
        self.accepted_tokens = Gauge(
            "localrun_speculative_accepted_tokens", "Drafted tokens the model confirmed since it loaded",
            ["model"], registry=r,
        )
        self.preemptions = Gauge(
            "localrun_kv_pool_preemptions", "Requests paused since the model loaded because the KV pool was full "
            "(each resumed from the prefix cache)", ["model"], registry=r,
        )
        self.image_tokens = Gauge(
            "localrun_image_tokens", "Image positions the vision encoder computed since the model loaded (an image "
            "the prefix cache held counts none)", ["model"], registry=r,
        )
        self.threads = Gauge(
            "localrun_threads", "Threads the model's kernels run on now, by step kind (decode or prefill), chosen "
            "from the cores other processes leave free", ["model", "kind"], registry=r,
        )
        self.active = Gauge("localrun_active_requests", "Requests holding a sequence slot", ["model"], registry=r)
        self.loads = Counter("localrun_model_loads", "Model loads, unloads and crashes", ["event"], registry=r)

    def watch_upstreams(self, snapshot: Callable[[], list[MemberSnapshot]]) -> None:
        """Expose each upstream member's state (read from ``snapshot()`` at every scrape)."""
        self.registry.register(_UpstreamCollector(snapshot))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def clear_model_gauges(self) -> None:
        for gauge in (self.model_memory, self.kv_used, self.kv_total, self.host_cache_tokens, self.host_cache_bytes,
                      self.draft_tokens, self.accepted_tokens, self.preemptions, self.image_tokens, self.threads,
                      self.active):
            gauge.clear()


class _UpstreamCollector:
    """``localrun_upstream_*`` series, labelled by upstream name and member URL (never a key)."""

    def __init__(self, snapshot: Callable[[], list[MemberSnapshot]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        labels = ["upstream", "member"]
        in_flight = GaugeMetricFamily("localrun_upstream_in_flight", "Requests in flight on an upstream member",
                                      labels=labels)
        requests = CounterMetricFamily("localrun_upstream_requests", "Requests sent to an upstream member "
                                       "(each failover try counts)", labels=labels)
        failures = CounterMetricFamily("localrun_upstream_failures", "Upstream member failures (connection, 5xx, "
                                       "timeouts, failed health checks)", labels=labels)
        healthy = GaugeMetricFamily("localrun_upstream_healthy", "1 while a member is in rotation, 0 while it "
                                    "cools down", labels=labels)
        latency = GaugeMetricFamily("localrun_upstream_first_event_seconds", "Moving average of an upstream "
                                    "member's time to the first event of a reply", labels=labels)
        for m in self._snapshot():
            key = [m.upstream, m.url]
            in_flight.add_metric(key, m.in_flight)
            requests.add_metric(key, m.requests)
            failures.add_metric(key, m.failures)
            healthy.add_metric(key, 0 if m.state == "cooling" else 1)
            if m.latency_ms is not None:
                latency.add_metric(key, m.latency_ms / 1000)
        yield from (in_flight, requests, failures, healthy, latency)
