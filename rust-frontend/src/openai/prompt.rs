//! Tokenization of prompts (the core renders them: `ApiContext::render_prompt`), off the async
//! runtime when long, and the compiling of output constraints, off it always. Shared by chat,
//! completions, responses and /tokenize.
use crate::errors::ApiError;
use crate::state::AppState;
use hybridllm_api::validation::Constrained;
use std::sync::Arc;

/// Prompts up to this many bytes are tokenized in place: a thread hop costs more than that.
const INLINE_TOKENIZE_BYTES: usize = 4096;

/// Tokenizes long prompts off the async runtime: 100k-token prompts take milliseconds.
pub async fn tokenize(
    state: &Arc<AppState>,
    text: String,
    add_special: bool,
) -> Result<Vec<u32>, ApiError> {
    let tok = state.api.tokenizer.clone();
    if text.len() <= INLINE_TOKENIZE_BYTES {
        return tok.encode(&text, add_special).map_err(ApiError::bad);
    }
    tokio::task::spawn_blocking(move || tok.encode(&text, add_special))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(ApiError::bad)
}

/// Compiles a request's output constraint, if it has one, off the async runtime: a large
/// schema takes milliseconds.
pub async fn compile_constraint<T: Constrained + Send + 'static>(
    state: &Arc<AppState>,
    mut call: T,
) -> Result<T, ApiError> {
    if !call.has_constraint() {
        return Ok(call);
    }
    let st = state.clone();
    tokio::task::spawn_blocking(move || call.compile_constraint(&st.api).map(|()| call))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
}
