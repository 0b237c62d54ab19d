//! `/metrics`: the core's families (`hybridllm_api::metrics`), with the scheduler gauges and
//! engine-wide counters refreshed from every worker's GetLoad at scrape time.
use crate::engine_client::{pb, EngineClient};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use hybridllm_api::metrics::EngineLoad;
pub use hybridllm_api::metrics::Metrics;
use std::time::Duration;

/// The exposition text; the load is summed over the workers (KV-cache usage averaged), and if
/// any worker does not answer, the last figures stay.
pub async fn render(metrics: &Metrics, clients: &[EngineClient]) -> String {
    refresh(metrics, clients).await;
    let mut text = metrics.encode();
    if let Some(live) = crate::heap::GLOBAL.live_bytes() {
        text.push_str(&heap_family(live));
    }
    text
}

/// vLLM's ORCA load report: a request with an `endpoint-load-metrics-format` header gets an
/// `endpoint-load-metrics` header on its (not streamed) answer, from a fresh load report.
pub async fn attach_orca(
    metrics: &Metrics,
    clients: &[EngineClient],
    headers: &HeaderMap,
    response: &mut Response,
) {
    let Some(format) = headers
        .get("endpoint-load-metrics-format")
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    refresh(metrics, clients).await;
    if let Some(v) = metrics.orca_header(format) {
        if let Ok(v) = HeaderValue::from_str(&v) {
            response.headers_mut().insert("endpoint-load-metrics", v);
        }
    }
}

/// The scheduler gauges and engine counters from every worker's GetLoad.
async fn refresh(metrics: &Metrics, clients: &[EngineClient]) {
    let calls = clients.iter().map(|c| async move {
        let mut client = c.clone();
        let call = client.get_load(pb::LoadRequest {});
        match tokio::time::timeout(Duration::from_secs(2), call).await {
            Ok(Ok(load)) => Some(EngineLoad::from(load.into_inner())),
            _ => None,
        }
    });
    let loads: Option<Vec<_>> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .collect();
    match loads {
        Some(loads) if !loads.is_empty() => metrics.apply_load(&EngineLoad::sum(&loads)),
        _ => tracing::debug!("GetLoad failed; serving stale scheduler metrics"),
    }
}

/// `process_heap_allocated_bytes`: this process's live heap (heap.rs, when counted), an exact
/// figure where resident memory also holds the allocator's free pages.
fn heap_family(live: i64) -> String {
    let gauge = prometheus::IntGauge::new(
        "process_heap_allocated_bytes",
        "Bytes the Rust frontend has allocated and not freed.",
    )
    .expect("valid metric name");
    gauge.set(live);
    let mut buf = Vec::new();
    let families = prometheus::core::Collector::collect(&gauge);
    prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &families, &mut buf).ok();
    String::from_utf8(buf).unwrap_or_default()
}
