//! POST /v1/chat/completions.
use super::generate::{generate_many, tokenize, Finish, GenEvent, GenRequest};
use super::logprobs::{chat_content, prompt_logprobs};
use super::sse::{sse_response, ChunkHead};
use super::{check_model, new_id, now, JsonBody, StreamOptions};
use crate::errors::ApiError;
use crate::server::AppState;
use crate::text::chat_template::{ChatTemplate, RenderInput};
use crate::validation::{fit_max_tokens, SamplingRequest};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<Value>,
    #[serde(flatten)]
    pub sampling: SamplingRequest,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub template: TemplateArgs,
    pub add_special_tokens: Option<bool>,
}

impl super::RequestBody for ChatRequest {
    const GROUPS: &'static [super::FieldError] = &[
        super::field_error::<SamplingRequest>,
        super::field_error::<TemplateArgs>,
    ];
}

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
/// One choice of a streamed chat chunk.
#[derive(Serialize)]
struct ChoiceDelta<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: &'a Value,
    finish_reason: Option<&'static str>,
    /// vLLM's extension, on the last chunk of a choice only.
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_reason: Option<&'a Value>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

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

struct Choice {
    text: String,
    logprobs: Vec<Value>,
    tokens: usize,
    finish: Option<Finish>,
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    JsonBody(req): JsonBody<ChatRequest>,
) -> Result<Response, ApiError> {
    check_model(&state, &req.model)?;
    let top = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (false, Some(t)) if t > 0 => {
            return Err(ApiError::bad_param(
                "top_logprobs",
                "top_logprobs requires logprobs to be true.",
            ))
        }
        (true, t) => Some(t.unwrap_or(0)),
        (false, _) => None,
    };
    let params = req.sampling.validate(top, state.vocab_size)?;
    let add_generation_prompt = !req.template.continue_final_message.unwrap_or(false);
    let prompt = render_prompt(&state, &req.messages, &req.template, add_generation_prompt)?;
    let ids = tokenize(&state, prompt, req.add_special_tokens.unwrap_or(false)).await?;
    let max_tokens = fit_max_tokens(ids.len(), params.max_tokens, state.max_model_len)?;
    let id = new_id("chatcmpl");
    let (created, model, n) = (now(), state.served_names[0].clone(), params.n);
    let top_n = params.logprobs.unwrap_or(0);
    let want_lp = params.logprobs.is_some();
    let prompt_len = ids.len();
    let gen = GenRequest {
        request_id: id.clone(),
        prompt_ids: ids,
        params,
        max_tokens,
    };
    let mut events = Box::pin(generate_many(state.clone(), vec![gen]).await?);

    if req.stream.unwrap_or(false) {
        let usage = req.stream_options.is_some_and(|o| o.include_usage);
        let head = ChunkHead {
            id,
            object: "chat.completion.chunk",
            created,
            model,
            include_usage: usage,
        };
        let st = state.clone();
        let s = async_stream::stream! {
            for i in 0..n {
                yield Ok(head.frame(&[ChoiceDelta { index: i, delta: Delta { role: Some("assistant"), content: Some("") }, logprobs: &Value::Null, finish_reason: None, stop_reason: None }]));
            }
            let (mut prompt_tokens, mut cached, mut completion) = (prompt_len, 0u32, 0usize);
            while let Some(ev) = events.next().await {
                match ev {
                    Err(e) => { yield Err(e); return; }
                    Ok((_, GenEvent::Prompt(p))) => { prompt_tokens = p.prompt_tokens as usize; cached = p.cached_tokens; }
                    Ok((_, GenEvent::Output { index, text, num_tokens, logprobs, finish })) => {
                        completion += num_tokens;
                        if text.is_empty() && finish.is_none() && (logprobs.is_empty() || !want_lp) {
                            continue;
                        }
                        let lp = if want_lp { json!({"content": chat_content(&st.tokenizer, &logprobs, top_n)}) } else { Value::Null };
                        let content = (!text.is_empty() || finish.is_none()).then_some(text.as_str());
                        let c = ChoiceDelta {
                            index,
                            delta: Delta { role: None, content },
                            logprobs: &lp,
                            finish_reason: finish.as_ref().map(|f| f.reason),
                            stop_reason: finish.as_ref().map(|f| &f.stop_reason),
                        };
                        yield Ok(head.frame(&[c]));
                    }
                }
            }
            if usage {
                let u = usage_json(prompt_tokens, completion, cached);
                yield Ok(head.usage_frame(&u));
            }
        };
        return Ok(sse_response(s));
    }

    let mut choices: Vec<Choice> = (0..n)
        .map(|_| Choice {
            text: String::new(),
            logprobs: vec![],
            tokens: 0,
            finish: None,
        })
        .collect();
    let (mut prompt_tokens, mut cached, mut prompt_lps) = (prompt_len, 0u32, Value::Null);
    while let Some(ev) = events.next().await {
        match ev? {
            (_, GenEvent::Prompt(p)) => {
                prompt_tokens = p.prompt_tokens as usize;
                cached = p.cached_tokens;
                if !p.prompt_logprobs.is_empty() {
                    prompt_lps = prompt_logprobs(&state.tokenizer, &p.prompt_logprobs);
                }
            }
            (
                _,
                GenEvent::Output {
                    index,
                    text,
                    num_tokens,
                    logprobs,
                    finish,
                },
            ) => {
                let c = &mut choices[index as usize];
                c.text.push_str(&text);
                c.tokens += num_tokens;
                if want_lp {
                    c.logprobs
                        .extend(chat_content(&state.tokenizer, &logprobs, top_n));
                }
                if finish.is_some() {
                    c.finish = finish;
                }
            }
        }
    }
    let completion: usize = choices.iter().map(|c| c.tokens).sum();
    let choices: Vec<Value> = choices
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.finish.unwrap_or(Finish {
                reason: "abort",
                stop_reason: Value::Null,
            });
            json!({
                "index": i,
                "message": {"role": "assistant", "content": c.text, "tool_calls": []},
                "logprobs": if want_lp { json!({"content": c.logprobs}) } else { Value::Null },
                "finish_reason": f.reason,
                "stop_reason": f.stop_reason,
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage_json(prompt_tokens, completion, cached),
        "prompt_logprobs": prompt_lps,
    }))
    .into_response())
}

pub fn usage_json(prompt: usize, completion: usize, cached: u32) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}
