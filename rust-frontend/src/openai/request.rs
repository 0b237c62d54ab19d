//! Request intake over HTTP: the JSON body extractor (content type and size limits here, the
//! reading into the typed request in the core: `hybridllm_api::request`), with OpenAI error
//! bodies.
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::{FromRequest, Request};
pub use hybridllm_api::request::RequestBody;
use std::sync::Arc;

/// The `X-Request-Id` header, as text (the core makes the ids from it: `RequestIds`).
pub fn request_id_header(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// JSON body extractor whose failures are OpenAI error bodies (axum's are plain text):
/// not JSON by its content type -> 415, too large -> 413, malformed, no object or mistyped -> 400 with serde's explanation.
pub struct JsonBody<T>(pub T);

impl<T: RequestBody> FromRequest<Arc<AppState>> for JsonBody<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, HttpError> {
        Ok(JsonBody(read_body(req, state).await?))
    }
}

/// The JSON body's bytes, within the same limits, for a handler that reads them itself
/// (the batch endpoint, whose conversations are read one by one).
pub struct JsonBytes(pub axum::body::Bytes);

impl FromRequest<Arc<AppState>> for JsonBytes {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, HttpError> {
        Ok(JsonBytes(read_bytes(req, state).await?))
    }
}

async fn read_body<T: RequestBody>(req: Request, state: &Arc<AppState>) -> Result<T, ApiError> {
    hybridllm_api::request::parse_body(&read_bytes(req, state).await?)
}

async fn read_bytes(req: Request, state: &Arc<AppState>) -> Result<axum::body::Bytes, ApiError> {
    crate::limits::check_json_content_type(req.headers())?;
    let limit = state.config.max_request_body_bytes;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    hybridllm_api::limits::check_body_size(declared.unwrap_or(0), limit)?;
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| ApiError::PayloadTooLarge(limit))
}
