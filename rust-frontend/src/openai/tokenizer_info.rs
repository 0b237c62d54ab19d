//! GET /tokenizer_info, vLLM's: the tokenizer's configuration as its tokenizer_config.json
//! holds it (what transformers keeps as `init_kwargs`), special tokens as plain strings, the
//! added-token table left out, with the chat template and context window this server uses.
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::Arc;

/// An AddedToken object (`{"content": ..., "lstrip": ...}`) as its text; lists element-wise.
fn plain(v: Value) -> Value {
    match v {
        Value::Object(o) if o.get("content").is_some_and(Value::is_string) => o["content"].clone(),
        Value::Array(a) => Value::Array(a.into_iter().map(plain).collect()),
        v => v,
    }
}

async fn read_config(tokenizer_path: &str) -> Result<Map<String, Value>, ApiError> {
    let path = Path::new(tokenizer_path).with_file_name("tokenizer_config.json");
    let Ok(text) = tokio::fs::read_to_string(&path).await else {
        return Ok(Map::new()); // a bare tokenizer.json has no configuration
    };
    match serde_json::from_str(&text) {
        Ok(Value::Object(o)) => Ok(o),
        _ => Err(ApiError::Internal(format!(
            "{} is not a JSON object",
            path.display()
        ))),
    }
}

/// The chat template requests are rendered with: the `--chat-template` file, else the model's.
async fn template(state: &AppState) -> Result<String, ApiError> {
    match &state.config.chat_template {
        Some(path) => tokio::fs::read_to_string(path)
            .await
            .map_err(|e| ApiError::Internal(format!("cannot read {path}: {e}"))),
        None => Ok(state.model_info.chat_template.clone()),
    }
}

pub async fn tokenizer_info(State(state): State<Arc<AppState>>) -> Result<Response, HttpError> {
    let info = &state.model_info;
    let tok_path = state
        .config
        .tokenizer_path
        .as_ref()
        .unwrap_or(&info.tokenizer_path);
    let mut cfg: Map<String, Value> = read_config(tok_path)
        .await?
        .into_iter()
        .filter(|(k, _)| k != "added_tokens_decoder")
        .map(|(k, v)| (k, plain(v)))
        .collect();
    for (key, value) in [
        ("bos_token", &info.bos_token),
        ("eos_token", &info.eos_token),
    ] {
        if !value.is_empty() {
            cfg.insert(key.into(), json!(value));
        }
    }
    cfg.entry("tokenizer_class")
        .or_insert(json!("PreTrainedTokenizerFast"));
    cfg.insert("model_max_length".into(), json!(state.api.max_model_len));
    match template(&state).await? {
        t if t.is_empty() => cfg.remove("chat_template"),
        t => cfg.insert("chat_template".into(), json!(t)),
    };
    Ok(axum::Json(Value::Object(cfg)).into_response())
}
