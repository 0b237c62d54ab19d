//! From a request to prompt token ids: chat messages through the core's renderer
//! (`hybridllm_api::prompt`) with this server's template and model tokens, text through the
//! tokenizer. Shared by chat, completions and /tokenize.
use crate::errors::ApiError;
use crate::state::AppState;
pub use hybridllm_api::prompt::TemplateArgs;
use serde_json::Value;
use std::sync::Arc;

/// Renders the prompt with the request's template, the --chat-template override or the model's.
pub fn render_prompt(
    state: &AppState,
    messages: &[Value],
    t: &TemplateArgs,
    default_agp: bool,
) -> Result<String, ApiError> {
    hybridllm_api::prompt::render_chat(
        state.api.template.as_ref(),
        messages,
        t,
        default_agp,
        &state.model_info.bos_token,
        &state.model_info.eos_token,
    )
}

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
