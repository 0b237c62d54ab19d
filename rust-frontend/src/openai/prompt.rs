//! From a request to prompt token ids: chat messages through the chat template, text
//! through the tokenizer. Shared by chat, completions and /tokenize.
use crate::errors::ApiError;
use crate::state::AppState;
use crate::text::chat_template::{ChatTemplate, RenderInput};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Chat-template inputs, shared with /tokenize.
#[derive(Debug, Default, Deserialize)]
pub struct TemplateArgs {
    pub tools: Option<Value>,
    pub documents: Option<Value>,
    pub add_generation_prompt: Option<bool>,
    pub continue_final_message: Option<bool>,
    pub chat_template: Option<String>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
}

/// OpenAI content parts become one string (text parts joined by newlines); tool-call
/// arguments given as JSON text become objects, as vLLM does, so templates can iterate them.
fn prepare_messages(messages: &[Value]) -> Result<Vec<Value>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages must contain at least one message.",
        ));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut m = m.as_object().cloned().ok_or_else(|| {
                ApiError::bad_param("messages", format!("messages[{i}] must be an object."))
            })?;
            if !m.get("role").is_some_and(Value::is_string) {
                return Err(ApiError::bad_param(
                    "messages",
                    format!("messages[{i}].role must be a string."),
                ));
            }
            if let Some(Value::Array(parts)) = m.get("content") {
                let mut texts = vec![];
                for p in parts {
                    match (
                        p.get("type").and_then(Value::as_str),
                        p.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) | (None, Some(t)) => texts.push(t.to_string()),
                        (t, _) => {
                            return Err(ApiError::bad_param(
                                "messages",
                                format!(
                                "messages[{i}]: content part type {} is not supported (text only).",
                                t.unwrap_or("<missing>")
                            ),
                            ))
                        }
                    }
                }
                m.insert("content".into(), Value::String(texts.join("\n")));
            }
            if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
                for c in calls.iter_mut() {
                    if let Some(args) = c.pointer_mut("/function/arguments") {
                        if let Some(parsed) = args
                            .as_str()
                            .and_then(|s| serde_json::from_str::<Value>(s).ok())
                        {
                            if parsed.is_object() {
                                *args = parsed;
                            }
                        }
                    }
                }
            }
            Ok(Value::Object(m))
        })
        .collect()
}

/// Renders the prompt with the request's template, the --chat-template override or the model's.
pub fn render_prompt(
    state: &AppState,
    messages: &[Value],
    t: &TemplateArgs,
    default_agp: bool,
) -> Result<String, ApiError> {
    let compiled;
    let template = match &t.chat_template {
        Some(src) => {
            compiled =
                ChatTemplate::compile(src).map_err(|e| ApiError::bad_param("chat_template", e))?;
            &compiled
        }
        None => state.template.as_ref().ok_or_else(|| {
            ApiError::bad(
                "This model has no chat template; pass `chat_template` or use /v1/completions.",
            )
        })?,
    };
    let input = RenderInput {
        messages: prepare_messages(messages)?,
        tools: t.tools.clone(),
        documents: t.documents.clone(),
        add_generation_prompt: t.add_generation_prompt.unwrap_or(default_agp),
        continue_final_message: t.continue_final_message.unwrap_or(false),
        bos_token: state.model_info.bos_token.clone(),
        eos_token: state.model_info.eos_token.clone(),
        kwargs: t.chat_template_kwargs.clone().unwrap_or_default(),
    };
    template.render(&input).map_err(ApiError::bad)
}

/// Prompts up to this many bytes are tokenized in place: a thread hop costs more than that.
const INLINE_TOKENIZE_BYTES: usize = 4096;

/// Tokenizes long prompts off the async runtime: 100k-token prompts take milliseconds.
pub async fn tokenize(
    state: &Arc<AppState>,
    text: String,
    add_special: bool,
) -> Result<Vec<u32>, ApiError> {
    let tok = state.tokenizer.clone();
    if text.len() <= INLINE_TOKENIZE_BYTES {
        return tok.encode(&text, add_special).map_err(ApiError::bad);
    }
    tokio::task::spawn_blocking(move || tok.encode(&text, add_special))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(ApiError::bad)
}
