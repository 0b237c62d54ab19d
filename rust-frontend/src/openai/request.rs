//! Request intake shared by every endpoint: the JSON body extractor with OpenAI error
//! bodies, the model-name check and `stream_options`.
use super::prompt::TemplateArgs;
use crate::errors::ApiError;
use crate::state::AppState;
use crate::validation::SamplingRequest;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// An omitted/null model is allowed; any other name must be one of the served names.
pub fn check_model(state: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model {
        Some(m) if !state.served_names.iter().any(|s| s == m) => Err(ApiError::model_not_found(m)),
        _ => Ok(()),
    }
}

/// JSON body extractor whose failures are OpenAI error bodies (axum's are plain text):
/// too large -> 413, malformed or mistyped -> 400 with serde's explanation.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let limit = state.config.max_request_body_bytes;
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        let bytes = axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|_| ApiError::PayloadTooLarge(limit))?;
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad(format!("Invalid JSON body: {e}")))?;
        // The path names the offending field (e.g. `max_tokens: invalid type: string "a", ...`).
        let err = match serde_path_to_error::deserialize(&value) {
            Ok(v) => return Ok(JsonBody(v)),
            Err(e) => e,
        };
        // `#[serde(flatten)]` hides the field of errors in flattened groups; parsing those
        // groups alone recovers it.
        let (path, inner) = match err.path().to_string().as_str() {
            "." | "" => {
                flattened_error(&value).unwrap_or(("".into(), err.into_inner().to_string()))
            }
            p => (p.to_string(), err.into_inner().to_string()),
        };
        Err(match path.as_str() {
            "" => ApiError::bad(format!("Invalid request: {inner}")),
            p => ApiError::bad_param(p, format!("Invalid request: {p}: {inner}")),
        })
    }
}

fn flattened_error(value: &serde_json::Value) -> Option<(String, String)> {
    fn try_as<T: DeserializeOwned>(v: &serde_json::Value) -> Option<(String, String)> {
        serde_path_to_error::deserialize::<_, T>(v)
            .err()
            .map(|e| (e.path().to_string(), e.into_inner().to_string()))
    }
    try_as::<SamplingRequest>(value)
        .or_else(|| try_as::<TemplateArgs>(value))
        .filter(|(p, _)| p != "." && !p.is_empty())
}
