//! The worker's responses as the core's text events (`hybridllm_api::text_deltas`): each
//! protobuf response converted at the engine client, then read by the core's `EngineEvents`
//! (text, finish reasons, the engine's errors and the per-request metrics).
use crate::engine_client::pb;
use crate::errors::ApiError;
use crate::state::AppState;
pub use hybridllm_api::text_deltas::GenEvent;
use hybridllm_api::validation::GenParams;
use std::sync::Arc;
use std::time::Instant;

/// One request's events, response by response.
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

    /// The events of one engine response; an error ends the request.
    pub fn process(&mut self, resp: pb::GenerateResponse) -> Result<Vec<GenEvent>, ApiError> {
        self.0.process(resp.into())
    }
}

#[cfg(test)]
mod tests;
