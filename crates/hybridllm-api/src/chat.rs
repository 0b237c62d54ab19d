//! POST /v1/chat/completions: the request, what it asks the engine for, and the response
//! (streamed chunks or one body) built from the engine's events.
use crate::aggregate::{ChoiceOutput, Collected};
use crate::beam_search::beam_params;
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::logprobs::chat_content;
use crate::prompt::ChatMessage;
use crate::prompt::TemplateArgs;
use crate::reasoning::{split_whole, ReasoningReader, ReplyStart};
use crate::request::{field_error, FieldError, RequestBody, StreamOptions, Unhonoured};
use crate::sse::ChunkHead;
use crate::structured::ConstraintFields;
use crate::text::tokenizer::Tokenizer;
use crate::text_deltas::GenEvent;
use crate::tools::parsers::{parse_whole, ToolEvent, ToolFormat, ToolParser};
use crate::tools::{self, ToolPlan};
use crate::usage::{now, CallerId, CompletionUsage, Usage};
use crate::validation::{
    fit_max_tokens, Bound, Constrained, GenParams, GenRequest, SamplingRequest, LOGPROBS,
};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

/// OpenAI's chat completion request with vLLM's extensions.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = ChatCompletionRequest)]
pub struct ChatRequest {
    pub model: Option<String>,
    #[schema(value_type = Vec<ChatMessage>)]
    pub messages: Vec<Value>,
    #[serde(flatten)]
    pub sampling: SamplingRequest,
    #[serde(flatten)]
    pub constraints: ConstraintFields,
    pub logprobs: Option<bool>,
    /// With `logprobs: true`.
    pub top_logprobs: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub template: TemplateArgs,
    pub add_special_tokens: Option<bool>,
    /// vLLM's: the reply starts with the last message when it has the reply's role.
    pub echo: Option<bool>,
    /// `none`, `auto`, `required` or `{"type": "function", "function": {"name": ...}}`
    /// (default: `auto` with `tools`, else `none`).
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    /// More than one call per turn (default true).
    pub parallel_tool_calls: Option<bool>,
    /// With `--reasoning-parser`: return the reply's reasoning (default true).
    pub include_reasoning: Option<bool>,
}

impl RequestBody for ChatRequest {
    const GROUPS: &'static [FieldError] = &[
        field_error::<SamplingRequest>,
        field_error::<TemplateArgs>,
        field_error::<ConstraintFields>,
    ];
    const UNHONOURED: &'static [&'static [Unhonoured]] = crate::request::CHAT_UNHONOURED;
    const BOUNDS: &'static [(&'static str, Bound)] = &[("top_logprobs", LOGPROBS)];
}

/// A valid chat request whose prompt is rendered, before it is tokenized (each shell
/// tokenizes where it suits it: long prompts take milliseconds).
pub struct ChatCall {
    pub prompt: String,
    pub add_special_tokens: bool,
    params: GenParams,
    stream: bool,
    include_usage: bool,
    continuous_usage: bool,
    caller: CallerId,
    /// The text the reply starts with (`echo`).
    echo: String,
    /// What the reply's tool calls are read as, when they are.
    tools: Option<ToolPlan>,
    /// How the reply's reasoning is read, with `--reasoning-parser`.
    reasoning: Option<ReasoningPlan>,
}

/// A reply's reasoning: where it starts, and whether the response returns it.
#[derive(Clone, Copy)]
struct ReasoningPlan {
    start: ReplyStart,
    include: bool,
}

