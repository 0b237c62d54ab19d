//! From the worker's token deltas to text deltas per sequence: incremental detokenization,
//! stop strings (held back while they may still match) and finish reasons. Also observes the
//! time to first token and between tokens.
use crate::engine_client::pb::{self, FinishReason};
use crate::errors::ApiError;
use crate::state::AppState;
use crate::text::detokenizer::IncrementalDetokenizer;
use crate::text::stop::{StopChecker, StopOutcome};
use crate::validation::GenParams;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Finish {
    pub reason: &'static str,
    /// vLLM's `stop_reason`: the matched stop string, or a stop token id (null for EOS).
    pub stop_reason: Value,
}

pub enum GenEvent {
    /// The prompt facts (the first event of a prompt).
    Prompt(pb::PromptInfo),
    Output(SeqOutput),
}

/// What one sequence produced in one engine step.
#[derive(Debug)]
pub struct SeqOutput {
    /// Which of the n sequences.
    pub index: u32,
    /// Text safe to show (stop strings held back or cut).
    pub text: String,
    pub num_tokens: usize,
    pub logprobs: Vec<pb::PositionLogprobs>,
    /// Set on the sequence's last output.
    pub finish: Option<Finish>,
}

struct Seq {
    detok: IncrementalDetokenizer,
    stop: StopChecker,
    finished: bool,
}

/// The text state of one request's n sequences.
pub struct TextDeltas {
    state: Arc<AppState>,
    seqs: Vec<Seq>,
    include_stop: bool,
    start: Instant,
    last_token: Option<Instant>,
}

impl TextDeltas {
    /// `start`: when the request started, for the time to first token.
    pub fn new(state: Arc<AppState>, prompt_ids: &[u32], p: &GenParams, start: Instant) -> Self {
        let seqs = (0..p.n)
            .map(|_| Seq {
                detok: IncrementalDetokenizer::new(prompt_ids, p.decode),
                stop: StopChecker::new(p.stop.clone(), p.include_stop),
                finished: false,
            })
            .collect();
        TextDeltas {
            state,
            seqs,
            include_stop: p.include_stop,
            start,
            last_token: None,
        }
    }

    pub fn all_finished(&self) -> bool {
        self.seqs.iter().all(|s| s.finished)
    }

    /// The events of one engine response; an error ends the request.
    pub fn process(&mut self, resp: pb::GenerateResponse) -> Result<Vec<GenEvent>, ApiError> {
        let mut events = vec![];
        if let Some(p) = resp.prompt {
            let queue_time = p.queue_time_s as f64;
            self.state.metrics.queue_time.observe(queue_time);
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
            events.push(GenEvent::Output(SeqOutput {
                index: d.index,
                text,
                num_tokens: d.token_ids.len(),
                logprobs: d.logprobs,
                finish,
            }));
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests;
