//! POST /invocations (vLLM's, for SageMaker): the body is read once and handed, typed, to the
//! handler of the API it names (the core's `Invocation::route`). The one module above the
//! handlers: it only dispatches.
use super::request::{JsonBody, JsonBytes};
use super::{chat, completions, embeddings};
use crate::errors::HttpError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use hybridllm_api::invocations::Invocation;
use hybridllm_api::request::parse_body;
use std::sync::Arc;

pub async fn handle(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Result<Response, HttpError> {
    match Invocation::route(&state.api, &body)? {
        Invocation::Chat => {
            let req = JsonBody(parse_body(&body)?);
            chat::handle(State(state), headers, req).await
        }
        Invocation::Completion => {
            let req = JsonBody(parse_body(&body)?);
            completions::handle(State(state), headers, req).await
        }
        Invocation::Embedding => {
            let req = JsonBody(parse_body(&body)?);
            embeddings::handle(State(state), headers, req).await
        }
    }
}
