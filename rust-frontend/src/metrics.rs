//! Prometheus metrics, named like vLLM's (`hybridllm:` instead of `vllm:`). Scheduler gauges
//! and engine-wide counters are refreshed from GetLoad at scrape time; latency histograms and
//! finish reasons are observed here, per request.
use crate::engine_client::{pb, EngineClient};
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::Mutex;
use std::time::Duration;

/// An engine-wide counter and how to read its total from GetLoad.
type EngineCounter = (IntCounter, fn(&pb::LoadResponse) -> u64);

pub struct Metrics {
    registry: Registry,
    running: IntGauge,
    waiting: IntGauge,
    kv_usage: prometheus::Gauge,
    engine_counters: Vec<EngineCounter>,
    last_totals: Mutex<Vec<u64>>,
    pub in_flight: IntGauge,
    pub request_success: IntCounterVec,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue_time: Histogram,
    /// Per engine worker (data parallelism): requests routed, outstanding tokens.
    pub worker_requests: IntCounterVec,
    pub worker_outstanding_tokens: IntGaugeVec,
    pub worker_up: IntGaugeVec,
}

fn sum_loads(loads: &[pb::LoadResponse]) -> pb::LoadResponse {
    let mut total = pb::LoadResponse::default();
    for l in loads {
        total.num_running += l.num_running;
        total.num_waiting += l.num_waiting;
        total.kv_cache_usage += l.kv_cache_usage / loads.len() as f32;
        total.prompt_tokens_total += l.prompt_tokens_total;
        total.generation_tokens_total += l.generation_tokens_total;
        total.prefix_cache_queries_total += l.prefix_cache_queries_total;
        total.prefix_cache_hits_total += l.prefix_cache_hits_total;
        total.num_preemptions_total += l.num_preemptions_total;
        total.num_free_blocks += l.num_free_blocks;
        total.num_total_blocks += l.num_total_blocks;
        total.requests_finished_total += l.requests_finished_total;
    }
    total
}