/// vLLM's chat `echo`: the last message's text when its role is the reply's (`assistant`,
/// or the last message's own without a generation prompt), else nothing.
fn echoed(messages: &[Value], add_generation_prompt: bool) -> String {
    let Some(last) = messages.last() else {
        return String::new();
    };
    let role = last.get("role").and_then(Value::as_str);
    if add_generation_prompt && role != Some("assistant") {
        return String::new();
    }
    match last.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

impl Constrained for ChatCall {
    fn gen_params(&mut self) -> &mut GenParams {
        &mut self.params
    }
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
        params.apply_request(ctx, &req.sampling, &req.constraints, stream)?;
        tools::check_messages(&req.messages)?;
        let mut tool_plan = tools::plan(
            &ctx.tools,
            req.template.tools.as_ref(),
            req.tool_choice.as_ref(),
            req.parallel_tool_calls,
        )?;
        if let Some(plan) = &mut tool_plan {
            params.apply_tools(plan, None, req.sampling.skip_special_tokens)?;
        }
        let add_generation_prompt = !req.template.continue_final_message.unwrap_or(false);
        let prompt = ctx.render_prompt(&req.messages, &req.template, add_generation_prompt)?;
        let reasoning = ctx.reasoning.map(|format| ReasoningPlan {
            start: format.start(&prompt),
            include: req.include_reasoning.unwrap_or(true),
        });
        if let (Some(r), Some(c)) = (reasoning, &mut params.constraint) {
            c.after_reasoning = Some(r.start);
        }
        let echo = match req.echo.unwrap_or(false) {
            true => echoed(
                &req.messages,
                req.template.add_generation_prompt.unwrap_or(true) && add_generation_prompt,
            ),
            false => String::new(),
        };
        let (include_usage, continuous_usage) =
            StreamOptions::usage(req.stream_options.as_ref(), ctx.force_include_usage);
        Ok(ChatCall {
            prompt,
            add_special_tokens: req.add_special_tokens.unwrap_or(false),
            params,
            stream,
            include_usage,
            continuous_usage,
            caller: CallerId {
                body: req.sampling.request_id.clone(),
                header: None,
            },
            echo,
            tools: tool_plan,
            reasoning,
        })
    }

    /// The request's `X-Request-Id` header (it wins over the body's `request_id`).
    pub fn set_request_id_header(&mut self, value: Option<String>) {
        self.caller.header = value;
    }

    /// The engine request for the prompt's ids, and the response to build from its events.
    pub fn plan(
        mut self,
        ctx: &ApiContext,
        ids: Vec<u32>,
    ) -> Result<(GenRequest, ChatResponse), ApiError> {
        self.params.compile_constraint(ctx)?;
        let ids = self.params.truncate(ids);
        let max_tokens = fit_max_tokens(
            ids.len(),
            self.params.max_tokens,
            ctx.max_model_len,
            ctx.max_tokens_limit,
        )?;
        let rid = self.caller.ids("chatcmpl")?;
        let head = ChunkHead {
            id: rid.response,
            object: "chat.completion.chunk",
            created: now(),
            model: ctx.model_name().to_string(),
            include_usage: self.include_usage,
            continuous_usage: self.continuous_usage,
            prompt_details: ctx.prompt_tokens_details,
        };
        let tools = self.tools.map(|plan| ResponseTools {
            parsers: (0..self.params.n).map(|_| plan.format.parser()).collect(),
            ids: vec![vec![]; self.params.n as usize],
            format: plan.format,
            parallel: plan.parallel,
        });
        let reasoning = self.reasoning.map(|plan| ResponseReasoning {
            readers: (0..self.params.n)
                .map(|_| ReasoningReader::new(plan.start))
                .collect(),
            plan,
        });
        let resp = ChatResponse {
            tools,
            reasoning,
            n: self.params.n,
            logprobs: self.params.logprobs,
            tokens_as_ids: self.params.tokens_as_ids,
            echo: self.echo,
            stream: self.stream,
            usage: Usage::new(vec![ids.len()]),
            prompt_ids: self.params.token_ids.then(|| ids.clone()),
            head,
        };
        let gen = GenRequest {
            request_id: rid.engine,
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
    /// vLLM's `return_token_ids`: the ids this chunk came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<&'a [u32]>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
}

/// The reasoning of a response being read: a reader per choice.
struct ResponseReasoning {
    plan: ReasoningPlan,
    readers: Vec<ReasoningReader>,
}

impl ResponseReasoning {
    /// A piece of choice `i`'s text (and its end, when `fin`): its reasoning, as returned
    /// (empty when not), and its content.
    fn read(&mut self, i: usize, text: &str, fin: bool) -> (String, String) {
        let reader = &mut self.readers[i];
        let mut s = reader.push(text);
        if fin {
            let end = reader.finish();
            s.reasoning.push_str(&end.reasoning);
            s.content.push_str(&end.content);
        }
        if !self.plan.include {
            s.reasoning.clear();
        }
        (s.reasoning, s.content)
    }
}

/// The tool calls of a response being read: a parser and the calls' ids per choice.
struct ResponseTools {
    format: ToolFormat,
    /// Without it, calls after the first are dropped.
    parallel: bool,
    parsers: Vec<Box<dyn ToolParser>>,
    ids: Vec<Vec<String>>,
}

/// A tool call's id: vLLM's shape, Mistral's 9 characters for its format.
fn call_id(format: ToolFormat) -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    match format {
        ToolFormat::Mistral => hex[..9].to_string(),
        _ => format!("chatcmpl-tool-{hex}"),
    }
}

impl ResponseTools {
    /// A piece of choice `i`'s text (and its end, when `fin`): its content and the entries of
    /// its delta's `tool_calls`, one per call it touches.
    fn read(&mut self, i: usize, text: &str, fin: bool) -> (String, Vec<Value>) {
        let mut events = self.parsers[i].push(text);
        if fin {
            events.extend(self.parsers[i].finish());
        }
        let mut content = String::new();
        let mut entries: Vec<Value> = vec![];
        for e in events {
            match e {
                ToolEvent::Content(t) => content.push_str(&t),
                ToolEvent::Start { index, .. } | ToolEvent::Args { index, .. }
                    if index > 0 && !self.parallel => {}
                ToolEvent::Start { index, name } => {
                    let id = call_id(self.format);
                    self.ids[i].push(id.clone());
                    entries.push(json!({"index": index, "id": id, "type": "function",
                                        "function": {"name": name, "arguments": ""}}));
                }
                ToolEvent::Args { index, text } => match entries.last_mut() {
                    Some(last) if last["index"] == index => {
                        let args = &mut last["function"]["arguments"];
                        *args = json!(format!("{}{text}", args.as_str().unwrap_or("")));
                    }
                    _ => entries.push(json!({"index": index, "function": {"arguments": text}})),
                },
            }
        }
        (content, entries)
    }

    fn called(&self, i: usize) -> bool {
        !self.ids[i].is_empty()
    }
}

/// A turn that called tools and stopped on its own ends with `tool_calls`.
fn finish_reason(reason: &'static str, called: bool) -> &'static str {
    match (reason, called) {
        ("stop", true) => "tool_calls",
        _ => reason,
    }
}

/// The response of one chat request, from its engine events: a role chunk per choice, then
/// one chunk per output with text, logprobs or a finish reason, then the usage if asked for;
/// or, not streamed, one body.
pub struct ChatResponse {
    pub head: ChunkHead,
    tools: Option<ResponseTools>,
    reasoning: Option<ResponseReasoning>,
    pub n: u32,
    /// Top logprobs per token, when asked for.
    pub logprobs: Option<u32>,
    /// `return_tokens_as_token_ids`.
    tokens_as_ids: bool,
    /// What each choice starts with (`echo`).
    echo: String,
    pub stream: bool,
    usage: Usage,
    /// `return_token_ids`: the prompt's ids.
    prompt_ids: Option<Vec<u32>>,
}

impl ChatResponse {
    /// A role chunk per choice, then the echo's chunk per choice when there is one.
    pub fn opening(&self) -> Vec<Bytes> {
        let (prompt, _) = self.usage.running(0, 0);
        let no_ids: &[u32] = &[];
        let first = |i: u32, role: Option<&'static str>, content: &str| {
            self.head.frame_first(
                &[ChoiceDelta {
                    index: i,
                    delta: Delta {
                        role,
                        reasoning: None,
                        content: Some(content),
                        tool_calls: vec![],
                    },
                    logprobs: &Value::Null,
                    finish_reason: None,
                    stop_reason: None,
                    token_ids: self.prompt_ids.as_ref().map(|_| no_ids),
                }],
                role.and(self.prompt_ids.as_deref()),
                prompt,
                0,
            )
        };
        let mut frames: Vec<Bytes> = (0..self.n)
            .map(|i| first(i, Some("assistant"), ""))
            .collect();
        if !self.echo.is_empty() {
            frames.extend((0..self.n).map(|i| first(i, None, &self.echo)));
        }
        frames
    }

    fn logprobs_json(&self, tok: &Tokenizer, lps: &[crate::engine_io::PositionLogprobs]) -> Value {
        match self.logprobs {
            Some(top_n) => json!({"content": chat_content(tok, lps, top_n, self.tokens_as_ids)}),
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
        self.usage
            .on_choice_output(out.index as usize, out.num_tokens);
        let ids = self
            .prompt_ids
            .is_some()
            .then_some(out.token_ids.as_slice());
        let has_ids = ids.is_some_and(|ids| !ids.is_empty());
        if out.text.is_empty()
            && out.finish.is_none()
            && (out.logprobs.is_empty() || self.logprobs.is_none())
            && !has_ids
        {
            return None;
        }
        let lp = self.logprobs_json(tok, &out.logprobs);
        let finish = out.finish.as_ref();
        let i = out.index as usize;
        let (reasoning, text) = match &mut self.reasoning {
            None => (String::new(), out.text.clone()),
            Some(r) => r.read(i, &out.text, finish.is_some()),
        };
        let (content, tool_calls, called) = match &mut self.tools {
            // Without parsers a text chunk always says `content`, if empty.
            None if self.reasoning.is_none() => {
                let text = (!text.is_empty() || finish.is_none()).then_some(text);
                (text, vec![], false)
            }
            None => ((!text.is_empty()).then_some(text), vec![], false),
            Some(t) => {
                let (content, calls) = t.read(i, &text, finish.is_some());
                ((!content.is_empty()).then_some(content), calls, t.called(i))
            }
        };
        let said = !reasoning.is_empty() || content.is_some() || !tool_calls.is_empty();
        if !said && finish.is_none() && lp.is_null() && !has_ids {
            return None;
        }
        let c = ChoiceDelta {
            index: out.index,
            delta: Delta {
                role: None,
                reasoning: (!reasoning.is_empty()).then_some(reasoning.as_str()),
                content: content.as_deref(),
                tool_calls,
            },
            logprobs: &lp,
            finish_reason: finish.map(|f| finish_reason(f.reason, called)),
            stop_reason: finish.map(|f| &f.stop_reason),
            token_ids: ids,
        };
        let (prompt, done) = self.usage.running(0, out.index as usize);
        Some(self.head.frame_running(&[c], prompt, done))
    }

    /// The last chunk: the usage, when asked for.
    pub fn closing(&self) -> Option<Bytes> {
        self.head.include_usage.then(|| {
            self.head
                .usage_frame(&self.usage.to_json(self.head.prompt_details))
        })
    }

    /// The whole (not streamed) response.
    pub fn body(&self, tok: &Tokenizer, c: Collected) -> Value {
        let choices = c
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, choice)| self.choice(tok, i, choice))
            .collect();
        let prompt_logprobs = c.prompt_logprobs.into_iter().next().unwrap_or_default();
        self.completion(
            choices,
            c.usage.body(self.head.prompt_details),
            prompt_logprobs,
        )
    }

    /// Choice `i` of the body, from its collected output.
    pub fn choice(&self, tok: &Tokenizer, i: usize, choice: ChoiceOutput) -> ChatChoice {
        // With a reasoning parser the message says `reasoning`, if null; an empty content is
        // null.
        let (reasoning, text) = match &self.reasoning {
            None => (None, choice.text),
            Some(r) => {
                let (reasoning, content) = split_whole(r.plan.start, &choice.text);
                (Some(reasoning.filter(|_| r.plan.include)), content)
            }
        };
        let (content, tool_calls) = match &self.tools {
            None => {
                let content = format!("{}{text}", self.echo);
                let content = (reasoning.is_none() || !content.is_empty()).then_some(content);
                (content, vec![])
            }
            Some(t) => {
                let mut parsed = parse_whole(t.format, &text);
                if !t.parallel {
                    parsed.calls.truncate(1);
                }
                let content = format!("{}{}", self.echo, parsed.content);
                let calls: Vec<Value> = parsed
                    .calls
                    .into_iter()
                    .map(|(name, arguments)| {
                        json!({"id": call_id(t.format), "type": "function",
                               "function": {"name": name, "arguments": arguments}})
                    })
                    .collect();
                let null = !calls.is_empty() || reasoning.is_some();
                let content = (!null || !content.is_empty()).then_some(content);
                (content, calls)
            }
        };
        let called = !tool_calls.is_empty();
        ChatChoice {
            index: i,
            message: AssistantMessage {
                role: "assistant",
                reasoning,
                content,
                tool_calls,
            },
            logprobs: self.logprobs_json(tok, &choice.logprobs),
            finish_reason: finish_reason(choice.finish.reason, called),
            stop_reason: choice.finish.stop_reason,
            token_ids: self.prompt_ids.as_ref().map(|_| choice.token_ids),
        }
    }

    /// The body around its choices, under this response's id, time and model.
    pub fn completion(
        &self,
        choices: Vec<ChatChoice>,
        usage: CompletionUsage,
        prompt_logprobs: Value,
    ) -> Value {
        let body = ChatCompletion {
            id: &self.head.id,
            object: "chat.completion",
            created: self.head.created,
            model: &self.head.model,
            choices,
            usage,
            prompt_logprobs,
            prompt_token_ids: self.prompt_ids.as_deref(),
        };
        serde_json::to_value(body).expect("a chat completion serializes")
    }
}

