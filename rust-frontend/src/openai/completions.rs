//! POST /v1/completions over HTTP: the core's completion call
//! (`hybridllm_api::completions`), its text prompts tokenized off the runtime when long, one
//! engine request per prompt, the events streamed as SSE or collected into one body.
//! `POST /inference/v1/generate` is the same call in vLLM's tokens-in, tokens-out shape
//! (`hybridllm_api::generate_tokens`).
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
use futures_util::{Stream, StreamExt};
use hybridllm_api::completions::{CompletionCall, CompletionRequest, CompletionResponse, Prompt};
use std::sync::Arc;

pub async fn handle(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
    JsonBody(req): JsonBody<CompletionRequest>,
) -> Result<Response, HttpError> {
    let call = CompletionCall::new(&state.api, req)?;
    run(state, headers, call).await
}

/// POST /inference/v1/generate.
pub async fn tokens(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Result<Response, HttpError> {
    let call = CompletionCall::tokens(&state.api, &body)?;
    run(state, headers, call).await
}

async fn run(
    state: Arc<AppState>,
    headers: axum::http::HeaderMap,
    mut call: CompletionCall,
) -> Result<Response, HttpError> {
    call.set_request_id_header(request_id_header(&headers));
    let call = compile_constraint(&state, call).await?;
    let mut ids = Vec::with_capacity(call.prompts.len());
    for p in &call.prompts {
        ids.push(match p {
            Prompt::Text(t) => tokenize(&state, t.clone(), call.add_special_tokens).await?,
            Prompt::Ids(ids) => ids.clone(),
        });
    }
    let (gens, resp) = call.plan(&state.api, ids)?;
    let events = generate_many(state.clone(), gens).await?;
    if resp.stream {
        return Ok(stream_response(state, events, resp));
    }
    let prompt_lens = resp.prompt_lens.clone();
    let c = collect(events, resp.n, prompt_lens, &state.api.tokenizer).await?;
    Ok(state
        .answer(&headers, resp.body(&state.api.tokenizer, c))
        .await)
}

fn stream_response(
    state: Arc<AppState>,
    events: impl Stream<Item = Result<(usize, GenEvent), ApiError>> + Send + 'static,
    mut resp: CompletionResponse,
) -> Response {
    let s = async_stream::stream! {
        for f in resp.opening() {
            yield Ok(f);
        }
        let mut events = std::pin::pin!(events);
        while let Some(ev) = events.next().await {
            match ev {
                Err(e) => { yield Err(e); return; }
                Ok((p, ev)) => for f in resp.event(&state.api.tokenizer, p, &ev) { yield Ok(f) },
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
