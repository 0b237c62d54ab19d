//! GET /tokenizer_info (the body is the core's: `hybridllm_api::tokenize::tokenizer_info`),
//! its tokenizer_config.json read beside the tokenizer.
use crate::errors::HttpError;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::path::Path;
use std::sync::Arc;

pub async fn tokenizer_info(State(state): State<Arc<AppState>>) -> Result<Response, HttpError> {
    let tok_path = (state.config.tokenizer_path.as_ref()).unwrap_or(&state.tokenizer_path);
    let path = Path::new(tok_path).with_file_name("tokenizer_config.json");
    // A bare tokenizer.json has no configuration.
    let text = tokio::fs::read_to_string(&path).await.ok();
    let path = path.display().to_string();
    let info = hybridllm_api::tokenize::tokenizer_info(&state.api, &path, text.as_deref())?;
    Ok(axum::Json(info).into_response())
}