/// The body of a chat completion that is not streamed.
#[derive(Serialize, ToSchema)]
pub struct ChatCompletion<'a> {
    id: &'a str,
    /// "chat.completion"
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: Vec<ChatChoice>,
    usage: CompletionUsage,
    /// vLLM's, of the prompt when asked for (null otherwise; null for its first token).
    #[schema(value_type = Option<Vec<Option<Object>>>, required = true)]
    prompt_logprobs: Value,
    /// vLLM's, with `return_token_ids`: the prompt's token ids (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<&'a [u32]>,
}

#[derive(Serialize, ToSchema)]
pub struct ChatChoice {
    index: usize,
    message: AssistantMessage,
    /// `{"content": [...]}` when asked for, else null.
    #[schema(value_type = Option<Object>, required = true)]
    logprobs: Value,
    finish_reason: &'static str,
    /// vLLM's: the stop string or token id that ended it, or null.
    stop_reason: Value,
    /// vLLM's, with `return_token_ids`: the generated token ids (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<Vec<u32>>,
}

#[derive(Serialize, ToSchema)]
pub struct AssistantMessage {
    role: &'static str,
    /// With `--reasoning-parser`: the reply's reasoning (null when it has none or
    /// `include_reasoning` is false); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    reasoning: Option<Option<String>>,
    /// Null when the turn is only tool calls.
    content: Option<String>,
    /// `{"id", "type": "function", "function": {"name", "arguments"}}` per call (`arguments`:
    /// JSON text).
    #[schema(value_type = Vec<Object>)]
    tool_calls: Vec<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Collector;
    use crate::context::test_context;
    use crate::engine_io::PromptInfo;
    use crate::request::parse_body;
    use crate::sequence_text::Finish;
    use crate::text_deltas::SeqOutput;

