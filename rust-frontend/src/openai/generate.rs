//! One HTTP request = one engine request (on the shared GenerateStream call: engine_mux).
//! This turns the worker's token deltas into text deltas per sequence (incremental
//! detokenization, stop strings, finish reasons) and keeps the engine request alive exactly as
//! long as the consumer: dropping the returned stream (client gone, response body dropped)
//! drops the engine's response stream, which aborts the request in the worker.
use crate::engine_client::pb::{self, FinishReason};
use crate::errors::ApiError;
use crate::state::AppState;
use crate::text::detokenizer::IncrementalDetokenizer;
use crate::text::stop::{StopChecker, StopOutcome};
use crate::validation::GenParams;
use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

pub struct GenRequest {
    pub request_id: String,
    pub prompt_ids: Vec<u32>,
    pub params: GenParams,
    pub max_tokens: u32,
}

#[derive(Debug, Clone)]
pub struct Finish {
    pub reason: &'static str,
    /// vLLM's `stop_reason`: the matched stop string, or a stop token id (null for EOS).
    pub stop_reason: Value,
}

pub enum GenEvent {
    Prompt(pb::PromptInfo),
    Output {
        index: u32,
        text: String,
        num_tokens: usize,
        logprobs: Vec<pb::PositionLogprobs>,
        finish: Option<Finish>,
    },
}

struct Seq {
    detok: IncrementalDetokenizer,
    stop: StopChecker,
    finished: bool,
}

struct Processor {
    state: Arc<AppState>,
    seqs: Vec<Seq>,
    include_stop: bool,
    start: Instant,
    last_token: Option<Instant>,
}

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

impl Processor {
    fn all_finished(&self) -> bool {
        self.seqs.iter().all(|s| s.finished)
    }

    fn process(&mut self, resp: pb::GenerateResponse) -> Result<Vec<GenEvent>, ApiError> {
        let mut events = vec![];
        if let Some(p) = resp.prompt {
            events.push(GenEvent::Prompt(p));
        }
        let tok = self.state.tokenizer.clone();
        let now = Instant::now();
        if resp.sequences.iter().any(|d| !d.token_ids.is_empty()) {
            match self.last_token {
                None => self
                    .state
                    .metrics
                    .ttft
                    .observe((now - self.start).as_secs_f64()),
                Some(t) => self.state.metrics.itl.observe((now - t).as_secs_f64()),
            }
            self.last_token = Some(now);
        }
        for d in resp.sequences {
            let Some(seq) = self.seqs.get_mut(d.index as usize) else {
                return Err(ApiError::Internal(format!(
                    "engine sent unknown sequence index {}",
                    d.index
                )));
            };
            let engine_finish =
                FinishReason::try_from(d.finish_reason).unwrap_or(FinishReason::Unspecified);
            if seq.finished {
                continue;
            }
            if engine_finish == FinishReason::Error {
                return Err(ApiError::Internal(if resp.error.is_empty() {
                    "engine error".into()
                } else {
                    resp.error.clone()
                }));
            }
            // The EOS / stop token that ended the sequence is not part of the text.
            let mut text_ids: &[u32] = &d.token_ids;
            if engine_finish == FinishReason::Stop && !self.include_stop {
                if let (Some(stop_id), Some(last)) = (d.stop_token_id, d.token_ids.last()) {
                    if *last == stop_id {
                        text_ids = &d.token_ids[..d.token_ids.len() - 1];
                    }
                }
            }
            let mut text = seq.detok.push(&tok, text_ids).map_err(ApiError::Internal)?;
            if engine_finish != FinishReason::Unspecified {
                text.push_str(&seq.detok.flush(&tok).map_err(ApiError::Internal)?);
            }
            let mut finish = None;
            match seq.stop.push(&text) {
                StopOutcome::Continue(t) => text = t,
                StopOutcome::Stopped(t, s) => {
                    text = t;
                    finish = Some(Finish {
                        reason: "stop",
                        stop_reason: json!(s),
                    });
                }
            }
            if finish.is_none() && engine_finish != FinishReason::Unspecified {
                text.push_str(&seq.stop.flush());
                finish = Some(match engine_finish {
                    FinishReason::Length => Finish {
                        reason: "length",
                        stop_reason: Value::Null,
                    },
                    FinishReason::Abort => Finish {
                        reason: "abort",
                        stop_reason: Value::Null,
                    },
                    _ => {
                        let eos = &self.state.model_info.eos_token_ids;
                        let sr = match d.stop_token_id {
                            Some(id) if !eos.contains(&id) => json!(id),
                            _ => Value::Null,
                        };
                        Finish {
                            reason: "stop",
                            stop_reason: sr,
                        }
                    }
                });
            }
            if let Some(f) = &finish {
                seq.finished = true;
                self.state
                    .metrics
                    .request_success
                    .with_label_values(&[f.reason])
                    .inc();
            }
            events.push(GenEvent::Output {
                index: d.index,
                text,
                num_tokens: d.token_ids.len(),
                logprobs: d.logprobs,
                finish,
            });
        }
        Ok(events)
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
    let mut sampling = req.params.sampling.clone();
    sampling.max_tokens = Some(req.max_tokens);
    let grpc_req = pb::GenerateRequest {
        request_id: req.request_id.clone(),
        prompt_token_ids: req.prompt_ids.clone(),
        sampling_params: Some(sampling),
    };
    let mut stream = state.engine.generate(grpc_req);
    let first = match stream.next().await {
        Some(Ok(m)) => m,
        None => {
            return Err(ApiError::Internal(
                "the engine closed the stream without output".into(),
            ))
        }
        Some(Err(s)) => return Err(ApiError::from_status(s)),
    };
    let p = &req.params;
    let seqs = (0..p.n)
        .map(|_| Seq {
            detok: IncrementalDetokenizer::new(&req.prompt_ids, p.decode),
            stop: StopChecker::new(p.stop.clone(), p.include_stop),
            finished: false,
        })
        .collect();
    let mut proc = Processor {
        state: state.clone(),
        seqs,
        include_stop: p.include_stop,
        start,
        last_token: None,
    };
    Ok(async_stream::stream! {
        let _guard = guard;
        let mut msg = first;
        loop {
            match proc.process(msg) {
                Ok(events) => for e in events { yield Ok(e) },
                Err(e) => { yield Err(e); break; }
            }
            if proc.all_finished() {
                break;
            }
            match stream.next().await {
                Some(Ok(m)) => msg = m,
                None => { yield Err(ApiError::Internal("the engine stream ended early".into())); break; }
                Some(Err(s)) => { yield Err(ApiError::from_status(s)); break; }
            }
        }
        // Dropping `stream` (here, or mid-await when the client goes away) aborts the request
        // if the engine still runs it.
        drop(stream);
    })
}

/// Starts one Generate call per prompt and merges their events, tagged with the prompt index.
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
