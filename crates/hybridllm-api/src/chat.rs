//! POST /v1/chat/completions: the request, what it asks the engine for, and the response
//! (streamed chunks or one body) built from the engine's events.
use crate::aggregate::Collected;
use crate::beam_search::beam_params;
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::logprobs::chat_content;
use crate::prompt::TemplateArgs;
use crate::request::{field_error, FieldError, RequestBody, StreamOptions, Unhonoured};
use crate::sse::ChunkHead;
use crate::text::tokenizer::Tokenizer;
use crate::text_deltas::GenEvent;
use crate::usage::{new_id, now, Usage};
use crate::validation::{fit_max_tokens, GenParams, GenRequest, SamplingRequest};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

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
    const UNHONOURED: &'static [&'static [Unhonoured]] = crate::request::CHAT_UNHONOURED;
}

/// A valid chat request whose prompt is rendered, before it is tokenized (each shell
/// tokenizes where it suits it: long prompts take milliseconds).
pub struct ChatCall {
    pub prompt: String,
    pub add_special_tokens: bool,
    params: GenParams,
    stream: bool,
    include_usage: bool,
}

impl ChatCall {
    pub fn new(ctx: &ApiContext, req: ChatRequest) -> Result<Self, ApiError> {
        ctx.check_model(&req.model)?;
        ctx.check_task("Chat Completions", false)?;
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
        let mut params = req.sampling.validate(top, ctx.vocab_size)?;
        let stream = req.stream.unwrap_or(false);
        params.beam = beam_params(
            &req.sampling,
            stream,
            top,
            ctx.max_beam_width,
            ctx.max_num_seqs,
        )?;
        req.sampling.check_max_tokens_limit(ctx.max_tokens_limit)?;
        let add_generation_prompt = !req.template.continue_final_message.unwrap_or(false);
        let prompt = ctx.render_prompt(&req.messages, &req.template, add_generation_prompt)?;
        Ok(ChatCall {
            prompt,
            add_special_tokens: req.add_special_tokens.unwrap_or(false),
            params,
            stream,
            include_usage: req.stream_options.is_some_and(|o| o.include_usage),
        })
    }

    /// The engine request for the prompt's ids, and the response to build from its events.
    pub fn plan(
        self,
        ctx: &ApiContext,
        ids: Vec<u32>,
    ) -> Result<(GenRequest, ChatResponse), ApiError> {
        let max_tokens = fit_max_tokens(
            ids.len(),
            self.params.max_tokens,
            ctx.max_model_len,
            ctx.max_tokens_limit,
        )?;
        let head = ChunkHead {
            id: new_id("chatcmpl"),
            object: "chat.completion.chunk",
            created: now(),
            model: ctx.model_name().to_string(),
            include_usage: self.include_usage,
        };
        let resp = ChatResponse {
            n: self.params.n,
            logprobs: self.params.logprobs,
            stream: self.stream,
            usage: Usage::new(vec![ids.len()]),
            head,
        };
        let gen = GenRequest {
            request_id: resp.head.id.clone(),
            prompt_ids: ids,
            params: self.params,
            max_tokens,
        };
        Ok((gen, resp))
    }
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

/// The response of one chat request, from its engine events: a role chunk per choice, then
/// one chunk per output with text, logprobs or a finish reason, then the usage if asked for;
/// or, not streamed, one body.
pub struct ChatResponse {
    pub head: ChunkHead,
    pub n: u32,
    /// Top logprobs per token, when asked for.
    pub logprobs: Option<u32>,
    pub stream: bool,
    usage: Usage,
}

impl ChatResponse {
    pub fn opening(&self) -> Vec<Bytes> {
        (0..self.n)
            .map(|i| {
                self.head.frame(&[ChoiceDelta {
                    index: i,
                    delta: Delta {
                        role: Some("assistant"),
                        content: Some(""),
                    },
                    logprobs: &Value::Null,
                    finish_reason: None,
                    stop_reason: None,
                }])
            })
            .collect()
    }

    fn logprobs_json(&self, tok: &Tokenizer, lps: &[crate::engine_io::PositionLogprobs]) -> Value {
        match self.logprobs {
            Some(top_n) => json!({"content": chat_content(tok, lps, top_n)}),
            None => Value::Null,
        }
    }

    /// The chunk of one event, if it carries anything.
    pub fn event(&mut self, tok: &Tokenizer, p: usize, ev: &GenEvent) -> Option<Bytes> {
        let out = match ev {
            GenEvent::Prompt(info) => {
                self.usage.on_prompt(p, info);
                return None;
            }
            GenEvent::Output(out) => out,
        };
        self.usage.on_output(out.num_tokens);
        if out.text.is_empty()
            && out.finish.is_none()
            && (out.logprobs.is_empty() || self.logprobs.is_none())
        {
            return None;
        }
        let lp = self.logprobs_json(tok, &out.logprobs);
        let finish = out.finish.as_ref();
        let content = (!out.text.is_empty() || finish.is_none()).then_some(out.text.as_str());
        let c = ChoiceDelta {
            index: out.index,
            delta: Delta {
                role: None,
                content,
            },
            logprobs: &lp,
            finish_reason: finish.map(|f| f.reason),
            stop_reason: finish.map(|f| &f.stop_reason),
        };
        Some(self.head.frame(&[c]))
    }

    /// The last chunk: the usage, when asked for.
    pub fn closing(&self) -> Option<Bytes> {
        self.head
            .include_usage
            .then(|| self.head.usage_frame(&self.usage.to_json()))
    }

    /// The whole (not streamed) response.
    pub fn body(&self, tok: &Tokenizer, c: Collected) -> Value {
        let choices: Vec<Value> = c
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, choice)| {
                json!({
                    "index": i,
                    "message": {"role": "assistant", "content": choice.text, "tool_calls": []},
                    "logprobs": self.logprobs_json(tok, &choice.logprobs),
                    "finish_reason": choice.finish.reason,
                    "stop_reason": choice.finish.stop_reason,
                })
            })
            .collect();
        let prompt_logprobs = c.prompt_logprobs.into_iter().next().unwrap_or_default();
        json!({
            "id": self.head.id,
            "object": "chat.completion",
            "created": self.head.created,
            "model": self.head.model,
            "choices": choices,
            "usage": c.usage.to_json(),
            "prompt_logprobs": prompt_logprobs,
        })
    }
}
