//! POST /v1/embeddings over HTTP: the core's embedding call (`hybridllm_api::embeddings`),
//! its text inputs tokenized off the runtime when long, pooled by the worker's Embed call;
//! and vLLM's POST /pooling, the same call with its own answer.
use super::request::{request_id_header, JsonBody, JsonBytes};
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use hybridllm_api::embeddings::{EmbeddingCall, EmbeddingRequest};
use hybridllm_api::engine_io::EmbedRequest;
use std::sync::Arc;

/// Inputs up to this many bytes in all are tokenized in place: a thread hop costs more.
const INLINE_TOKENIZE_BYTES: usize = 4096;

pub async fn handle(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<EmbeddingRequest>,
) -> Result<Response, HttpError> {
    let call = EmbeddingCall::new(&state.api, req)?;
    embed(state, headers, call).await
}

pub async fn pooling(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Result<Response, HttpError> {
    let call = EmbeddingCall::pooling(&state.api, &body)?;
    embed(state, headers, call).await
}

async fn embed(
    state: Arc<AppState>,
    headers: HeaderMap,
    mut call: EmbeddingCall,
) -> Result<Response, HttpError> {
    call.set_request_id_header(request_id_header(&headers));
    let normalize = call.normalize;
    let (ids, resp) = if call.text_bytes() <= INLINE_TOKENIZE_BYTES {
        call.plan(&state.api)?
    } else {
        let st = state.clone();
        tokio::task::spawn_blocking(move || call.plan(&st.api))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??
    };
    let reply = state
        .engine
        .embed(EmbedRequest {
            request_id: resp.engine_id.clone(),
            inputs: ids,
            normalize,
        })
        .await
        .map_err(ApiError::from)?;
    if let Some(raw) = resp.raw(&reply) {
        let mut out = ([(header::CONTENT_TYPE, raw.content_type)], raw.body).into_response();
        if let Some(meta) = raw.metadata {
            let value = header::HeaderValue::from_str(&meta)
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            out.headers_mut().insert("metadata", value);
        }
        return Ok(out);
    }
    let body = resp.body(reply);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[cfg(test)]
mod tests;
