//! GET /v1/models, /health, /version, /metrics, /openapi.json, / (the playground) and POST
//! /tokenize, /detokenize.
use super::prompt::tokenize as encode;
use super::request::JsonBody;
use crate::errors::HttpError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use hybridllm_api::tokenize::{self, DetokenizeRequest, TokenizeCall, TokenizeRequest};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub async fn models(State(state): State<Arc<AppState>>) -> Response {
    let root = &state.model_path;
    axum::Json(tokenize::models(&state.api, state.created, root)).into_response()
}

/// 200 with an empty body while the worker reports SERVING, else 503.
/// 200 when every engine worker is serving.
pub async fn health(State(state): State<Arc<AppState>>) -> StatusCode {
    let checks = (state.engine_clients.iter())
        .map(|c| crate::engine_client::serving(c, Duration::from_secs(5)));
    let answers = futures_util::future::join_all(checks).await;
    let healthy = if state.keep_alive {
        answers.iter().any(|&ok| ok) // a dead worker left the rotation; the others serve
    } else {
        answers.iter().all(|&ok| ok)
    };
    if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

pub async fn version() -> Response {
    axum::Json(json!({"version": env!("CARGO_PKG_VERSION")})).into_response()
}

pub async fn load(State(state): State<Arc<AppState>>) -> Response {
    let tracking = state.config.enable_server_load_tracking;
    axum::Json(tokenize::load(state.metrics.in_flight.get(), tracking)).into_response()
}

/// The playground (GET /): one self-contained page, shared with the Python frontend.
pub const PLAYGROUND: &str =
    include_str!("../../../python/hybridllm/entrypoints/openai/playground.html");

pub async fn playground() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        PLAYGROUND,
    )
        .into_response()
}

pub async fn openapi() -> Response {
    // The core's document, as the Python frontend serves it too.
    (
        [(header::CONTENT_TYPE, "application/json")],
        hybridllm_api::openapi::document(),
    )
        .into_response()
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = crate::metrics::render(&state.metrics, &state.engine_clients).await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> Result<Response, HttpError> {
    let call = TokenizeCall::new(&state.api, req)?;
    let tokens = encode(&state, call.text, call.add_special_tokens).await?;
    Ok(axum::Json(TokenizeCall::body(
        &state.api,
        &tokens,
        call.return_token_strs,
    ))
    .into_response())
}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    JsonBody(req): JsonBody<DetokenizeRequest>,
) -> Result<Response, HttpError> {
    Ok(axum::Json(tokenize::detokenize(&state.api, req)?).into_response())
}
