"""Prometheus metrics named like the Rust frontend's (metrics.rs): scheduler gauges and engine
counters refreshed from GetLoad at scrape time, latency histograms observed per request."""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from hybridllm.proto import engine_pb2 as pb

# Counters would otherwise also expose *_created series, which the Rust one does not have.
prometheus_client.disable_created_metrics()

_LAT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0]
_ENGINE_COUNTERS = [
    ("prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens_total"),
    ("generation_tokens", "Number of generation tokens processed.", "generation_tokens_total"),
    ("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
     "prefix_cache_queries_total"),
    ("prefix_cache_hits", "Prompt tokens found in the prefix cache.", "prefix_cache_hits_total"),
    ("num_preemptions", "Cumulative number of preemptions.", "num_preemptions_total"),
]


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.running = Gauge("hybridllm:num_requests_running",
                             "Number of requests in the running batch.", registry=r)
        self.waiting = Gauge("hybridllm:num_requests_waiting",
                             "Number of requests waiting to be scheduled.", registry=r)
        self.kv_usage = Gauge("hybridllm:kv_cache_usage_perc",
                              "KV-cache usage. 1 means 100 percent.", registry=r)
        self.engine_counters = [
            (Counter(f"hybridllm:{name}", doc, registry=r), field)
            for name, doc, field in _ENGINE_COUNTERS
        ]
        self.last_totals = [0] * len(self.engine_counters)
        self.in_flight = Gauge("hybridllm:frontend_requests_in_flight",
                               "Generation requests in flight in this frontend.", registry=r)
        self.request_success = Counter("hybridllm:request_success",
                                       "Count of finished requests by finish reason.",
                                       ["finished_reason"], registry=r)
        self.ttft = Histogram("hybridllm:time_to_first_token_seconds",
                              "Time to first token in seconds.", buckets=_LAT, registry=r)
        self.itl = Histogram("hybridllm:inter_token_latency_seconds",
                             "Time between output tokens in seconds.", buckets=_LAT, registry=r)
        self.e2e = Histogram("hybridllm:e2e_request_latency_seconds",
                             "End-to-end request latency in seconds.",
                             buckets=[*_LAT, 120.0, 240.0, 480.0, 960.0], registry=r)
        # Per engine worker, as the Rust frontend's data-parallel router reports them; this
        # frontend has one worker, "0".
        self.worker_requests = Counter("hybridllm:worker_requests",
                                       "Requests routed to each engine worker.", ["worker"],
                                       registry=r).labels("0")
        self.worker_outstanding_tokens = Gauge(
            "hybridllm:worker_outstanding_tokens",
            "Prompt and maximum output tokens of the requests each engine worker runs.",
            ["worker"], registry=r).labels("0")
        self.worker_up = Gauge(
            "hybridllm:worker_up",
            "1 while an engine worker is in the rotation, 0 once it stopped answering.",
            ["worker"], registry=r).labels("0")
        self.worker_up.set(1)  # one worker, never taken out of a rotation of one
        self.queue_time = Histogram("hybridllm:request_queue_time_seconds",
                                    "Histogram of time spent in WAITING phase for request.",
                                    buckets=[*_LAT, 120.0, 240.0, 480.0, 960.0], registry=r)

    def apply_load(self, load: pb.LoadResponse) -> None:
        """Engine totals are cumulative: counters advance by the change since the last scrape."""
        self.running.set(load.num_running)
        self.waiting.set(load.num_waiting)
        self.kv_usage.set(load.kv_cache_usage)
        for i, (counter, field) in enumerate(self.engine_counters):
            v = getattr(load, field)
            if v >= self.last_totals[i]:
                counter.inc(v - self.last_totals[i])
            self.last_totals[i] = v

    def render(self) -> bytes:
        return generate_latest(self.registry)
