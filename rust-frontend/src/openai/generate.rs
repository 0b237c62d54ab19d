//! One HTTP request = one engine request (on the shared GenerateStream call: engine_mux).
//! The engine's steps become text events (text_deltas), and the engine request lives
//! exactly as long as the consumer: dropping the returned stream (client gone, response
//! body dropped) drops the engine's response stream, which aborts the request in the worker.
//! At the drain deadline after SIGTERM the stream ends with `SHUTDOWN_CUT` (an error event
//! for a stream, a 503 for a collected body), for every endpoint alike.
use super::text_deltas::{EngineEvents, GenEvent};
use crate::engine::StepStream;
use crate::errors::ApiError;
use crate::shutdown::SHUTDOWN_CUT;
use crate::state::AppState;
use futures_util::{Stream, StreamExt};
use hybridllm_api::engine_io::{EngineStep, GenerateRequest};
pub use hybridllm_api::validation::GenRequest;
use std::sync::Arc;
use std::time::Instant;

/// Counts the request in flight and records its latency however it ends.
struct InFlight {
    state: Arc<AppState>,
    start: Instant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.metrics.in_flight.dec();
        self.state
            .metrics
            .e2e
            .observe(self.start.elapsed().as_secs_f64());
    }
}

/// Starts the call and waits for its first message, so that a rejected request (e.g. the
/// worker's INVALID_ARGUMENT) is still an HTTP error rather than an error inside a 200 stream.
pub async fn generate(
    state: Arc<AppState>,
    req: GenRequest,
) -> Result<impl Stream<Item = Result<GenEvent, ApiError>>, ApiError> {
    let start = Instant::now();
    state.metrics.in_flight.inc();
    let guard = InFlight {
        state: state.clone(),
        start,
    };
    if !state.config.disable_log_requests {
        // Prompts are logged only as far as max_log_len allows (default: not at all).
        let shown = state.config.max_log_len.min(req.prompt_ids.len());
        tracing::info!(
            request_id = %req.request_id,
            prompt_tokens = req.prompt_ids.len(),
            max_tokens = req.max_tokens,
            n = req.params.n,
            prompt_ids = ?&req.prompt_ids[..shown],
            "generate"
        );
    }
    let mut stream = state.engine.generate(GenerateRequest::new(&req));
    let first = match next_before_deadline(&mut stream).await? {
        Some(m) => m,
        None => {
            return Err(ApiError::Internal(
                "the engine closed the stream without output".into(),
            ))
        }
    };
    let mut deltas = EngineEvents::new(state.clone(), &req.prompt_ids, &req.params, start);
    Ok(async_stream::stream! {
        let _guard = guard;
        let mut msg = first;
        loop {
            match deltas.process(msg) {
                Ok(events) => for e in events { yield Ok(e) },
                Err(e) => { yield Err(e); break; }
            }
            if deltas.all_finished() {
                break;
            }
            match next_before_deadline(&mut stream).await {
                Ok(Some(m)) => msg = m,
                Ok(None) => { yield Err(ApiError::Internal("the engine stream ended early".into())); break; }
                Err(e) => { yield Err(e); break; }
            }
        }
        // Dropping `stream` (here, or mid-await when the client goes away) aborts the request
        // if the engine still runs it.
        drop(stream);
    })
}

/// The engine's next step (None: the stream ended), or the error that ends the request: the
/// engine's, or the shutdown's once the drain time is over (the caller then drops the stream,
/// which aborts the request).
async fn next_before_deadline(stream: &mut StepStream) -> Result<Option<EngineStep>, ApiError> {
    tokio::select! {
        next = stream.next() => next.transpose().map_err(ApiError::from),
        () = crate::shutdown::deadline() => Err(ApiError::Unavailable(SHUTDOWN_CUT.into())),
    }
}

/// Starts one engine request per prompt and merges their events, tagged with the prompt index.
pub async fn generate_many(
    state: Arc<AppState>,
    reqs: Vec<GenRequest>,
) -> Result<impl Stream<Item = Result<(usize, GenEvent), ApiError>>, ApiError> {
    let starts = reqs.into_iter().map(|r| generate(state.clone(), r));
    let streams = futures_util::future::try_join_all(starts).await?;
    Ok(futures_util::stream::select_all(
        streams
            .into_iter()
            .enumerate()
            .map(|(i, s)| Box::pin(s.map(move |e| e.map(|e| (i, e))))),
    ))
}

#[cfg(test)]
mod tests;
