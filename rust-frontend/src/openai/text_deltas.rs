//! From the worker's token deltas to text deltas per sequence: incremental detokenization,
//! stop strings (held back while they may still match) and finish reasons. Also observes the
//! time to first token and between tokens.
use crate::engine_client::pb::{self, FinishReason};
use crate::errors::ApiError;
use crate::state::AppState;
use hybridllm_api::validation::GenParams;
pub use hybridllm_api::sequence_text::Finish;
use hybridllm_api::sequence_text::{EngineFinish, SequenceText};
use std::sync::Arc;
use std::time::Instant;

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

/// The text state of one request's n sequences.
pub struct TextDeltas {
    state: Arc<AppState>,
    seqs: Vec<SequenceText>,
    start: Instant,
    last_token: Option<Instant>,
}

impl TextDeltas {
    /// `start`: when the request started, for the time to first token.
    pub fn new(state: Arc<AppState>, prompt_ids: &[u32], p: &GenParams, start: Instant) -> Self {
        let seqs = (0..p.n)
            .map(|_| SequenceText::new(prompt_ids, p.decode, p.stop.clone(), p.include_stop))
            .collect();
        TextDeltas {
            state,
            seqs,
            start,
            last_token: None,
        }
    }

    pub fn all_finished(&self) -> bool {
        self.seqs.iter().all(|s| s.finished())
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
            if seq.finished() {
                continue;
            }
            if engine_finish == FinishReason::Error {
                return Err(ApiError::Internal(if resp.error.is_empty() {
                    "engine error".into()
                } else {
                    resp.error.clone()
                }));
            }
            let engine = match engine_finish {
                FinishReason::Unspecified => EngineFinish::Running,
                FinishReason::Length => EngineFinish::Length,
                FinishReason::Abort => EngineFinish::Abort,
                _ => EngineFinish::Stop,
            };
            let eos = &self.state.model_info.eos_token_ids;
            let (text, finish) = seq
                .push(&tok, &d.token_ids, engine, d.stop_token_id, eos)
                .map_err(ApiError::Internal)?;
            if let Some(f) = &finish {
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
