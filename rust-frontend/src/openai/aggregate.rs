//! Non-streamed responses: runs a request's events into the core's collector
//! (`hybridllm_api::aggregate`) until the request ends; the first error ends it.
use super::text_deltas::GenEvent;
use crate::errors::ApiError;
use futures_util::{Stream, StreamExt};
pub use hybridllm_api::aggregate::Collected;
use hybridllm_api::aggregate::Collector;
use hybridllm_api::text::tokenizer::Tokenizer;

/// `events` are tagged with their prompt index, as `generate_many` yields them.
pub async fn collect(
    events: impl Stream<Item = Result<(usize, GenEvent), ApiError>>,
    n: usize,
    prompt_lens: Vec<usize>,
    tokenizer: &Tokenizer,
) -> Result<Collected, ApiError> {
    let mut c = Collector::new(n, prompt_lens);
    let mut events = std::pin::pin!(events);
    while let Some(ev) = events.next().await {
        let (p, ev) = ev?;
        c.push(tokenizer, p, ev);
    }
    Ok(c.finish())
}
