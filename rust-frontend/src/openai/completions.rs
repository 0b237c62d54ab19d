//! POST /v1/completions: a string, a list of strings, a token id list or a list of them.
use super::aggregate::collect;
use super::generate::{generate_many, GenRequest};
use super::prompt::tokenize;
use super::request::{
    check_model, check_task, field_error, FieldError, JsonBody, RequestBody, StreamOptions,
};
use super::sse::{sse_response, ChunkHead};
use super::text_deltas::GenEvent;
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use hybridllm_api::beam_search::beam_params;
use hybridllm_api::logprobs::CompletionLogprobs;
use hybridllm_api::text::tokenizer::DecodeOpts;
use hybridllm_api::usage::{new_id, now, Usage};
use hybridllm_api::validation::{
    fit_max_tokens, unset_max_tokens, SamplingRequest, DEFAULT_COMPLETION_MAX_TOKENS,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: Value,
    #[serde(flatten)]
    pub sampling: SamplingRequest,
    pub logprobs: Option<i64>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub add_special_tokens: Option<bool>,
}

impl RequestBody for CompletionRequest {
    const GROUPS: &'static [FieldError] = &[field_error::<SamplingRequest>];
}

enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

fn ids_of(v: &Value) -> Option<Vec<u32>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect()
}

fn parse_prompts(v: &Value) -> Result<Vec<Prompt>, ApiError> {
    let bad = || {
        ApiError::bad_param("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of token id lists.")
    };
    match v {
        Value::String(s) => Ok(vec![Prompt::Text(s.clone())]),
        Value::Array(a) if a.is_empty() => {
            Err(ApiError::bad_param("prompt", "prompt must not be empty."))
        }
        Value::Array(a) if a.iter().all(Value::is_string) => Ok(a
            .iter()
            .map(|s| Prompt::Text(s.as_str().unwrap_or_default().to_string()))
            .collect()),
        Value::Array(a) if a.iter().all(Value::is_number) => {
            Ok(vec![Prompt::Ids(ids_of(v).ok_or_else(bad)?)])
        }
        Value::Array(a) => a
            .iter()
            .map(|x| ids_of(x).map(Prompt::Ids).ok_or_else(bad))
            .collect(),
        _ => Err(bad()),
    }
}

/// One choice of a streamed completion chunk.
#[derive(Serialize)]
struct TextChoice<'a> {
    index: usize,
    text: &'a str,
    logprobs: &'a Value,
    finish_reason: Option<&'static str>,
    stop_reason: &'a Value,
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    JsonBody(req): JsonBody<CompletionRequest>,
) -> Result<Response, HttpError> {
    check_model(&state, &req.model)?;
    check_task(&state, "Completions", false)?;
    if req.suffix.is_some() {
        return Err(ApiError::bad_param("suffix", "suffix is not supported.").into());
    }
    let echo = req.echo.unwrap_or(false);
    let stream = req.stream.unwrap_or(false);
    let mut params = req.sampling.validate(req.logprobs, state.vocab_size)?;
    let max_beam = state.config.max_beam_width;
    let max_seqs = state.model_info.max_num_seqs;
    params.beam = beam_params(&req.sampling, stream, req.logprobs, max_beam, max_seqs)?;
    // As vLLM: echoed logprobs are the prompt's, so ask the engine for them.
    let echo_logprobs = echo && params.logprobs.is_some();
    if echo_logprobs && params.sampling.prompt_logprobs.is_none() {
        params.sampling.prompt_logprobs = params.logprobs;
    }
    req.sampling
        .check_max_tokens_limit(state.config.max_tokens_limit)?;
    let unset = unset_max_tokens(
        Some(DEFAULT_COMPLETION_MAX_TOKENS),
        state.config.max_tokens_limit,
    );
    let mut gens = vec![];
    let mut echoes = vec![];
    let id = new_id("cmpl");
    for (i, p) in parse_prompts(&req.prompt)?.into_iter().enumerate() {
        let (ids, text) = match p {
            Prompt::Text(t) => (
                tokenize(&state, t.clone(), req.add_special_tokens.unwrap_or(true)).await?,
                t,
            ),
            Prompt::Ids(ids) => {
                if let Some(bad) = ids.iter().find(|&&t| t as usize >= state.vocab_size) {
                    return Err(ApiError::bad_param(
                        "prompt",
                        format!(
                            "Token id {bad} is out of vocabulary (size {}).",
                            state.vocab_size
                        ),
                    )
                    .into());
                }
                let text = if echo {
                    state
                        .tokenizer
                        .decode(&ids, DecodeOpts::default())
                        .map_err(ApiError::Internal)?
                } else {
                    String::new()
                };
                (ids, text)
            }
        };
        if ids.is_empty() {
            return Err(ApiError::bad_param("prompt", "The prompt is empty (0 tokens).").into());
        }
        let max_tokens = fit_max_tokens(ids.len(), params.max_tokens, state.max_model_len, unset)?;
        echoes.push(if echo { text } else { String::new() });
        gens.push(GenRequest {
            request_id: format!("{id}-{i}"),
            prompt_ids: ids,
            params: params.clone(),
            max_tokens,
        });
    }
    let n = params.n as usize;
    let prompt_lens: Vec<usize> = gens.iter().map(|g| g.prompt_ids.len()).collect();
    let head = ChunkHead {
        id,
        object: "text_completion",
        created: now(),
        model: state.served_names[0].clone(),
        include_usage: req.stream_options.is_some_and(|o| o.include_usage),
    };
    let logprobs = params.logprobs;
    let events = generate_many(state.clone(), gens).await?;
    if stream {
        let echoes = if echo { echoes } else { vec![] };
        let stream = StreamSetup {
            head,
            n,
            prompt_lens,
            echoes,
            logprobs,
            echo_logprobs,
        };
        return Ok(stream_response(state, events, stream));
    }
    let c = collect(events, n, prompt_lens, &state.tokenizer).await?;
    let choices: Vec<Value> = c
        .choices
        .into_iter()
        .enumerate()
        .map(|(i, choice)| {
            let lp = match logprobs {
                Some(top_n) => {
                    let mut lp = CompletionLogprobs::default();
                    let prompt = match echo_logprobs {
                        true => c.prompt_positions[i / n].as_slice(),
                        false => &[],
                    };
                    for x in prompt.iter().chain(&choice.logprobs) {
                        lp.push(&state.tokenizer, x, top_n);
                    }
                    lp.to_json()
                }
                None => Value::Null,
            };
            json!({
                "index": i,
                "text": echoes[i / n].clone() + &choice.text,
                "logprobs": lp,
                "finish_reason": choice.finish.reason,
                "stop_reason": choice.finish.stop_reason,
                "prompt_logprobs": c.prompt_logprobs[i / n],
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "id": head.id,
        "object": "text_completion",
        "created": head.created,
        "model": head.model,
        "choices": choices,
        "usage": c.usage.to_json(),
    }))
    .into_response())
}

