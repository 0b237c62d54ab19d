//! POST /v1/chat/completions.
use super::aggregate::collect;
use super::generate::{generate_many, GenRequest};
use super::prompt::{render_prompt, tokenize, TemplateArgs};
use super::request::{
    check_model, check_task, field_error, FieldError, JsonBody, RequestBody, StreamOptions,
};
use super::sse::{sse_response, ChunkHead};
use super::text_deltas::GenEvent;
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use hybridllm_api::beam_search::beam_params;
use hybridllm_api::logprobs::chat_content;
use hybridllm_api::usage::{new_id, now, Usage};
use hybridllm_api::validation::{fit_max_tokens, SamplingRequest};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
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

impl RequestBody for ChatRequest {
    const GROUPS: &'static [FieldError] =
        &[field_error::<SamplingRequest>, field_error::<TemplateArgs>];
}

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

pub async fn handle(
    State(state): State<Arc<AppState>>,
    JsonBody(req): JsonBody<ChatRequest>,
) -> Result<Response, HttpError> {
    check_model(&state, &req.model)?;
    check_task(&state, "Chat Completions", false)?;
    let top = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (false, Some(t)) if t > 0 => {
            return Err(ApiError::bad_param(
                "top_logprobs",
                "top_logprobs requires logprobs to be true.",
            )
            .into())
        }
        (true, t) => Some(t.unwrap_or(0)),
        (false, _) => None,
    };
    let mut params = req.sampling.validate(top, state.vocab_size)?;
    let stream = req.stream.unwrap_or(false);
    let (max_beam, max_seqs) = (state.config.max_beam_width, state.model_info.max_num_seqs);
    params.beam = beam_params(&req.sampling, stream, top, max_beam, max_seqs)?;
    let cap = state.config.max_tokens_limit;
    req.sampling.check_max_tokens_limit(cap)?;
    let add_generation_prompt = !req.template.continue_final_message.unwrap_or(false);
    let prompt = render_prompt(&state, &req.messages, &req.template, add_generation_prompt)?;
    let ids = tokenize(&state, prompt, req.add_special_tokens.unwrap_or(false)).await?;
    let max_tokens = fit_max_tokens(ids.len(), params.max_tokens, state.max_model_len, cap)?;
    let head = ChunkHead {
        id: new_id("chatcmpl"),
        object: "chat.completion.chunk",
        created: now(),
        model: state.served_names[0].clone(),
        include_usage: req.stream_options.is_some_and(|o| o.include_usage),
    };
    let (n, logprobs) = (params.n, params.logprobs);
    let prompt_len = ids.len();
    let gen = GenRequest {
        request_id: head.id.clone(),
        prompt_ids: ids,
        params,
        max_tokens,
    };
    let events = generate_many(state.clone(), vec![gen]).await?;
    if req.stream.unwrap_or(false) {
        return Ok(stream_response(
            state, events, head, n, prompt_len, logprobs,
        ));
    }
    let c = collect(events, n as usize, vec![prompt_len], &state.tokenizer).await?;
    let choices: Vec<Value> = c
        .choices
        .into_iter()
        .enumerate()
        .map(|(i, choice)| {
            let lp = match logprobs {
                Some(top_n) => {
                    json!({"content": chat_content(&state.tokenizer, &choice.logprobs, top_n)})
                }
                None => Value::Null,
            };
            json!({
                "index": i,
                "message": {"role": "assistant", "content": choice.text, "tool_calls": []},
                "logprobs": lp,
                "finish_reason": choice.finish.reason,
                "stop_reason": choice.finish.stop_reason,
            })
        })
        .collect();
    let prompt_logprobs = c.prompt_logprobs.into_iter().next().unwrap_or_default();
    Ok(axum::Json(json!({
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "choices": choices,
        "usage": c.usage.to_json(),
        "prompt_logprobs": prompt_logprobs,
    }))
    .into_response())
}

/// The SSE response: a role chunk per choice, then one chunk per output with text, logprobs
/// or a finish reason, then the usage if asked for.
fn stream_response(
    state: Arc<AppState>,
    events: impl futures_util::Stream<Item = Result<(usize, GenEvent), ApiError>> + Send + 'static,
    head: ChunkHead,
    n: u32,
    prompt_len: usize,
    logprobs: Option<u32>,
) -> Response {
    let s = async_stream::stream! {
        for i in 0..n {
            yield Ok(head.frame(&[ChoiceDelta { index: i, delta: Delta { role: Some("assistant"), content: Some("") }, logprobs: &Value::Null, finish_reason: None, stop_reason: None }]));
        }
        let mut usage = Usage::new(vec![prompt_len]);
        let mut events = std::pin::pin!(events);
        while let Some(ev) = events.next().await {
            match ev {
                Err(e) => { yield Err(e); return; }
                Ok((p, GenEvent::Prompt(info))) => usage.on_prompt(p, &info),
                Ok((_, GenEvent::Output(out))) => {
                    usage.on_output(out.num_tokens);
                    if out.text.is_empty() && out.finish.is_none() && (out.logprobs.is_empty() || logprobs.is_none()) {
                        continue;
                    }
                    let lp = match logprobs {
                        Some(top_n) => json!({"content": chat_content(&state.tokenizer, &out.logprobs, top_n)}),
                        None => Value::Null,
                    };
                    let finish = out.finish.as_ref();
                    let content = (!out.text.is_empty() || finish.is_none()).then_some(out.text.as_str());
                    let c = ChoiceDelta {
                        index: out.index,
                        delta: Delta { role: None, content },
                        logprobs: &lp,
                        finish_reason: finish.map(|f| f.reason),
                        stop_reason: finish.map(|f| &f.stop_reason),
                    };
                    yield Ok(head.frame(&[c]));
                }
            }
        }
        if head.include_usage {
            yield Ok(head.usage_frame(&usage.to_json()));
        }
    };
    sse_response(s)
}

#[cfg(test)]
mod tests;
