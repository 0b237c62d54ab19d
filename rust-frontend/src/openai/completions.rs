//! POST /v1/completions: a string, a list of strings, a token id list or a list of them.
use super::chat::usage_json;
use super::generate::{generate_many, tokenize, Finish, GenEvent, GenRequest};
use super::logprobs::{prompt_logprobs, CompletionLogprobs};
use super::sse::{sse_response, ChunkHead};
use super::{check_model, new_id, now, JsonBody, StreamOptions};
use crate::errors::ApiError;
use crate::server::AppState;
use crate::text::tokenizer::DecodeOpts;
use crate::validation::{fit_max_tokens, SamplingRequest};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
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

impl super::RequestBody for CompletionRequest {
    const GROUPS: &'static [super::FieldError] = &[super::field_error::<SamplingRequest>];
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

#[derive(Default)]
struct Choice {
    text: String,
    lp: CompletionLogprobs,
    tokens: usize,
    finish: Option<Finish>,
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    JsonBody(req): JsonBody<CompletionRequest>,
) -> Result<Response, ApiError> {
    check_model(&state, &req.model)?;
    if req.suffix.is_some() {
        return Err(ApiError::bad_param("suffix", "suffix is not supported."));
    }
    let echo = req.echo.unwrap_or(false);
    if echo && req.logprobs.is_some() {
        return Err(ApiError::bad_param(
            "echo",
            "echo together with logprobs is not supported.",
        ));
    }
    let params = req.sampling.validate(req.logprobs, state.vocab_size)?;
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
                    ));
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
            return Err(ApiError::bad_param(
                "prompt",
                "The prompt is empty (0 tokens).",
            ));
        }
        let max_tokens = fit_max_tokens(ids.len(), params.max_tokens, state.max_model_len)?;
        echoes.push(if echo { text } else { String::new() });
        gens.push(GenRequest {
            request_id: format!("{id}-{i}"),
            prompt_ids: ids,
            params: params.clone(),
            max_tokens,
        });
    }
    let n = params.n as usize;
    let num_prompts = gens.len();
    let prompt_lens: Vec<usize> = gens.iter().map(|g| g.prompt_ids.len()).collect();
    let (created, model) = (now(), state.served_names[0].clone());
    let top_n = params.logprobs.unwrap_or(0);
    let want_lp = params.logprobs.is_some();
    let mut events = Box::pin(generate_many(state.clone(), gens).await?);

    if req.stream.unwrap_or(false) {
        let usage = req.stream_options.is_some_and(|o| o.include_usage);
        let head = ChunkHead {
            id,
            object: "text_completion",
            created,
            model,
            include_usage: usage,
        };
        let st = state.clone();
        let s = async_stream::stream! {
            let mut lps: Vec<CompletionLogprobs> = (0..num_prompts * n).map(|_| CompletionLogprobs::default()).collect();
            if echo {
                for (p, text) in echoes.iter().enumerate() {
                    for j in 0..n {
                        yield Ok(head.frame(&[TextChoice { index: p * n + j, text, logprobs: &Value::Null, finish_reason: None, stop_reason: &Value::Null }]));
                    }
                }
            }
            let (mut prompt_tokens, mut cached, mut completion) = (prompt_lens.clone(), 0u32, 0usize);
            while let Some(ev) = events.next().await {
                match ev {
                    Err(e) => { yield Err(e); return; }
                    Ok((p, GenEvent::Prompt(info))) => { prompt_tokens[p] = info.prompt_tokens as usize; cached += info.cached_tokens; }
                    Ok((p, GenEvent::Output { index, text, num_tokens, logprobs, finish })) => {
                        completion += num_tokens;
                        let ci = p * n + index as usize;
                        if text.is_empty() && finish.is_none() && (logprobs.is_empty() || !want_lp) {
                            continue;
                        }
                        let lp = if want_lp {
                            let acc = &mut lps[ci];
                            let mut delta = CompletionLogprobs { offset: acc.offset, ..Default::default() };
                            for x in &logprobs { delta.push(&st.tokenizer, x, top_n); }
                            acc.offset = delta.offset;
                            delta.to_json()
                        } else { Value::Null };
                        let (reason, stop_reason) = match finish { Some(f) => (Some(f.reason), f.stop_reason), None => (None, Value::Null) };
                        yield Ok(head.frame(&[TextChoice { index: ci, text: &text, logprobs: &lp, finish_reason: reason, stop_reason: &stop_reason }]));
                    }
                }
            }
            if usage {
                let u = usage_json(prompt_tokens.iter().sum(), completion, cached);
                yield Ok(head.usage_frame(&u));
            }
        };
        return Ok(sse_response(s));
    }

    let mut choices: Vec<Choice> = (0..num_prompts * n).map(|_| Choice::default()).collect();
    for (p, text) in echoes.iter().enumerate() {
        for j in 0..n {
            choices[p * n + j].text.push_str(text);
        }
    }
    let mut prompt_tokens = prompt_lens;
    let mut cached = 0u32;
    let mut prompt_lps = vec![Value::Null; num_prompts];
    while let Some(ev) = events.next().await {
        match ev? {
            (p, GenEvent::Prompt(info)) => {
                prompt_tokens[p] = info.prompt_tokens as usize;
                cached += info.cached_tokens;
                if !info.prompt_logprobs.is_empty() {
                    prompt_lps[p] = prompt_logprobs(&state.tokenizer, &info.prompt_logprobs);
                }
            }
            (
                p,
                GenEvent::Output {
                    index,
                    text,
                    num_tokens,
                    logprobs,
                    finish,
                },
            ) => {
                let c = &mut choices[p * n + index as usize];
                c.text.push_str(&text);
                c.tokens += num_tokens;
                for x in &logprobs {
                    c.lp.push(&state.tokenizer, x, top_n);
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
                "text": c.text,
                "logprobs": if want_lp { c.lp.to_json() } else { Value::Null },
                "finish_reason": f.reason,
                "stop_reason": f.stop_reason,
                "prompt_logprobs": prompt_lps[i / n],
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage_json(prompt_tokens.iter().sum(), completion, cached),
    }))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_forms() {
        assert_eq!(parse_prompts(&json!("a")).unwrap().len(), 1);
        assert_eq!(parse_prompts(&json!(["a", "b"])).unwrap().len(), 2);
        assert!(
            matches!(&parse_prompts(&json!([1, 2, 3])).unwrap()[0], Prompt::Ids(v) if v == &vec![1, 2, 3])
        );
        assert_eq!(parse_prompts(&json!([[1], [2, 3]])).unwrap().len(), 2);
        assert!(parse_prompts(&json!([])).is_err());
        assert!(parse_prompts(&json!([1, "a"])).is_err());
        assert!(parse_prompts(&json!(5)).is_err());
        assert!(parse_prompts(&json!([-1])).is_err());
    }
}
