//! Tokenization of prompts (the core renders them: `ApiContext::render_prompt`), off the async
//! runtime when long. Shared by chat, completions, responses and /tokenize.
use crate::errors::ApiError;
use crate::state::AppState;
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
