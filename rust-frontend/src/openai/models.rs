//! GET /v1/models, /health, /version, /metrics, /openapi.json, / (the playground) and POST
//! /tokenize, /detokenize.
use super::prompt::{render_prompt, tokenize as encode, TemplateArgs};
use super::request::{field_error, FieldError, JsonBody, RequestBody};
use crate::engine_client::pb;
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use hybridllm_api::text::tokenizer::DecodeOpts;
use hybridllm_api::usage::new_id;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

pub async fn models(State(state): State<Arc<AppState>>) -> Response {
    let data: Vec<Value> = state
        .api
        .served_names
        .iter()
        .map(|name| {
            json!({
                "id": name,
                "object": "model",
                "created": state.created,
                "owned_by": "hybridllm",
                "root": state.model_info.model_path,
                "parent": null,
                "max_model_len": state.api.max_model_len,
                "permission": [{
                    "id": new_id("modelperm"),
                    "object": "model_permission",
                    "created": state.created,
                    "allow_create_engine": false,
                    "allow_sampling": true,
                    "allow_logprobs": true,
                    "allow_search_indices": false,
                    "allow_view": true,
                    "allow_fine_tuning": false,
                    "organization": "*",
                    "group": null,
                    "is_blocking": false,
                }],
            })
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// 200 with an empty body while the worker reports SERVING, else 503.
/// 200 when every engine worker is serving.
pub async fn health(State(state): State<Arc<AppState>>) -> StatusCode {
    let checks = state.engine_clients.iter().map(|c| async move {
        let mut client = c.clone();
        let call = client.health(pb::HealthRequest {});
        matches!(tokio::time::timeout(Duration::from_secs(5), call).await,
            Ok(Ok(r)) if r.get_ref().status == pb::health_response::Status::Serving as i32)
    });
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

/// The OpenAPI 3 document of every route, shared with the Python frontend (one file, so the
/// two cannot describe different APIs; a test checks it against both route tables).
pub const OPENAPI: &str = include_str!("../../../python/hybridllm/entrypoints/openai/openapi.json");

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
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = state.metrics.render(&state.engine_clients).await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<Value>>,
    pub add_special_tokens: Option<bool>,
    #[serde(flatten)]
    pub template: TemplateArgs,
}

impl RequestBody for TokenizeRequest {
    const GROUPS: &'static [FieldError] = &[field_error::<TemplateArgs>];
}

pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> Result<Response, HttpError> {
    state.api.check_model(&req.model)?;
    let (text, default_special) = match (&req.prompt, &req.messages) {
        (Some(p), None) => (p.clone(), true),
        (None, Some(m)) => (render_prompt(&state, m, &req.template, true)?, false),
        _ => {
            return Err(
                ApiError::bad("Exactly one of `prompt` or `messages` must be given.").into(),
            )
        }
    };
    let tokens = encode(
        &state,
        text,
        req.add_special_tokens.unwrap_or(default_special),
    )
    .await?;
    Ok(axum::Json(
        json!({"count": tokens.len(), "max_model_len": state.api.max_model_len, "tokens": tokens}),
    )
    .into_response())
}

#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<u32>,
}

impl RequestBody for DetokenizeRequest {}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    JsonBody(req): JsonBody<DetokenizeRequest>,
) -> Result<Response, HttpError> {
    state.api.check_model(&req.model)?;
    if let Some(bad) = req
        .tokens
        .iter()
        .find(|&&t| t as usize >= state.api.vocab_size)
    {
        return Err(ApiError::bad_param(
            "tokens",
            format!(
                "Token id {bad} is out of vocabulary (size {}).",
                state.api.vocab_size
            ),
        )
        .into());
    }
    let prompt = state
        .api
        .tokenizer
        .decode(&req.tokens, DecodeOpts::default())
        .map_err(ApiError::Internal)?;
    Ok(axum::Json(json!({"prompt": prompt})).into_response())
}
