//! POST /v1/completions: a string, a list of strings, a token id list or a list of them; what
//! each prompt asks the engine for, and the response built from the engine's events (echoed
//! prompts first, with their logprobs once the engine has scored them).
use crate::aggregate::Collected;
use crate::beam_search::beam_params;
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::generate_tokens::{self, TokensOut};
use crate::logprobs::CompletionLogprobs;
use crate::request::{
    field_error, parse_fields, FieldError, RequestBody, StreamOptions, Unhonoured,
};
use crate::sse::ChunkHead;
use crate::structured::ConstraintFields;
use crate::text::tokenizer::{DecodeOpts, Tokenizer};
use crate::text_deltas::{GenEvent, SeqOutput};
use crate::usage::{now, CallerId, CompletionUsage, Usage};
use crate::validation::{
    fit_max_tokens, unset_max_tokens, Bound, Constrained, GenParams, GenRequest, SamplingRequest,
    DEFAULT_COMPLETION_MAX_TOKENS, LOGPROBS,
};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

/// OpenAI's completion request with vLLM's extensions.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CompletionRequest {
    pub model: Option<String>,
    #[schema(value_type = PromptInput)]
    pub prompt: Value,
    #[serde(flatten)]
    pub sampling: SamplingRequest,
    #[serde(flatten)]
    pub constraints: ConstraintFields,
    /// Top logprobs per token.
    pub logprobs: Option<i64>,
    pub echo: Option<bool>,
    /// Refused when set.
    pub suffix: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub add_special_tokens: Option<bool>,
}

impl RequestBody for CompletionRequest {
    const GROUPS: &'static [FieldError] = &[
        field_error::<SamplingRequest>,
        field_error::<ConstraintFields>,
    ];
    const UNHONOURED: &'static [&'static [Unhonoured]] = crate::request::COMPLETION_UNHONOURED;
    const BOUNDS: &'static [(&'static str, Bound)] = &[("logprobs", LOGPROBS)];
}

/// What a prompt (or an embeddings input) may be: a string, strings, token ids or lists of
/// them (read by `parse_prompts`; an empty list is refused).
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // a schema only
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

pub enum Prompt {
    /// To be tokenized by the shell (with `CompletionCall::add_special_tokens`).
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

/// A valid completion request before its text prompts are tokenized.
pub struct CompletionCall {
    pub prompts: Vec<Prompt>,
    pub add_special_tokens: bool,
    params: GenParams,
    echo: bool,
    echo_logprobs: bool,
    stream: bool,
    include_usage: bool,
    continuous_usage: bool,
    caller: CallerId,
    /// `/inference/v1/generate`: written as vLLM's tokens-out response (generate_tokens.rs),
    /// and an unset max_tokens is what is left of the context.
    tokens_out: bool,
}

impl Constrained for CompletionCall {
    fn gen_params(&mut self) -> &mut GenParams {
        &mut self.params
    }
}

impl CompletionCall {
    pub fn new(ctx: &ApiContext, req: CompletionRequest) -> Result<Self, ApiError> {
        ctx.check_model(&req.model)?;
        ctx.check_task("Completions", false)?;
        if req.suffix.is_some() {
            return Err(ApiError::bad_param("suffix", "suffix is not supported."));
        }
        let echo = req.echo.unwrap_or(false);
        let stream = req.stream.unwrap_or(false);
        let mut params = req.sampling.validate(req.logprobs, ctx.vocab_size)?;
        params.beam = beam_params(
            &req.sampling,
            stream,
            req.logprobs,
            ctx.max_beam_width,
            ctx.max_num_seqs,
        )?;
        // As vLLM: echoed logprobs are the prompt's, so ask the engine for them.
        let echo_logprobs = echo && params.logprobs.is_some();
        if echo_logprobs && params.sampling.prompt_logprobs.is_none() {
            params.sampling.prompt_logprobs = params.logprobs;
        }
        params.apply_request(ctx, &req.sampling, &req.constraints, stream)?;
        let (include_usage, continuous_usage) =
            StreamOptions::usage(req.stream_options.as_ref(), ctx.force_include_usage);
        Ok(CompletionCall {
            prompts: parse_prompts(&req.prompt)?,
            add_special_tokens: req.add_special_tokens.unwrap_or(true),
            params,
            echo,
            echo_logprobs,
            stream,
            include_usage,
            continuous_usage,
            caller: CallerId {
                body: req.sampling.request_id.clone(),
                header: None,
            },
            tokens_out: false,
        })
    }