/// What the streamed response needs besides the events.
struct StreamSetup {
    head: ChunkHead,
    /// Choices per prompt.
    n: usize,
    prompt_lens: Vec<usize>,
    /// Per prompt, its text to send first (empty unless `echo`).
    echoes: Vec<String>,
    logprobs: Option<u32>,
    /// The echo carries the prompt's logprobs, so it waits for the engine's prompt facts.
    echo_logprobs: bool,
}

/// The SSE response: echoed prompts first (with logprobs: when the engine has scored the
/// prompt), then one chunk per output with text, logprobs or a finish reason, then the usage
/// if asked for.
fn stream_response(
    state: Arc<AppState>,
    events: impl Stream<Item = Result<(usize, GenEvent), ApiError>> + Send + 'static,
    setup: StreamSetup,
) -> Response {
    let StreamSetup {
        head,
        n,
        prompt_lens,
        echoes,
        logprobs,
        echo_logprobs,
    } = setup;
    let s = async_stream::stream! {
        for (p, text) in echoes.iter().enumerate().filter(|_| !echo_logprobs) {
            for j in 0..n {
                yield Ok(head.frame(&[TextChoice { index: p * n + j, text, logprobs: &Value::Null, finish_reason: None, stop_reason: &Value::Null }]));
            }
        }
        // Per choice: the text offset of its next token's logprobs.
        let mut offsets = vec![0usize; prompt_lens.len() * n];
        let mut usage = Usage::new(prompt_lens);
        let mut events = std::pin::pin!(events);
        while let Some(ev) = events.next().await {
            match ev {
                Err(e) => { yield Err(e); return; }
                Ok((p, GenEvent::Prompt(info))) => {
                    usage.on_prompt(p, &info);
                    if !echo_logprobs { continue; }
                    for j in 0..n {
                        let ci = p * n + j;
                        let mut lp = CompletionLogprobs::default();
                        for x in &info.prompt_logprobs { lp.push(&state.tokenizer, x, logprobs.unwrap_or(0)); }
                        offsets[ci] = lp.offset;
                        yield Ok(head.frame(&[TextChoice { index: ci, text: &echoes[p], logprobs: &lp.to_json(), finish_reason: None, stop_reason: &Value::Null }]));
                    }
                }
                Ok((p, GenEvent::Output(out))) => {
                    usage.on_output(out.num_tokens);
                    let ci = p * n + out.index as usize;
                    if out.text.is_empty() && out.finish.is_none() && (out.logprobs.is_empty() || logprobs.is_none()) {
                        continue;
                    }
                    let lp = match logprobs {
                        Some(top_n) => {
                            let mut delta = CompletionLogprobs { offset: offsets[ci], ..Default::default() };
                            for x in &out.logprobs { delta.push(&state.tokenizer, x, top_n); }
                            offsets[ci] = delta.offset;
                            delta.to_json()
                        }
                        None => Value::Null,
                    };
                    let (reason, stop_reason) = match out.finish { Some(f) => (Some(f.reason), f.stop_reason), None => (None, Value::Null) };
                    yield Ok(head.frame(&[TextChoice { index: ci, text: &out.text, logprobs: &lp, finish_reason: reason, stop_reason: &stop_reason }]));
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