fn hist(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid histogram")
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let gauge = |n: &str, h: &str| IntGauge::new(n, h).expect("valid gauge");
        let counter = |n: &str, h: &str| IntCounter::new(n, h).expect("valid counter");
        let running = gauge(
            "hybridllm:num_requests_running",
            "Number of requests in the running batch.",
        );
        let waiting = gauge(
            "hybridllm:num_requests_waiting",
            "Number of requests waiting to be scheduled.",
        );
        let kv_usage = prometheus::Gauge::new(
            "hybridllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent.",
        )
        .expect("valid gauge");
        let engine_counters: Vec<EngineCounter> = vec![
            (
                counter(
                    "hybridllm:prompt_tokens_total",
                    "Number of prefill tokens processed.",
                ),
                |l| l.prompt_tokens_total,
            ),
            (
                counter(
                    "hybridllm:generation_tokens_total",
                    "Number of generation tokens processed.",
                ),
                |l| l.generation_tokens_total,
            ),
            (
                counter(
                    "hybridllm:prefix_cache_queries_total",
                    "Prompt tokens looked up in the prefix cache.",
                ),
                |l| l.prefix_cache_queries_total,
            ),
            (
                counter(
                    "hybridllm:prefix_cache_hits_total",
                    "Prompt tokens found in the prefix cache.",
                ),
                |l| l.prefix_cache_hits_total,
            ),
            (
                counter(
                    "hybridllm:num_preemptions_total",
                    "Cumulative number of preemptions.",
                ),
                |l| l.num_preemptions_total,
            ),
        ];
        let in_flight = gauge(
            "hybridllm:frontend_requests_in_flight",
            "Generation requests in flight in this frontend.",
        );
        let request_success = IntCounterVec::new(
            Opts::new(
                "hybridllm:request_success_total",
                "Count of finished requests by finish reason.",
            ),
            &["finished_reason"],
        )
        .expect("valid counter");
        let lat = vec![
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0,
        ];
        let ttft = hist(
            "hybridllm:time_to_first_token_seconds",
            "Time to first token in seconds.",
            lat.clone(),
        );
        let itl = hist(
            "hybridllm:inter_token_latency_seconds",
            "Time between output tokens in seconds.",
            lat.clone(),
        );
        let long = {
            let mut b = lat;
            b.extend([120.0, 240.0, 480.0, 960.0]);
            b
        };
        let e2e = hist(
            "hybridllm:e2e_request_latency_seconds",
            "End-to-end request latency in seconds.",
            long.clone(),
        );
        let queue_time = hist(
            "hybridllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            long,
        );
        registry.register(Box::new(running.clone())).ok();
        registry.register(Box::new(waiting.clone())).ok();
        registry.register(Box::new(kv_usage.clone())).ok();
        for (c, _) in &engine_counters {
            registry.register(Box::new(c.clone())).ok();
        }
        registry.register(Box::new(in_flight.clone())).ok();
        registry.register(Box::new(request_success.clone())).ok();
        registry.register(Box::new(ttft.clone())).ok();
        registry.register(Box::new(itl.clone())).ok();
        registry.register(Box::new(e2e.clone())).ok();
        registry.register(Box::new(queue_time.clone())).ok();
        let worker_requests = IntCounterVec::new(
            Opts::new(
                "hybridllm:worker_requests_total",
                "Requests routed to each engine worker.",
            ),
            &["worker"],
        )
        .expect("valid counter");
        let worker_outstanding_tokens = IntGaugeVec::new(
            Opts::new(
                "hybridllm:worker_outstanding_tokens",
                "Prompt and maximum output tokens of the requests each engine worker runs.",
            ),
            &["worker"],
        )
        .expect("valid gauge");
        let worker_up = IntGaugeVec::new(
            Opts::new(
                "hybridllm:worker_up",
                "1 while an engine worker is in the rotation, 0 once it stopped answering.",
            ),
            &["worker"],
        )
        .expect("valid gauge");
        registry.register(Box::new(worker_up.clone())).ok();
        registry.register(Box::new(worker_requests.clone())).ok();
        registry
            .register(Box::new(worker_outstanding_tokens.clone()))
            .ok();
        let n = engine_counters.len();
        Metrics {
            registry,
            running,
            waiting,
            kv_usage,
            engine_counters,
            last_totals: Mutex::new(vec![0; n]),
            in_flight,
            request_success,
            ttft,
            itl,
            e2e,
            queue_time,
            worker_requests,
            worker_outstanding_tokens,
            worker_up,
        }
    }

    /// Engine totals are cumulative; counters advance by the difference since the last scrape
    /// (a restarted worker starts again from zero, which is then the new baseline).
    fn apply_load(&self, load: &pb::LoadResponse) {
        self.running.set(load.num_running as i64);
        self.waiting.set(load.num_waiting as i64);
        self.kv_usage.set(load.kv_cache_usage as f64);
        let mut last = self.last_totals.lock().unwrap_or_else(|p| p.into_inner());
        for (i, (c, get)) in self.engine_counters.iter().enumerate() {
            let v = get(load);
            if v >= last[i] {
                c.inc_by(v - last[i]);
            }
            last[i] = v;
        }
    }

    /// Scheduler gauges and engine counters summed over the workers (KV-cache usage
    /// averaged); if any worker does not answer, the last figures stay.
    pub async fn render(&self, clients: &[EngineClient]) -> String {
        let calls = clients.iter().map(|c| async move {
            let mut client = c.clone();
            let call = client.get_load(pb::LoadRequest {});
            match tokio::time::timeout(Duration::from_secs(2), call).await {
                Ok(Ok(load)) => Some(load.into_inner()),
                _ => None,
            }
        });
        let loads: Option<Vec<_>> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect();
        match loads {
            Some(loads) if !loads.is_empty() => self.apply_load(&sum_loads(&loads)),
            _ => tracing::debug!("GetLoad failed; serving stale scheduler metrics"),
        }
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .ok();
        String::from_utf8(buf).unwrap_or_default()
    }
}
