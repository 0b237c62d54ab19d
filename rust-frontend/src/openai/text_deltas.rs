//! The engine's steps as the core's text events: read by the core's `EngineEvents`
//! (`hybridllm_api::text_deltas`: text, finish reasons, the engine's errors and the
//! per-request metrics).
use crate::errors::ApiError;
use crate::state::AppState;
use hybridllm_api::engine_io::EngineStep;
pub use hybridllm_api::text_deltas::GenEvent;
use hybridllm_api::validation::GenParams;
use std::sync::Arc;
use std::time::Instant;

/// One request's events, step by step.
pub struct EngineEvents(hybridllm_api::text_deltas::EngineEvents);

impl EngineEvents {
    /// `start`: when the request started, for the time to first token.
    pub fn new(state: Arc<AppState>, prompt_ids: &[u32], p: &GenParams, start: Instant) -> Self {
        EngineEvents(hybridllm_api::text_deltas::EngineEvents::new(
            state.metrics.clone(),
            state.api.tokenizer.clone(),
            state.api.eos_token_ids.clone(),
            prompt_ids,
            p,
            start,
        ))
    }

    pub fn all_finished(&self) -> bool {
        self.0.all_finished()
    }

    /// The events of one engine step; an error ends the request.
    pub fn process(&mut self, step: EngineStep) -> Result<Vec<GenEvent>, ApiError> {
        self.0.process(step)
    }
}

#[cfg(test)]
mod tests;
