//! Chat prompts: OpenAI messages prepared as vLLM prepares them, then rendered with the
//! request's template, the server's override or the model's (minijinja, set up like
//! transformers: `text::chat_template`).
use crate::errors::ApiError;
use crate::text::chat_template::{ChatTemplate, RenderInput};
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// One chat message as `prepare_messages` reads it: a `role`, and `content` as a string, a
/// list of text parts or null; other fields (`name`, `tool_calls`, ...) go to the template.
#[derive(ToSchema)]
#[allow(dead_code)] // a schema only
pub struct ChatMessage {
    role: String,
    #[schema(value_type = Option<MessageContent>)]
    content: Option<Value>,
}

/// A message's content.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // a schema only
pub enum MessageContent {
    Text(String),
    Parts(Vec<TextPart>),
}

/// A content part: text only (`type` "text" or absent).
#[derive(ToSchema)]
#[allow(dead_code)] // a schema only
pub struct TextPart {
    #[serde(rename = "type")]
    kind: Option<TextKind>,
    text: String,
}

#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // a schema only
pub enum TextKind {
    Text,
}

/// Chat-template inputs, shared with /tokenize.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct TemplateArgs {
    /// Given to the template; on chat completions, the function tools the model may call
    /// (`tools::read_tools`).
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
    // The function each call id named, for tool results that do not say it.
    let mut called: std::collections::HashMap<String, Value> = Default::default();
    let prepared: Result<Vec<Value>, ApiError> = messages
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
            // As vLLM: no content (an assistant turn of only tool calls) is an empty text.
            if m.get("content").is_none_or(Value::is_null) {
                m.insert("content".into(), Value::String(String::new()));
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
            for c in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let (Some(Value::String(id)), Some(name)) =
                    (c.get("id"), c.pointer("/function/name"))
                {
                    called.insert(id.clone(), name.clone());
                }
            }
            // Templates such as Hermes' read a tool result's `name`; OpenAI clients send only
            // `tool_call_id`.
            if m.get("role").and_then(Value::as_str) == Some("tool") && !m.contains_key("name") {
                let name = m.get("tool_call_id").and_then(Value::as_str);
                if let Some(name) = name.and_then(|id| called.get(id)) {
                    m.insert("name".into(), name.clone());
                }
            }
            Ok(Value::Object(m))
        })
        .collect();
    prepared
}

/// Function tools as templates read them: one without `parameters` has an empty object
/// schema (templates iterate `tool.parameters.properties`).
fn with_parameters(mut tools: Value) -> Value {
    for t in tools.as_array_mut().into_iter().flatten() {
        if let Some(Value::Object(f)) = t.get_mut("function") {
            if f.get("parameters").is_none_or(Value::is_null) {
                f.insert(
                    "parameters".into(),
                    serde_json::json!({"type": "object", "properties": {}}),
                );
            }
        }
    }
    tools
}

/// The template of a request (`chat_template`), else the server's.
/// `bos`/`eos`: the model's special tokens, as the template sees them.
pub fn render_chat(
    default_template: Option<&ChatTemplate>,
    messages: &[Value],
    t: &TemplateArgs,
    default_agp: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, ApiError> {
    let compiled;
    let template = match &t.chat_template {
        Some(src) => {
            compiled =
                ChatTemplate::compile(src).map_err(|e| ApiError::bad_param("chat_template", e))?;
            &compiled
        }
        None => default_template.ok_or_else(|| {
            ApiError::bad(
                "This model has no chat template; pass `chat_template` or use /v1/completions.",
            )
        })?,
    };
    let input = RenderInput {
        messages: prepare_messages(messages)?,
        tools: t.tools.clone().map(with_parameters),
        documents: t.documents.clone(),
        add_generation_prompt: t.add_generation_prompt.unwrap_or(default_agp),
        continue_final_message: t.continue_final_message.unwrap_or(false),
        bos_token: bos_token.to_string(),
        eos_token: eos_token.to_string(),
        kwargs: t.chat_template_kwargs.clone().unwrap_or_default(),
    };
    template.render(&input).map_err(ApiError::bad)
}
