//! The engine's steps as the core's text events (`hybridllm_api::text_deltas`): the engine's
//! errors ended here, and the queue time, time to first token, time between tokens and finish
//! reasons observed as metrics.
use crate::errors::ApiError;
use crate::state::AppState;
use hybridllm_api::engine_io::{EngineFinish, EngineStep};
pub use hybridllm_api::text_deltas::GenEvent;
use hybridllm_api::text_deltas::TextDeltas;
use hybridllm_api::validation::GenParams;
use std::sync::Arc;
use std::time::Instant;

/// One request's events, step by step.
pub struct EngineEvents {
    state: Arc<AppState>,
    deltas: TextDeltas,
    start: Instant,
    last_token: Option<Instant>,
}

impl EngineEvents {
    /// `start`: when the request started, for the time to first token.
    pub fn new(state: Arc<AppState>, prompt_ids: &[u32], p: &GenParams, start: Instant) -> Self {
        let deltas = TextDeltas::new(
            state.api.tokenizer.clone(),
            state.api.eos_token_ids.clone(),
            prompt_ids,
            p,
        );
        EngineEvents {
            state,
            deltas,
            start,
            last_token: None,
        }
    }

    pub fn all_finished(&self) -> bool {
        self.deltas.all_finished()
    }

    /// The events of one engine step; an error ends the request.
    pub fn process(&mut self, resp: EngineStep) -> Result<Vec<GenEvent>, ApiError> {
        let mut events = vec![];
        if let Some(p) = resp.prompt {
            self.state.metrics.queue_time.observe(p.queue_time_s as f64);
            events.push(GenEvent::Prompt(p));
        }
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
            if self.deltas.finished(d.index) == Some(true) {
                continue;
            }
            if d.finish == EngineFinish::Error {
                let error = resp.error.as_deref().unwrap_or("engine error");
                return Err(ApiError::Internal(error.into()));
            }
            let Some(out) = self.deltas.push(d)? else {
                continue;
            };
            if let Some(f) = &out.finish {
                self.state
                    .metrics
                    .request_success
                    .with_label_values(&[f.reason])
                    .inc();
            }
            events.push(GenEvent::Output(out));
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests;