    /// A frame's JSON with its id and timestamp masked.
    fn parsed(frame: &[u8]) -> Value {
        let text = std::str::from_utf8(frame).unwrap();
        let body = text
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        let mut v: Value = serde_json::from_str(body).unwrap();
        v["id"] = json!("ID");
        v["created"] = json!(0);
        v
    }

    fn output(index: u32, text: &str, n: usize, finish: Option<(&'static str, Value)>) -> GenEvent {
        GenEvent::Output(SeqOutput {
            index,
            token_ids: vec![],
            text: text.into(),
            num_tokens: n,
            logprobs: vec![],
            finish: finish.map(|(reason, stop_reason)| Finish {
                reason,
                stop_reason,
            }),
        })
    }

    fn call(ctx: &ApiContext, body: Value) -> (GenRequest, ChatResponse) {
        let req = parse_body::<ChatRequest>(body.to_string().as_bytes()).unwrap();
        let call = ChatCall::new(ctx, req).unwrap();
        assert_eq!(call.prompt, "user: Hello assistant:");
        let ids = ctx.tokenizer.encode(&call.prompt, false).unwrap();
        call.plan(ctx, ids).unwrap()
    }

    #[test]
    fn streamed_chunks() {
        // --enable-prompt-tokens-details: the usage shows the prefix cache's hits.
        let ctx = ApiContext {
            prompt_tokens_details: true,
            ..test_context()
        };
        let body = json!({"messages": [{"role": "user", "content": "Hello"}], "stream": true,
                          "stream_options": {"include_usage": true}, "max_tokens": 5});
        let (gen, mut resp) = call(&ctx, body);
        assert_eq!((gen.prompt_ids.clone(), gen.max_tokens), (vec![5, 1, 6], 5));
        let head =
            json!({"id": "ID", "object": "chat.completion.chunk", "created": 0, "model": "m"});
        let chunk = |choices: Value, usage: Value| {
            let mut c = head.clone();
            c["choices"] = choices;
            c["usage"] = usage;
            c
        };
        let opening: Vec<Value> = resp.opening().iter().map(|f| parsed(f)).collect();
        assert_eq!(
            opening,
            vec![chunk(
                json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]),
                Value::Null
            )]
        );
        let tok = &ctx.tokenizer;
        let info = PromptInfo {
            prompt_tokens: 3,
            cached_tokens: 2,
            ..Default::default()
        };
        assert!(resp.event(tok, 0, &GenEvent::Prompt(info)).is_none());
        let f = resp.event(tok, 0, &output(0, " world", 1, None)).unwrap();
        assert_eq!(
            parsed(&f),
            chunk(
                json!([{"index": 0, "delta": {"content": " world"}, "logprobs": null, "finish_reason": null}]),
                Value::Null
            )
        );
        assert!(resp.event(tok, 0, &output(0, "", 1, None)).is_none()); // nothing to say
        let f = resp
            .event(tok, 0, &output(0, "", 1, Some(("stop", json!("foo")))))
            .unwrap();
        assert_eq!(
            parsed(&f),
            chunk(
                json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop", "stop_reason": "foo"}]),
                Value::Null
            )
        );
        let usage = json!({"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6, "prompt_tokens_details": {"cached_tokens": 2}});
        assert_eq!(parsed(&resp.closing().unwrap()), chunk(json!([]), usage));
    }

    #[test]
    fn token_ids_as_vllm_returns_them() {
        let ctx = test_context();
        let body = json!({"messages": [{"role": "user", "content": "Hello"}], "stream": true,
                          "return_token_ids": true});
        let (gen, mut resp) = call(&ctx, body);
        let tok = &ctx.tokenizer;
        // The role chunk carries the prompt's ids at the top; each output chunk its own ids,
        // even one whose text is held back.
        let opening = parsed(&resp.opening()[0]);
        assert_eq!(opening["prompt_token_ids"], json!(gen.prompt_ids));
        assert_eq!(opening["choices"][0]["token_ids"], json!([]));
        let mut out = |text: &str, ids: Vec<u32>| {
            let GenEvent::Output(mut o) = output(0, text, ids.len(), None) else {
                unreachable!()
            };
            o.token_ids = ids;
            resp.event(tok, 0, &GenEvent::Output(o)).map(|f| parsed(&f))
        };
        let first = out(" world", vec![7, 8]).unwrap();
        assert_eq!(first["choices"][0]["token_ids"], json!([7, 8]));
        assert!(first.get("prompt_token_ids").is_none());
        let held = out("", vec![9]).unwrap();
        assert_eq!(held["choices"][0]["delta"], json!({"content": ""}));
        assert_eq!(held["choices"][0]["token_ids"], json!([9]));
        assert!(out("", vec![]).is_none());
        // Not streamed: the prompt's ids at the top, each choice's ids in it.
        let body = json!({"messages": [{"role": "user", "content": "Hello"}],
                          "return_token_ids": true});
        let (gen, resp) = call(&ctx, body);
        let mut c = Collector::new(1, vec![3]);
        let GenEvent::Output(mut o) = output(0, " world", 2, Some(("stop", Value::Null))) else {
            unreachable!()
        };
        o.token_ids = vec![7, 8];
        c.push(tok, 0, GenEvent::Output(o));
        let v = resp.body(tok, c.finish());
        assert_eq!(v["prompt_token_ids"], json!(gen.prompt_ids));
        assert_eq!(v["choices"][0]["token_ids"], json!([7, 8]));
        // Without it, neither key.
        let (_, resp) = call(
            &ctx,
            json!({"messages": [{"role": "user", "content": "Hello"}]}),
        );
        let v = resp.body(tok, Collector::new(1, vec![3]).finish());
        assert!(v.get("prompt_token_ids").is_none() && v["choices"][0].get("token_ids").is_none());
    }

    #[test]
    fn one_body() {
        let ctx = test_context();
        let body = json!({"messages": [{"role": "user", "content": "Hello"}], "n": 2});
        let (gen, resp) = call(&ctx, body);
        assert_eq!(gen.max_tokens, 29); // what is left of the 32-token window
        let tok = &ctx.tokenizer;
        let mut c = Collector::new(2, vec![3]);
        c.push(tok, 0, output(1, " foo", 2, Some(("length", Value::Null))));
        c.push(tok, 0, output(0, " world", 1, Some(("stop", Value::Null))));
        let mut v = resp.body(tok, c.finish());
        v["id"] = json!("ID");
        v["created"] = json!(0);
        assert_eq!(
            v,
            json!({
                "id": "ID", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": " world", "tool_calls": []},
                     "logprobs": null, "finish_reason": "stop", "stop_reason": null},
                    {"index": 1, "message": {"role": "assistant", "content": " foo", "tool_calls": []},
                     "logprobs": null, "finish_reason": "length", "stop_reason": null},
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6,
                          "prompt_tokens_details": null},
                "prompt_logprobs": null,
            })
        );
    }

    #[test]
    fn tool_calls_stream_and_collect_alike() {
        let mut ctx = test_context();
        ctx.tools = crate::tools::ToolOptions::new(Some("hermes"), true).unwrap();
        let body = json!({"messages": [{"role": "user", "content": "Hello"}], "stream": true,
                          "tools": [{"type": "function", "function": {"name": "f"}},
                                    {"type": "function", "function": {"name": "g"}}]});
        let (_, mut resp) = call(&ctx, body);
        let tok = &ctx.tokenizer;
        let text = "Hi <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\
                    <tool_call>{\"name\": \"g\", \"arguments\": {\"a\": 1}}</tool_call>";
        // A partial tag is held back; then both calls arrive in one chunk.
        let f = resp
            .event(tok, 0, &output(0, "Hi <tool_", 1, None))
            .unwrap();
        assert_eq!(parsed(&f)["choices"][0]["delta"], json!({"content": "Hi "}));
        let rest = &text["Hi <tool_".len()..];
        let f = resp
            .event(tok, 0, &output(0, rest, 1, Some(("stop", Value::Null))))
            .unwrap();
        let mut c = parsed(&f)["choices"][0].clone();
        for e in c["delta"]["tool_calls"].as_array_mut().unwrap() {
            assert!(e["id"].as_str().unwrap().starts_with("chatcmpl-tool-"));
            e["id"] = json!("ID");
        }
        assert_eq!(
            c,
            json!({"index": 0, "logprobs": null, "finish_reason": "tool_calls",
                   "stop_reason": null, "delta": {"tool_calls": [
                {"index": 0, "id": "ID", "type": "function",
                 "function": {"name": "f", "arguments": "{}"}},
                {"index": 1, "id": "ID", "type": "function",
                 "function": {"name": "g", "arguments": "{\"a\": 1}"}}]}})
        );
        // Not streamed: the same calls, content before them, the same finish reason.
        let mut col = Collector::new(1, vec![3]);
        col.push(tok, 0, output(0, text, 2, Some(("stop", Value::Null))));
        let v = resp.body(tok, col.finish());
        let m = &v["choices"][0]["message"];
        assert_eq!(m["content"], "Hi ");
        let calls: Vec<(&str, &str)> = m["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let f = &c["function"];
                (
                    f["name"].as_str().unwrap(),
                    f["arguments"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(calls, vec![("f", "{}"), ("g", "{\"a\": 1}")]);
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn reasoning_streams_and_collects_alike() {
        let mut ctx = test_context();
        ctx.reasoning = Some(crate::reasoning::ReasoningFormat::DeepSeekR1);
        ctx.tools = crate::tools::ToolOptions::new(Some("hermes"), true).unwrap();
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let text =
            "<think>plan</think>\n\nok <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
        let tok = &ctx.tokenizer;
        for include in [true, false] {
            let body = json!({"messages": [{"role": "user", "content": "Hello"}], "stream": true,
                              "tools": tools, "include_reasoning": include});
            let (_, mut resp) = call(&ctx, body);
            // Streamed in three pieces, tags cut across them.
            let mut deltas = vec![];
            for (piece, fin) in [
                ("<think>pl", false),
                ("an</thi", false),
                (&text[16..], true),
            ] {
                let finish = fin.then_some(("stop", Value::Null));
                if let Some(f) = resp.event(tok, 0, &output(0, piece, 1, finish)) {
                    let mut d = parsed(&f)["choices"][0]["delta"].clone();
                    if let Some(calls) = d.get_mut("tool_calls") {
                        calls[0]["id"] = json!("ID");
                    }
                    deltas.push(d);
                }
            }
            let call = json!([{"index": 0, "id": "ID", "type": "function",
                                "function": {"name": "f", "arguments": "{}"}}]);
            let mut want = vec![json!({"content": "\n\nok ", "tool_calls": call})];
            if include {
                want.insert(0, json!({"reasoning": "pl"}));
                want.insert(1, json!({"reasoning": "an"}));
            }
            assert_eq!(deltas, want, "include_reasoning {include}");
            // Not streamed: the same split.
            let mut col = Collector::new(1, vec![3]);
            col.push(tok, 0, output(0, text, 3, Some(("stop", Value::Null))));
            let m = resp.body(tok, col.finish())["choices"][0]["message"].clone();
            let reasoning = if include { json!("plan") } else { Value::Null };
            assert_eq!(
                (&m["reasoning"], &m["content"]),
                (&reasoning, &json!("\n\nok "))
            );
            assert_eq!(m["tool_calls"][0]["function"]["name"], "f");
        }
        // A reply that never closes its span: all reasoning, content null, in both forms.
        let body = json!({"messages": [{"role": "user", "content": "Hello"}], "stream": true});
        let (_, mut resp) = call(&ctx, body);
        let f = resp
            .event(tok, 0, &output(0, "hmm", 1, Some(("length", Value::Null))))
            .unwrap();
        assert_eq!(
            parsed(&f)["choices"][0]["delta"],
            json!({"reasoning": "hmm"})
        );
        let mut col = Collector::new(1, vec![3]);
        col.push(tok, 0, output(0, "hmm", 1, Some(("length", Value::Null))));
        let m = resp.body(tok, col.finish())["choices"][0]["message"].clone();
        assert_eq!(
            m,
            json!({"role": "assistant", "reasoning": "hmm", "content": null, "tool_calls": []})
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let ctx = test_context();
        let err = |body: Value| {
            let req = parse_body::<ChatRequest>(body.to_string().as_bytes()).unwrap();
            ChatCall::new(&ctx, req).err().unwrap().body()["error"].clone()
        };
        let hi = json!([{"role": "user", "content": "Hello"}]);
        assert_eq!(
            err(json!({"messages": hi, "top_logprobs": 2}))["param"],
            "top_logprobs"
        );
        assert_eq!(
            err(json!({"messages": hi, "use_beam_search": true, "stream": true}))["param"],
            "stream"
        );
        assert_eq!(err(json!({"messages": []}))["param"], "messages");
        assert_eq!(err(json!({"model": "x", "messages": hi}))["code"], 404);
    }
}
