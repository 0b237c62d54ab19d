//! The Prometheus metrics both shells serve, named like vLLM's (`hybridllm:` instead of
//! `vllm:`): scheduler gauges and engine-wide counters refreshed from the engine's load at
//! scrape time; latency histograms and finish reasons observed per request. Defined once, so
//! the two shells' `/metrics` have the same families, help texts and buckets by construction.
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::Mutex;

/// What an engine worker reports of its load (GetLoad), in the API's own types; totals are
/// cumulative since the worker started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineLoad {
    pub num_running: u32,
    pub num_waiting: u32,
    /// 0..1.
    pub kv_cache_usage: f32,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub prefix_cache_queries_total: u64,
    pub prefix_cache_hits_total: u64,
    pub num_preemptions_total: u64,
    /// Speculative decoding: verify steps, drafted tokens, accepted tokens, and accepted
    /// tokens by draft position (0: the first drafted token). All zero (empty) without it.
    pub spec_decode_num_drafts_total: u64,
    pub spec_decode_num_draft_tokens_total: u64,
    pub spec_decode_num_accepted_tokens_total: u64,
    pub spec_decode_num_accepted_tokens_per_pos: Vec<u64>,
}

impl EngineLoad {
    /// Several workers as one: counts summed, KV-cache usage averaged.
    pub fn sum(loads: &[EngineLoad]) -> EngineLoad {
        let mut t = EngineLoad::default();
        for l in loads {
            t.num_running += l.num_running;
            t.num_waiting += l.num_waiting;
            t.kv_cache_usage += l.kv_cache_usage / loads.len() as f32;
            t.prompt_tokens_total += l.prompt_tokens_total;
            t.generation_tokens_total += l.generation_tokens_total;
            t.prefix_cache_queries_total += l.prefix_cache_queries_total;
            t.prefix_cache_hits_total += l.prefix_cache_hits_total;
            t.num_preemptions_total += l.num_preemptions_total;
            t.spec_decode_num_drafts_total += l.spec_decode_num_drafts_total;
            t.spec_decode_num_draft_tokens_total += l.spec_decode_num_draft_tokens_total;
            t.spec_decode_num_accepted_tokens_total += l.spec_decode_num_accepted_tokens_total;
            let per_pos = &mut t.spec_decode_num_accepted_tokens_per_pos;
            for (i, n) in l.spec_decode_num_accepted_tokens_per_pos.iter().enumerate() {
                if per_pos.len() <= i {
                    per_pos.push(0);
                }
                per_pos[i] += n;
            }
        }
        t
    }
}

/// An engine-wide counter and how to read its total from a load report.
type EngineCounter = (IntCounter, fn(&EngineLoad) -> u64);

pub struct Metrics {
    registry: Registry,
    running: IntGauge,
    waiting: IntGauge,
    kv_usage: prometheus::Gauge,
    engine_counters: Vec<EngineCounter>,
    last_totals: Mutex<Vec<u64>>,
    /// Accepted draft tokens by draft position, and the totals last applied to it.
    spec_accepted_per_pos: IntCounterVec,
    last_per_pos: Mutex<Vec<u64>>,
    pub in_flight: IntGauge,
    pub request_success: IntCounterVec,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue_time: Histogram,
    /// Per engine worker (data parallelism): requests routed, outstanding tokens, in rotation.
    pub worker_requests: IntCounterVec,
    pub worker_outstanding_tokens: IntGaugeVec,
    pub worker_up: IntGaugeVec,
}

/// The families' name prefix unless `--metrics-prefix` says another.
pub const DEFAULT_PREFIX: &str = "hybridllm";

/// `--metrics-prefix`: a Prometheus name prefix (letters, digits, `_`; not a digit first).
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    let ok = prefix
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    match ok {
        true => Ok(()),
        false => Err(format!(
            "--metrics-prefix must be letters, digits and '_' (not a digit first), got {prefix:?}"
        )),
    }
}