    /// The call of a `/inference/v1/generate` body (vLLM's tokens in, tokens out:
    /// generate_tokens.rs), validated by the completion's rules, its refusals naming the
    /// generate request's fields.
    pub fn tokens(ctx: &ApiContext, body: &[u8]) -> Result<Self, ApiError> {
        let tokens = generate_tokens::TokensRequest::new(body)?;
        let rename = |e| tokens.rename(e);
        let req: CompletionRequest = parse_fields(tokens.fields.clone()).map_err(rename)?;
        let mut call = CompletionCall::new(ctx, req).map_err(rename)?;
        call.tokens_out = true;
        Ok(call)
    }

    /// The request's `X-Request-Id` header (it wins over the body's `request_id`).
    pub fn set_request_id_header(&mut self, value: Option<String>) {
        self.caller.header = value;
    }

    /// One engine request per prompt, from each prompt's ids (`self.prompts` in order, the
    /// text ones tokenized), and the response to build from their events.
    pub fn plan(
        self,
        ctx: &ApiContext,
        ids: Vec<Vec<u32>>,
    ) -> Result<(Vec<GenRequest>, CompletionResponse), ApiError> {
        match self.tokens_out {
            true => self
                .plan_all(ctx, ids)
                .map_err(generate_tokens::rename_plan_error),
            false => self.plan_all(ctx, ids),
        }
    }

