//! POST /v1/chat/completions over HTTP: the core's chat call (`hybridllm_api::chat`), its
//! prompt tokenized off the runtime when long, the engine's events streamed as SSE or
//! collected into one body.
use super::aggregate::collect;
use super::generate::generate_many;
use super::prompt::{compile_constraint, tokenize};
use super::request::{request_id_header, JsonBody, JsonBytes};
use super::sse::sse_response;
use super::text_deltas::GenEvent;
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;
use futures_util::StreamExt;
use hybridllm_api::chat::{ChatCall, ChatRequest, ChatResponse};
use hybridllm_api::chat_batch::ChatBatchCall;
use std::sync::Arc;

pub async fn handle(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
    JsonBody(req): JsonBody<ChatRequest>,
) -> Result<Response, HttpError> {
    let mut call = ChatCall::new(&state.api, req)?;
    call.set_request_id_header(request_id_header(&headers));
    let mut call = compile_constraint(&state, call).await?;
    let prompt = std::mem::take(&mut call.prompt);
    let ids = tokenize(&state, prompt, call.add_special_tokens).await?;
    let (gen, resp) = call.plan(&state.api, ids)?;
    let prompt_lens = vec![gen.prompt_ids.len()];
    let events = generate_many(state.clone(), vec![gen]).await?;
    if resp.stream {
        return Ok(stream_response(state, events, resp));
    }
    let c = collect(events, resp.n as usize, prompt_lens, &state.api.tokenizer).await?;
    Ok(state
        .answer(&headers, resp.body(&state.api.tokenizer, c))
        .await)
}

/// POST /v1/chat/completions/batch (vLLM's): every conversation's engine request at once,
/// collected into one body (the core's `ChatBatchCall`).
pub async fn handle_batch(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Result<Response, HttpError> {
    let mut batch = ChatBatchCall::new(&state.api, &body, request_id_header(&headers))?;
    let mut ids = Vec::with_capacity(batch.prompts.len());
    for prompt in std::mem::take(&mut batch.prompts) {
        ids.push(tokenize(&state, prompt, batch.add_special_tokens).await?);
    }
    let (gens, resp) = batch.plan(&state.api, ids)?;
    let prompt_lens = gens.iter().map(|g| g.prompt_ids.len()).collect();
    let events = generate_many(state.clone(), gens).await?;
    let c = collect(events, 1, prompt_lens, &state.api.tokenizer).await?;
    Ok(state
        .answer(&headers, resp.body(&state.api.tokenizer, c))
        .await)
}

fn stream_response(
    state: Arc<AppState>,
    events: impl futures_util::Stream<Item = Result<(usize, GenEvent), ApiError>> + Send + 'static,
    mut resp: ChatResponse,
) -> Response {
    let s = async_stream::stream! {
        for f in resp.opening() {
            yield Ok(f);
        }
        let mut events = std::pin::pin!(events);
        while let Some(ev) = events.next().await {
            match ev {
                Err(e) => { yield Err(e); return; }
                Ok((p, ev)) => if let Some(f) = resp.event(&state.api.tokenizer, p, &ev) { yield Ok(f) },
            }
        }
        if let Some(f) = resp.closing() {
            yield Ok(f);
        }
    };
    sse_response(s)
}

#[cfg(test)]
mod tests;