const LATENCY_BUCKETS: [f64; 19] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];
/// Whole requests and queueing can take minutes.
const LONG_BUCKETS: [f64; 4] = [120.0, 240.0, 480.0, 960.0];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Families named `hybridllm:…`.
    pub fn new() -> Self {
        Self::with_prefix(DEFAULT_PREFIX)
    }

    /// Families named `<prefix>:…` (`--metrics-prefix vllm`: the names dashboards and
    /// autoscalers written for vLLM read).
    pub fn with_prefix(prefix: &str) -> Self {
        let registry = Registry::new();
        let renamed = |n: &str| match n.strip_prefix("hybridllm:") {
            Some(rest) => format!("{prefix}:{rest}"),
            None => n.to_string(),
        };
        // Every family registers itself; the names are fixed and valid, so none can fail.
        fn reg<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
            r.register(Box::new(c.clone())).expect("unique metric name");
            c
        }
        let gauge = |n: &str, h: &str| reg(&registry, IntGauge::new(renamed(n), h).expect("valid"));
        let counter =
            |n: &str, h: &str| reg(&registry, IntCounter::new(renamed(n), h).expect("valid"));
        let hist = |n: &str, h: &str, long: bool| {
            let mut b = LATENCY_BUCKETS.to_vec();
            if long {
                b.extend(LONG_BUCKETS);
            }
            let opts = HistogramOpts::new(renamed(n), h).buckets(b);
            reg(&registry, Histogram::with_opts(opts).expect("valid"))
        };
        let per_worker = |n: &str, h: &str| {
            reg(
                &registry,
                IntGaugeVec::new(Opts::new(renamed(n), h), &["worker"]).expect("valid"),
            )
        };
        let running = gauge(
            "hybridllm:num_requests_running",
            "Number of requests in the running batch.",
        );
        let waiting = gauge(
            "hybridllm:num_requests_waiting",
            "Number of requests waiting to be scheduled.",
        );
        let kv_usage = reg(
            &registry,
            prometheus::Gauge::new(
                renamed("hybridllm:kv_cache_usage_perc"),
                "KV-cache usage. 1 means 100 percent.",
            )
            .expect("valid"),
        );
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
            // Speculative decoding, named as vLLM's (zero while speculation is off).
            (
                counter(
                    "hybridllm:spec_decode_num_drafts_total",
                    "Number of spec decoding drafts.",
                ),
                |l| l.spec_decode_num_drafts_total,
            ),
            (
                counter(
                    "hybridllm:spec_decode_num_draft_tokens_total",
                    "Number of draft tokens.",
                ),
                |l| l.spec_decode_num_draft_tokens_total,
            ),
            (
                counter(
                    "hybridllm:spec_decode_num_accepted_tokens_total",
                    "Number of accepted tokens.",
                ),
                |l| l.spec_decode_num_accepted_tokens_total,
            ),
        ];
        let spec_accepted_per_pos = reg(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    renamed("hybridllm:spec_decode_num_accepted_tokens_per_pos_total"),
                    "Accepted tokens per draft's position.",
                ),
                &["position"],
            )
            .expect("valid"),
        );
        let in_flight = gauge(
            "hybridllm:frontend_requests_in_flight",
            "Generation requests in flight in this frontend.",
        );
        let request_success = reg(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    renamed("hybridllm:request_success_total"),
                    "Count of finished requests by finish reason.",
                ),
                &["finished_reason"],
            )
            .expect("valid"),
        );
        let ttft = hist(
            "hybridllm:time_to_first_token_seconds",
            "Time to first token in seconds.",
            false,
        );
        let itl = hist(
            "hybridllm:inter_token_latency_seconds",
            "Time between output tokens in seconds.",
            false,
        );
        let e2e = hist(
            "hybridllm:e2e_request_latency_seconds",
            "End-to-end request latency in seconds.",
            true,
        );
        let queue_time = hist(
            "hybridllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            true,
        );
        let worker_up = per_worker(
            "hybridllm:worker_up",
            "1 while an engine worker is in the rotation, 0 once it stopped answering.",
        );
        let worker_requests = reg(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    renamed("hybridllm:worker_requests_total"),
                    "Requests routed to each engine worker.",
                ),
                &["worker"],
            )
            .expect("valid"),
        );
        let worker_outstanding_tokens = per_worker(
            "hybridllm:worker_outstanding_tokens",
            "Prompt and maximum output tokens of the requests each engine worker runs.",
        );
        let n = engine_counters.len();
        Metrics {
            registry,
            running,
            waiting,
            kv_usage,
            engine_counters,
            last_totals: Mutex::new(vec![0; n]),
            spec_accepted_per_pos,
            last_per_pos: Mutex::new(Vec::new()),
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
    pub fn apply_load(&self, load: &EngineLoad) {
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
        drop(last);
        let mut last = self.last_per_pos.lock().unwrap_or_else(|p| p.into_inner());
        for (i, &v) in load
            .spec_decode_num_accepted_tokens_per_pos
            .iter()
            .enumerate()
        {
            if last.len() <= i {
                last.push(0);
            }
            if v >= last[i] {
                self.spec_accepted_per_pos
                    .with_label_values(&[&i.to_string()])
                    .inc_by(v - last[i]);
            }
            last[i] = v;
        }
    }

    /// vLLM's ORCA load report for a request's `endpoint-load-metrics-format` (`text` or
    /// `json`, any case; None for another): the value of its `endpoint-load-metrics` response
    /// header, from the gauges as the last load report set them. Values are written as
    /// Python floats, as vLLM writes them.
    pub fn orca_header(&self, format: &str) -> Option<String> {
        let named = [
            ("num_requests_waiting", self.waiting.get() as f64),
            ("kv_cache_usage_perc", self.kv_usage.get()),
        ];
        let float = |v: f64| crate::text::pyjson::py_float(v, true);
        match format.to_ascii_lowercase().as_str() {
            "text" => {
                let pairs: Vec<String> = named
                    .iter()
                    .map(|(k, v)| format!("named_metrics.{k}={}", float(*v)))
                    .collect();
                Some(format!("TEXT {}", pairs.join(", ")))
            }
            "json" => {
                let pairs: Vec<String> = named
                    .iter()
                    .map(|(k, v)| format!("\"{k}\": {}", float(*v)))
                    .collect();
                Some(format!(
                    "JSON {{\"named_metrics\": {{{}}}}}",
                    pairs.join(", ")
                ))
            }
            _ => None,
        }
    }

    /// The exposition text of every family.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .ok();
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_totals_advance_counters_by_the_difference() {
        let m = Metrics::new();
        let load = |generated| EngineLoad {
            num_running: 3,
            generation_tokens_total: generated,
            ..Default::default()
        };
        m.apply_load(&load(10));
        m.apply_load(&load(25));
        m.apply_load(&load(4)); // the worker restarted: a new baseline, no decrease
        m.apply_load(&load(6));
        let text = m.encode();
        assert!(
            text.contains("hybridllm:generation_tokens_total 27\n"),
            "{text}"
        );
        assert!(
            text.contains("hybridllm:num_requests_running 3\n"),
            "{text}"
        );
    }

    #[test]
    fn every_family_is_exposed_once() {
        let m = Metrics::new();
        m.request_success.with_label_values(&["stop"]).inc();
        m.worker_up.with_label_values(&["0"]).set(1);
        m.worker_requests.with_label_values(&["0"]).inc();
        m.worker_outstanding_tokens.with_label_values(&["0"]).set(0);
        m.spec_accepted_per_pos.with_label_values(&["0"]).inc();
        let text = m.encode();
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(families.len(), 21, "{families:?}");
        assert!(families.contains(&"hybridllm:request_success_total counter"));
        assert!(families.contains(&"hybridllm:e2e_request_latency_seconds histogram"));
    }

    #[test]
    fn speculative_counters_follow_the_load_by_position() {
        let m = Metrics::new();
        let load = |drafts, per_pos: Vec<u64>| EngineLoad {
            spec_decode_num_drafts_total: drafts,
            spec_decode_num_draft_tokens_total: drafts * 4,
            spec_decode_num_accepted_tokens_total: per_pos.iter().sum(),
            spec_decode_num_accepted_tokens_per_pos: per_pos,
            ..Default::default()
        };
        m.apply_load(&load(0, vec![]));
        m.apply_load(&load(5, vec![4, 3, 1, 0]));
        m.apply_load(&load(9, vec![7, 5, 2, 1]));
        let text = m.encode();
        for line in [
            "hybridllm:spec_decode_num_drafts_total 9\n",
            "hybridllm:spec_decode_num_draft_tokens_total 36\n",
            "hybridllm:spec_decode_num_accepted_tokens_total 15\n",
            "hybridllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 7\n",
            "hybridllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"3\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
        let summed = EngineLoad::sum(&[load(1, vec![1, 1]), load(2, vec![2, 0, 1])]);
        assert_eq!(
            summed.spec_decode_num_accepted_tokens_per_pos,
            vec![3, 1, 1]
        );
    }

    #[test]
    fn loads_sum_over_workers() {
        let a = EngineLoad {
            num_running: 1,
            kv_cache_usage: 0.5,
            prompt_tokens_total: 7,
            ..Default::default()
        };
        let b = EngineLoad {
            num_running: 2,
            kv_cache_usage: 0.25,
            prompt_tokens_total: 5,
            ..Default::default()
        };
        let t = EngineLoad::sum(&[a, b]);
        assert_eq!((t.num_running, t.prompt_tokens_total), (3, 12));
        assert!((t.kv_cache_usage - 0.375).abs() < 1e-6);
    }

    #[test]
    fn orca_reports_as_vllm_writes_them() {
        let m = Metrics::new();
        m.apply_load(&EngineLoad {
            num_waiting: 3,
            kv_cache_usage: 0.25,
            ..Default::default()
        });
        assert_eq!(
            m.orca_header("TEXT").unwrap(),
            "TEXT named_metrics.num_requests_waiting=3.0, named_metrics.kv_cache_usage_perc=0.25"
        );
        assert_eq!(
            m.orca_header("json").unwrap(),
            r#"JSON {"named_metrics": {"num_requests_waiting": 3.0, "kv_cache_usage_perc": 0.25}}"#
        );
        assert_eq!(m.orca_header("bin"), None);
    }
}