    fn plan_all(
        mut self,
        ctx: &ApiContext,
        ids: Vec<Vec<u32>>,
    ) -> Result<(Vec<GenRequest>, CompletionResponse), ApiError> {
        self.params.compile_constraint(ctx)?;
        // vLLM's generate endpoint fills the context when max_tokens is unset.
        let default = (!self.tokens_out).then_some(DEFAULT_COMPLETION_MAX_TOKENS);
        let unset = unset_max_tokens(default, ctx.max_tokens_limit);
        let rid = self.caller.ids(if self.tokens_out {
            "generate-tokens"
        } else {
            "cmpl"
        })?;
        let id = rid.response;
        let mut gens = vec![];
        let mut echoes = vec![];
        for (i, (prompt, ids)) in self.prompts.into_iter().zip(ids).enumerate() {
            let ids = self.params.truncate(ids);
            let text = match prompt {
                Prompt::Text(t) => t,
                Prompt::Ids(_) => {
                    ctx.check_ids("prompt", &ids)?;
                    match self.echo {
                        true => ctx
                            .tokenizer
                            .decode(&ids, DecodeOpts::default())
                            .map_err(ApiError::Internal)?,
                        false => String::new(),
                    }
                }
            };
            if ids.is_empty() {
                return Err(ApiError::bad_param(
                    "prompt",
                    "The prompt is empty (0 tokens).",
                ));
            }
            let max_tokens =
                fit_max_tokens(ids.len(), self.params.max_tokens, ctx.max_model_len, unset)?;
            echoes.push(if self.echo { text } else { String::new() });
            gens.push(GenRequest {
                request_id: format!("{}-{i}", rid.engine),
                prompt_ids: ids,
                params: self.params.clone(),
                max_tokens,
            });
        }
        let n = self.params.n as usize;
        let prompt_lens: Vec<usize> = gens.iter().map(|g| g.prompt_ids.len()).collect();
        let prompt_ids = self
            .params
            .token_ids
            .then(|| gens.iter().map(|g| g.prompt_ids.clone()).collect());
        let resp = CompletionResponse {
            head: ChunkHead {
                id,
                object: "text_completion",
                created: now(),
                model: ctx.model_name().to_string(),
                include_usage: self.include_usage,
                continuous_usage: self.continuous_usage,
                prompt_details: ctx.prompt_tokens_details,
            },
            n,
            offsets: vec![0; prompt_lens.len() * n],
            ids_sent: vec![false; prompt_lens.len() * n],
            prompt_ids,
            usage: Usage::new(prompt_lens.clone()),
            prompt_lens,
            echoes,
            echo: self.echo,
            logprobs: self.params.logprobs,
            tokens_as_ids: self.params.tokens_as_ids,
            echo_logprobs: self.echo_logprobs,
            stream: self.stream,
            tokens_out: self.tokens_out,
        };
        Ok((gens, resp))
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
    /// `return_token_ids`: the prompt's ids, on a choice's first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<Vec<u32>>,
    /// `return_token_ids`: the ids this chunk's text came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<&'a [u32]>,
}

/// The response of one completion request, from its prompts' engine events.
pub struct CompletionResponse {
    pub head: ChunkHead,
    /// Choices per prompt.
    pub n: usize,
    pub prompt_lens: Vec<usize>,
    /// Per prompt, its text to send first (empty unless `echo`).
    echoes: Vec<String>,
    echo: bool,
    pub logprobs: Option<u32>,
    /// `return_tokens_as_token_ids`.
    tokens_as_ids: bool,
    /// The echo carries the prompt's logprobs, so it waits for the engine's prompt facts.
    echo_logprobs: bool,
    pub stream: bool,
    /// Per choice: the text offset of its next token's logprobs.
    offsets: Vec<usize>,
    /// `return_token_ids`: each prompt's ids.
    prompt_ids: Option<Vec<Vec<u32>>>,
    /// Per choice: whether a chunk has carried its prompt's ids yet.
    ids_sent: Vec<bool>,
    usage: Usage,
    /// Written as `/inference/v1/generate`'s response.
    tokens_out: bool,
}

impl CompletionResponse {
    /// Choice `ci`'s prompt ids, on its first chunk only (`return_token_ids`).
    fn first_ids(&mut self, ci: usize) -> Option<Vec<u32>> {
        let ids = self.prompt_ids.as_ref()?;
        (!std::mem::replace(&mut self.ids_sent[ci], true)).then(|| ids[ci / self.n].clone())
    }

    /// `return_token_ids`: these ids, else nothing.
    fn ids<'a>(&self, ids: &'a [u32]) -> Option<&'a [u32]> {
        self.prompt_ids.is_some().then_some(ids)
    }

    /// The echoed prompts (those without logprobs: the others wait for the engine).
    pub fn opening(&mut self) -> Vec<Bytes> {
        if !self.echo || self.echo_logprobs {
            return vec![];
        }
        let mut out = vec![];
        for p in 0..self.echoes.len() {
            let (prompt, _) = self.usage.running(p, 0);
            for j in 0..self.n {
                let prompt_token_ids = self.first_ids(p * self.n + j);
                let choice = [TextChoice {
                    index: p * self.n + j,
                    text: &self.echoes[p],
                    logprobs: &Value::Null,
                    finish_reason: None,
                    stop_reason: &Value::Null,
                    prompt_token_ids,
                    token_ids: self.ids(&[]),
                }];
                out.push(self.head.frame_running(&choice, prompt, 0));
            }
        }
        out
    }

    /// The chunks of one event (an echo with logprobs is one per choice of the prompt).
    pub fn event(&mut self, tok: &Tokenizer, p: usize, ev: &GenEvent) -> Vec<Bytes> {
        let out = match ev {
            GenEvent::Prompt(info) => {
                self.usage.on_prompt(p, info);
                if !self.echo_logprobs {
                    return vec![];
                }
                let mut frames = vec![];
                for j in 0..self.n {
                    let ci = p * self.n + j;
                    let mut lp = CompletionLogprobs::new(self.tokens_as_ids);
                    for x in &info.prompt_logprobs {
                        lp.push(tok, x, self.logprobs.unwrap_or(0));
                    }
                    self.offsets[ci] = lp.offset;
                    let (prompt, done) = self.usage.running(p, ci);
                    let prompt_token_ids = self.first_ids(ci);
                    let choice = [TextChoice {
                        index: ci,
                        text: &self.echoes[p],
                        logprobs: &lp.to_json(),
                        finish_reason: None,
                        stop_reason: &Value::Null,
                        prompt_token_ids,
                        token_ids: self.ids(&[]),
                    }];
                    frames.push(self.head.frame_running(&choice, prompt, done));
                }
                return frames;
            }
            GenEvent::Output(out) => out,
        };
        let ci = p * self.n + out.index as usize;
        self.usage.on_choice_output(ci, out.num_tokens);
        if self.tokens_out {
            return self.tokens_chunk(p, ci, out);
        }
        if out.text.is_empty()
            && out.finish.is_none()
            && (out.logprobs.is_empty() || self.logprobs.is_none())
            && (out.token_ids.is_empty() || self.prompt_ids.is_none())
        {
            return vec![];
        }
        let lp = match self.logprobs {
            Some(top_n) => {
                let mut delta = CompletionLogprobs::new(self.tokens_as_ids);
                delta.offset = self.offsets[ci];
                for x in &out.logprobs {
                    delta.push(tok, x, top_n);
                }
                self.offsets[ci] = delta.offset;
                delta.to_json()
            }
            None => Value::Null,
        };
        let (reason, stop_reason) = match &out.finish {
            Some(f) => (Some(f.reason), &f.stop_reason),
            None => (None, &Value::Null),
        };
        let (prompt, done) = self.usage.running(p, ci);
        let prompt_token_ids = self.first_ids(ci);
        let choice = [TextChoice {
            index: ci,
            text: &out.text,
            logprobs: &lp,
            finish_reason: reason,
            stop_reason,
            prompt_token_ids,
            token_ids: self.ids(&out.token_ids),
        }];
        vec![self.head.frame_running(&choice, prompt, done)]
    }

    /// A tokens-out chunk (vLLM's skips a step without new ids).
    fn tokens_chunk(&self, p: usize, ci: usize, out: &SeqOutput) -> Vec<Bytes> {
        if out.token_ids.is_empty() && out.finish.is_none() {
            return vec![];
        }
        let lp = match self.logprobs {
            Some(n) => json!({"content": generate_tokens::logprobs_content(&out.logprobs, n)}),
            None => Value::Null,
        };
        let choice = TokensOut::choice(
            ci,
            &out.token_ids,
            lp,
            out.finish.as_ref().map(|f| f.reason),
        );
        let usage = self.head.continuous_usage.then(|| {
            let (prompt, done) = self.usage.running(p, ci);
            json!({"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done})
        });
        vec![TokensOut::chunk(&self.head.id, choice, usage)]
    }

    /// The last chunk: the usage, when asked for.
    pub fn closing(&self) -> Option<Bytes> {
        if self.tokens_out {
            return self.head.include_usage.then(|| {
                TokensOut::usage_chunk(&self.head.id, self.usage.to_json(self.head.prompt_details))
            });
        }
        self.head.include_usage.then(|| {
            self.head
                .usage_frame(&self.usage.to_json(self.head.prompt_details))
        })
    }

    /// The whole (not streamed) response.
    pub fn body(&self, tok: &Tokenizer, c: Collected) -> Value {
        let n = self.n;
        if self.tokens_out {
            let choices = c
                .choices
                .into_iter()
                .enumerate()
                .map(|(i, ch)| {
                    let lp = match self.logprobs {
                        Some(n) => {
                            json!({"content": generate_tokens::logprobs_content(&ch.logprobs, n)})
                        }
                        None => Value::Null,
                    };
                    TokensOut::choice(i, &ch.token_ids, lp, Some(ch.finish.reason))
                })
                .collect();
            let prompt_lps = c.prompt_logprobs.into_iter().next().unwrap_or(Value::Null);
            return TokensOut::body(&self.head.id, choices, prompt_lps);
        }
        let choices: Vec<CompletionChoice> = c
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, choice)| {
                let lp = match self.logprobs {
                    Some(top_n) => {
                        let mut lp = CompletionLogprobs::new(self.tokens_as_ids);
                        let prompt = match self.echo_logprobs {
                            true => c.prompt_positions[i / n].as_slice(),
                            false => &[],
                        };
                        for x in prompt.iter().chain(&choice.logprobs) {
                            lp.push(tok, x, top_n);
                        }
                        lp.to_json()
                    }
                    None => Value::Null,
                };
                CompletionChoice {
                    index: i,
                    text: self.echoes[i / n].clone() + &choice.text,
                    logprobs: lp,
                    finish_reason: choice.finish.reason,
                    stop_reason: choice.finish.stop_reason,
                    prompt_logprobs: c.prompt_logprobs[i / n].clone(),
                    prompt_token_ids: self.prompt_ids.as_ref().map(|p| p[i / n].clone()),
                    token_ids: self.prompt_ids.as_ref().map(|_| choice.token_ids),
                }
            })
            .collect();
        let body = TextCompletion {
            id: &self.head.id,
            object: "text_completion",
            created: self.head.created,
            model: &self.head.model,
            choices,
            usage: c.usage.body(self.head.prompt_details),
        };
        serde_json::to_value(body).expect("a completion serializes")
    }
}

/// The body of a completion that is not streamed.
#[derive(Serialize, ToSchema)]
pub struct TextCompletion<'a> {
    id: &'a str,
    /// "text_completion"
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: Vec<CompletionChoice>,
    usage: CompletionUsage,
}

#[derive(Serialize, ToSchema)]
pub struct CompletionChoice {
    index: usize,
    /// The echoed prompt first, with `echo`.
    text: String,
    /// `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}` when asked for, else null.
    #[schema(value_type = Option<Object>, required = true)]
    logprobs: Value,
    finish_reason: &'static str,
    /// vLLM's: the stop string or token id that ended it, or null.
    stop_reason: Value,
    /// vLLM's, of the prompt when asked for (null otherwise; null for its first token).
    #[schema(value_type = Option<Vec<Option<Object>>>, required = true)]
    prompt_logprobs: Value,
    /// vLLM's, with `return_token_ids`: the prompt's token ids (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<Vec<u32>>,
    /// vLLM's, with `return_token_ids`: the generated token ids (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<Vec<u32>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tokens_err(body: Value) -> (String, Option<String>) {
        let ctx = crate::context::test_context();
        match CompletionCall::tokens(&ctx, body.to_string().as_bytes()) {
            Err(ApiError::BadRequest { message, param }) => (message, param),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted {body}"),
        }
    }

    #[test]
    fn refusals_name_the_generate_fields() {
        let p = |b: Value| tokens_err(b).1.unwrap();
        assert_eq!(p(json!({"sampling_params": {}})), "token_ids");
        assert_eq!(
            p(json!({"token_ids": [1, -2], "sampling_params": {}})),
            "token_ids"
        );
        assert_eq!(p(json!({"token_ids": [1]})), "sampling_params");
        assert_eq!(
            p(json!({"token_ids": [1], "sampling_params": {"temperature": -1}})),
            "sampling_params.temperature"
        );
        assert_eq!(
            p(json!({"token_ids": [1], "sampling_params": {"output_kind": 1}})),
            "sampling_params.output_kind"
        );
        assert_eq!(
            p(json!({"token_ids": [1], "sampling_params": {"prompt": "x"}})),
            "sampling_params.prompt"
        );
        assert_eq!(
            p(json!({"token_ids": [1], "sampling_params": {}, "features": {"a": 1}})),
            "features"
        );
        assert_eq!(
            p(json!({"token_ids": [1], "sampling_params": {"stop": ["x"], "detokenize": false}})),
            "sampling_params.stop"
        );
        let ctx = crate::context::test_context();
        let ok = |b: Value| CompletionCall::tokens(&ctx, b.to_string().as_bytes()).is_ok();
        assert!(ok(
            json!({"token_ids": [1, 2], "sampling_params": {"max_tokens": 3},
            "features": null, "kv_transfer_params": null, "other": 1})
        ));
    }

    #[test]
    fn prompt_forms() {
        assert_eq!(parse_prompts(&json!("a")).unwrap().len(), 1);
        assert_eq!(parse_prompts(&json!(["a", "b"])).unwrap().len(), 2);
        assert!(
            matches!(&parse_prompts(&json!([1, 2, 3])).unwrap()[0], Prompt::Ids(v) if v == &[1, 2, 3])
        );
        assert_eq!(parse_prompts(&json!([[1], [2, 3]])).unwrap().len(), 2);
        assert!(parse_prompts(&json!([])).is_err());
        assert!(parse_prompts(&json!([1, "a"])).is_err());
        assert!(parse_prompts(&json!(5)).is_err());
        assert!(parse_prompts(&json!([-1])).is_err());
    }

    #[test]
    fn echo_then_text_streamed_and_whole() {
        use crate::aggregate::Collector;
        use crate::context::test_context;
        use crate::request::parse_body;
        use crate::sequence_text::Finish;
        use crate::text_deltas::SeqOutput;
        let ctx = test_context();
        let plan = |body: Value| {
            let req = parse_body::<CompletionRequest>(body.to_string().as_bytes()).unwrap();
            let call = CompletionCall::new(&ctx, req).unwrap();
            let ids = call
                .prompts
                .iter()
                .map(|p| match p {
                    Prompt::Text(t) => ctx.tokenizer.encode(t, true).unwrap(),
                    Prompt::Ids(ids) => ids.clone(),
                })
                .collect();
            call.plan(&ctx, ids).unwrap()
        };
        let done = || {
            GenEvent::Output(SeqOutput {
                index: 0,
                token_ids: vec![],
                text: " foo".into(),
                num_tokens: 1,
                logprobs: vec![],
                finish: Some(Finish {
                    reason: "length",
                    stop_reason: Value::Null,
                }),
            })
        };
        let masked = |mut v: Value| {
            v["id"] = json!("ID");
            v["created"] = json!(0);
            v
        };
        // Streamed: the echoed prompt first, then the text; no usage unless asked for.
        let (gens, mut resp) = plan(json!({"prompt": [1, 2], "echo": true, "stream": true}));
        assert_eq!(
            (gens.len(), gens[0].max_tokens, &gens[0].request_id[..5]),
            (1, 16, "cmpl-")
        );
        let frames: Vec<Bytes> = resp
            .opening()
            .into_iter()
            .chain(resp.event(&ctx.tokenizer, 0, &done()))
            .collect();
        let texts: Vec<Value> = frames
            .iter()
            .map(|f| {
                let t = std::str::from_utf8(f).unwrap();
                let v: Value = serde_json::from_str(&t[6..t.len() - 2]).unwrap();
                v["choices"][0].clone()
            })
            .collect();
        assert_eq!(
            texts,
            vec![
                json!({"index": 0, "text": "Hello world", "logprobs": null, "finish_reason": null, "stop_reason": null}),
                json!({"index": 0, "text": " foo", "logprobs": null, "finish_reason": "length", "stop_reason": null}),
            ]
        );
        assert!(resp.closing().is_none());
        // Whole: the echo and the text in one choice, per prompt.
        let (gens, resp) =
            plan(json!({"prompt": ["Hello", "world"], "echo": true, "max_tokens": 2}));
        assert_eq!(
            gens.iter()
                .map(|g| g.request_id.ends_with("-1"))
                .collect::<Vec<_>>(),
            [false, true]
        );
        let mut c = Collector::new(1, resp.prompt_lens.clone());
        c.push(&ctx.tokenizer, 0, done());
        c.push(&ctx.tokenizer, 1, done());
        let v = masked(resp.body(&ctx.tokenizer, c.finish()));
        assert_eq!(
            v["choices"][1],
            json!({"index": 1, "text": "world foo", "logprobs": null,
            "finish_reason": "length", "stop_reason": null, "prompt_logprobs": null})
        );
        assert_eq!(v["usage"]["total_tokens"], 4);
    }
}
