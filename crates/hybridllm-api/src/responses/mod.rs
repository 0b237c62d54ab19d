//! OpenAI's Responses API: a request rendered through the chat template like chat completions
//! (`instructions` as the system message, `previous_response_id` continuing a stored
//! conversation, `auto` truncation dropping the oldest turns, function tools read by chat's
//! parsers), its named events or its response object, and the stored responses (GET, DELETE,
//! input items).
pub mod input;
pub mod object;

use crate::aggregate::Collected;
use crate::context::ApiContext;
use crate::engine_io::PositionLogprobs;
use crate::errors::ApiError;
use crate::logprobs::responses_logprobs;
use crate::prompt::TemplateArgs;
use crate::reasoning::{ReasoningReader, ReplyStart};
use crate::response_store::{ResponseStore, StoredResponse};
use crate::sse::write_named_frame;
use crate::text::tokenizer::Tokenizer;
use crate::text_deltas::GenEvent;
use crate::tools::parsers::{ToolEvent, ToolParser};
use crate::tools::{self, ToolPlan, ToolShape};
use crate::usage::{Usage, MAX_REQUEST_ID_LEN};
use crate::validation::{
    closed, fit_max_tokens, priority, Bound, Constrained, GenParams, GenRequest,
};
use bytes::Bytes;
use input::{read_input, ResponsesRequest};
use object::{
    output_text, reasoning_text, status, CallItem, ItemEvent, OutputItem, PartEvent, ReasoningItem,
    ResponseHead, TextDelta, TextDone,
};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::sync::Arc;

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Response with id '{id}' not found."))
}

/// What is stored once the response has finished (`store: true`).
struct ToStore {
    owner: Option<String>,
    input_items: Vec<Value>,
    conversation: Vec<Value>,
}

/// A valid Responses request, its conversation assembled (earlier turns included), before
/// its prompt is tokenized.
pub struct ResponsesCall {
    head: ResponseHead,
    params: GenParams,
    instructions: Option<String>,
    auto_truncate: bool,
    pub stream: bool,
    to_store: ToStore,
    /// The tools as chat templates take them (`{"type": "function", "function": {...}}`).
    template_tools: Option<Value>,
    /// How the reply's function calls are read, with tools.
    tools: Option<ToolPlan>,
    /// Where the reply starts, with a reasoning parser (its span becomes a `reasoning` item).
    reply_start: Option<ReplyStart>,
}

/// Responses' flat function tools in chat's shape, for the template.
fn chat_shaped(tools: &Value) -> Value {
    let list = tools.as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .map(|t| {
            let mut f = t.as_object().cloned().unwrap_or_default();
            f.remove("type");
            json!({"type": "function", "function": f})
        })
        .collect()
}

impl Constrained for ResponsesCall {
    fn gen_params(&mut self) -> &mut GenParams {
        &mut self.params
    }
}

impl ResponsesCall {
    /// `owner`: the API key of the request (None when the server has none), who may read the
    /// stored responses it continues and creates.
    pub fn new(
        ctx: &ApiContext,
        req: ResponsesRequest,
        store: &ResponseStore,
        owner: Option<String>,
    ) -> Result<Self, ApiError> {
        ctx.check_model(&req.model)?;
        ctx.check_task("Responses", false)?;
        req.check_unsupported()?;
        let auto_truncate = req.truncation_auto()?;
        req.check_metadata()?;
        req.check_echoed()?;
        let id = match &req.request_id {
            Some(id) if id.is_empty() || id.len() > MAX_REQUEST_ID_LEN => {
                return Err(ApiError::bad_param(
                    "request_id",
                    format!(
                        "request_id must be 1 to {MAX_REQUEST_ID_LEN} bytes long, got {}.",
                        id.len()
                    ),
                ))
            }
            // Its owner's stored response must not be replaced (nor its id's owner told).
            Some(id) if store.contains(id) => {
                return Err(ApiError::bad_param(
                    "request_id",
                    "request_id names a stored response: choose another.",
                ))
            }
            id => id.clone(),
        };
        let top_logprobs = req.output_logprobs()?;
        let background = req.check_background()?;
        if background && !store.enabled() {
            // vLLM's refusal when its store is off, for this server's switch.
            return Err(ApiError::bad_param(
                "background",
                "This server keeps no responses (--responses-store-size 0) and therefore does \
                 not support the background mode.",
            ));
        }
        let sampling = req.sampling(ctx.max_tokens_limit)?;
        let mut params = sampling.validate(top_logprobs.map(i64::from), ctx.vocab_size)?;
        params.constrain(req.text_constraint()?)?;
        let mut tool_plan = tools::plan_in(
            ToolShape::Flat,
            &ctx.tools,
            req.tools.as_ref(),
            req.tool_choice.as_ref(),
            req.parallel_tool_calls,
        )?;
        if let Some(plan) = &mut tool_plan {
            params.apply_tools(plan, Some("text.format"), req.skip_special_tokens)?;
        }
        params.priority = priority(req.priority, ctx.priority_scheduling)?;
        let previous = match &req.previous_response_id {
            Some(id) => Some(store.get(id, owner.as_deref()).ok_or_else(|| {
                ApiError::NotFound(format!("Previous response with id '{id}' not found."))
            })?),
            None => None,
        };
        let input = read_input(&req.input)?;
        let template_tools = req
            .tools
            .as_ref()
            .filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
            .map(chat_shaped);
        let mut conversation = previous.map_or_else(Vec::new, |p| p.conversation.clone());
        conversation.extend(input.messages);
        let mut head = ResponseHead::new(&req, ctx.model_name(), id);
        head.top_logprobs = top_logprobs;
        head.background = background;
        ResponsesCall {
            head,
            params,
            instructions: req.instructions.clone(),
            auto_truncate,
            stream: req.stream.unwrap_or(false),
            to_store: ToStore {
                owner,
                input_items: input.items,
                conversation,
            },
            template_tools,
            tools: tool_plan,
            reply_start: None,
        }
        .read_reply_start(ctx)
    }

    /// With a reasoning parser: where the reply starts, from the end of the prompt (the same
    /// whichever oldest turns truncation drops), and any constraint applied after the span.
    fn read_reply_start(mut self, ctx: &ApiContext) -> Result<Self, ApiError> {
        if let Some(format) = ctx.reasoning {
            let start = format.start(&self.prompt(ctx, 0)?);
            self.reply_start = Some(start);
            if let Some(c) = &mut self.params.constraint {
                c.after_reasoning = Some(start);
            }
        }
        Ok(self)
    }

    /// The prompt of `instructions` and the conversation without its `first` oldest turns.
    pub fn prompt(&self, ctx: &ApiContext, first: usize) -> Result<String, ApiError> {
        let conversation = &self.to_store.conversation;
        let mut messages = Vec::with_capacity(conversation.len() + 1 - first);
        if let Some(s) = &self.instructions {
            messages.push(json!({"role": "system", "content": s}));
        }
        messages.extend_from_slice(&conversation[first..]);
        let args = TemplateArgs {
            tools: self.template_tools.clone(),
            ..TemplateArgs::default()
        };
        ctx.render_prompt(&messages, &args, true)
    }

    /// The max_tokens to send when that prompt (of `prompt_len` tokens) fits; None when it
    /// does not but `auto` truncation may drop another turn (then try `first + 1`).
    pub fn fit(
        &self,
        ctx: &ApiContext,
        first: usize,
        prompt_len: usize,
    ) -> Result<Option<u32>, ApiError> {
        let cap = ctx.max_tokens_limit;
        match fit_max_tokens(prompt_len, self.params.max_tokens, ctx.max_model_len, cap) {
            Ok(m) => Ok(Some(m)),
            Err(e) if !self.auto_truncate || first + 1 >= self.to_store.conversation.len() => {
                Err(e)
            }
            Err(_) => Ok(None),
        }
    }

    /// Whether it runs in the background (`background: true`): the shell answers with
    /// `ResponsesResponse::queued` and runs it as a request not streamed.
    pub fn background(&self) -> bool {
        self.head.background
    }

    /// The engine request and its response (compiling a constraint still pending).
    pub fn plan(
        mut self,
        ctx: &ApiContext,
        ids: Vec<u32>,
        max_tokens: u32,
    ) -> Result<(GenRequest, ResponsesResponse), ApiError> {
        self.params.compile_constraint(ctx)?;
        let resp = ResponsesResponse {
            usage: Usage::new(vec![ids.len()]),
            out: Events::new(),
            text: String::new(),
            message_at: None,
            reasoning: self.reply_start.map(|start| OutputReasoning {
                reader: ReasoningReader::new(start),
                id: format!("rs_{}", uuid::Uuid::new_v4().simple()),
                text: String::new(),
                at: None,
            }),
            tools: self.tools.map(|plan| OutputTools {
                parallel: plan.parallel,
                parser: plan.format.parser(),
                calls: vec![],
            }),
            finish: "abort",
            stream: self.stream,
            to_store: Some(self.to_store),
            logprobs: self.head.top_logprobs.map(|top| OutputLogprobs {
                top,
                tokenizer: ctx.tokenizer.clone(),
                all: vec![],
                pending: vec![],
            }),
            head: self.head,
        };
        let gen = GenRequest {
            request_id: resp.head.engine_id.clone(),
            prompt_ids: ids,
            params: self.params,
            max_tokens,
        };
        Ok((gen, resp))
    }
}

/// The events of one stream, numbered in order and written into one buffer until `take`:
/// the events produced together (the four that open the stream, the four that close it, and
/// whatever deltas are ready at once) leave as one body chunk. The same bytes, fewer chunks
/// for the server to write and the client to read.
struct Events {
    next: u64,
    buf: Vec<u8>,
}

impl Events {
    fn new() -> Self {
        Events {
            next: 0,
            buf: Vec::with_capacity(4096),
        }
    }

    fn seq(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }

    /// The event `kind`, built by `event` from its sequence number.
    fn push<T: serde::Serialize>(&mut self, kind: &str, event: impl FnOnce(u64) -> T) {
        let n = self.seq();
        write_named_frame(&mut self.buf, kind, &event(n));
    }

    /// An event carrying the whole response object (a `Value` or the object already
    /// serialized), from a borrow.
    fn with_response<R: serde::Serialize + ?Sized>(&mut self, kind: &'static str, response: &R) {
        #[derive(serde::Serialize)]
        struct Event<'a, R: ?Sized> {
            #[serde(rename = "type")]
            kind: &'static str,
            sequence_number: u64,
            response: &'a R,
        }
        self.push(kind, |sequence_number| Event {
            kind,
            sequence_number,
            response,
        });
    }

    /// The event `kind` with `body`'s fields, its type and its number.
    fn event(&mut self, kind: &str, mut body: Value) {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.seq());
        write_named_frame(&mut self.buf, kind, &body);
    }

    /// What was written since the last `take`, as one chunk.
    fn take(&mut self) -> Bytes {
        Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(512)))
    }
}

/// An output item to close, in `closing`.
enum Closing<'a> {
    Reasoning(&'a OutputReasoning),
    Message,
    Call(&'a Call),
}

/// A function call read from the reply.
struct Call {
    /// The item's id (`fc_...`) and the call's (`call_...`), which a tool's output answers.
    id: String,
    call_id: String,
    name: String,
    arguments: String,
    output_index: u32,
}

impl Call {
    fn item(&self, status: &'static str) -> OutputItem<'_> {
        OutputItem::Call(CallItem {
            kind: "function_call",
            id: &self.id,
            call_id: &self.call_id,
            name: &self.name,
            arguments: if status == "in_progress" {
                ""
            } else {
                &self.arguments
            },
            status,
        })
    }
}

/// The reasoning span of a reply, with a reasoning parser: its reader and its item.
struct OutputReasoning {
    reader: ReasoningReader,
    id: String,
    text: String,
    /// The item's place in `output`, once the reply has entered its span.
    at: Option<u32>,
}

impl OutputReasoning {
    /// The item and its place in `output`, once the reply has entered its span.
    fn placed(&self) -> Option<(&Self, u32)> {
        Some((self, self.at?))
    }

    fn item(&self, status: &'static str) -> OutputItem<'_> {
        OutputItem::Reasoning(ReasoningItem {
            kind: "reasoning",
            id: &self.id,
            summary: [],
            content: (status != "in_progress").then(|| reasoning_text(&self.text)),
            status,
        })
    }
}

/// The message's token logprobs, when asked for (`include`).
struct OutputLogprobs {
    top: u32,
    tokenizer: Arc<Tokenizer>,
    /// Every output token's, for the response object.
    all: Vec<PositionLogprobs>,
    /// The current engine output's, in the streamed shape, for its first text delta (as vLLM
    /// gives each output's logprobs to the text delta it makes; tokens that make reasoning
    /// or calls have none in the stream).
    pending: Vec<Value>,
}

/// The function calls of a response with tools: chat's parser for the format, and the calls
/// read so far.
struct OutputTools {
    /// Without it, calls after the first are dropped.
    parallel: bool,
    parser: Box<dyn ToolParser>,
    calls: Vec<Call>,
}

/// The response of one Responses request, from its engine events: streamed, the named events
/// in OpenAI's order, each with the next `sequence_number` (written into a buffer that the
/// shell takes before it waits for more); or, not streamed, the response object.
pub struct ResponsesResponse {
    head: ResponseHead,
    usage: Usage,
    out: Events,
    /// The message's text.
    text: String,
    /// The message item's place in `output`, once opened: at once without tools or a
    /// reasoning parser, else at its first text (a reply that is only calls has none).
    message_at: Option<u32>,
    reasoning: Option<OutputReasoning>,
    tools: Option<OutputTools>,
    finish: &'static str,
    pub stream: bool,
    to_store: Option<ToStore>,
    logprobs: Option<OutputLogprobs>,
}

impl ResponsesResponse {
    /// The response's id.
    pub fn id(&self) -> &str {
        &self.head.id
    }

    /// The events that open the stream (and, without tools or a reasoning parser, its message
    /// item).
    pub fn opening(&mut self) {
        let pending = self.head.object("in_progress", &[], &Value::Null);
        self.out.with_response("response.created", &*pending);
        self.out.with_response("response.in_progress", &*pending);
        drop(pending);
        if self.tools.is_none() && self.reasoning.is_none() {
            self.open_message();
        }
    }

    /// How many output items are open: the next one's index.
    fn opened(&self) -> u32 {
        u32::from(
            self.reasoning
                .as_ref()
                .and_then(OutputReasoning::placed)
                .is_some(),
        ) + u32::from(self.message_at.is_some())
            + self.tools.as_ref().map_or(0, |t| t.calls.len() as u32)
    }

    /// Reasoning text: its item opened when the reply enters its span, the text appended and
    /// its delta event written.
    fn reasoning_text(&mut self, delta: &str) {
        let at = self.opened();
        let Some(r) = &mut self.reasoning else { return };
        let at = match r.at {
            Some(at) => at,
            None => {
                r.at = Some(at);
                let r = &*r;
                self.out
                    .push("response.output_item.added", |sequence_number| ItemEvent {
                        output_index: at,
                        item: r.item("in_progress"),
                        kind: "response.output_item.added",
                        sequence_number,
                    });
                self.out
                    .push("response.content_part.added", |sequence_number| PartEvent {
                        item_id: &r.id,
                        output_index: at,
                        content_index: 0,
                        part: reasoning_text(""),
                        kind: "response.content_part.added",
                        sequence_number,
                    });
                at
            }
        };
        if delta.is_empty() {
            return;
        }
        r.text.push_str(delta);
        self.out.event(
            "response.reasoning_text.delta",
            json!({"item_id": r.id, "output_index": at, "content_index": 0, "delta": delta}),
        );
    }

    /// A piece of the reply (and its end, when `fin`): its reasoning to the reasoning item,
    /// the rest read for calls.
    fn read_text(&mut self, text: &str, fin: bool) {
        let content = match &mut self.reasoning {
            None => std::borrow::Cow::Borrowed(text),
            Some(r) => {
                let mut s = r.reader.push(text);
                if fin {
                    let end = r.reader.finish();
                    s.reasoning.push_str(&end.reasoning);
                    s.content.push_str(&end.content);
                }
                if r.reader.reasoned() {
                    self.reasoning_text(&s.reasoning);
                }
                std::borrow::Cow::Owned(s.content)
            }
        };
        if !content.is_empty() || (fin && self.tools.is_some()) {
            self.read_calls(&content, fin);
        }
    }

    /// The message item's output index (its added events written when it opens now).
    fn open_message(&mut self) -> u32 {
        if let Some(at) = self.message_at {
            return at;
        }
        let at = self.opened();
        self.message_at = Some(at);
        let head = &self.head;
        self.out
            .push("response.output_item.added", |sequence_number| ItemEvent {
                output_index: at,
                item: OutputItem::Message(head.item("in_progress", None)),
                kind: "response.output_item.added",
                sequence_number,
            });
        self.out
            .push("response.content_part.added", |sequence_number| PartEvent {
                item_id: &head.item_id,
                output_index: at,
                content_index: 0,
                part: output_text(""),
                kind: "response.content_part.added",
                sequence_number,
            });
        at
    }

    /// Message text: appended, and its delta event written.
    fn message_text(&mut self, delta: &str) {
        let at = self.open_message();
        self.text.push_str(delta);
        let item_id = &self.head.item_id;
        let logprobs = self
            .logprobs
            .as_mut()
            .map(|l| std::mem::take(&mut l.pending))
            .unwrap_or_default();
        self.out
            .push("response.output_text.delta", |sequence_number| TextDelta {
                kind: "response.output_text.delta",
                sequence_number,
                item_id,
                output_index: at,
                content_index: 0,
                delta,
                logprobs: &logprobs,
            });
    }

    /// A piece of the reply (and its end, when `fin`) read for calls: content goes to the
    /// message, calls to their own items, each event written as it is known.
    fn read_calls(&mut self, text: &str, fin: bool) {
        let Some(t) = &mut self.tools else {
            return self.message_text(text);
        };
        let mut events = t.parser.push(text);
        if fin {
            events.extend(t.parser.finish());
        }
        for e in events {
            let next = self.opened(); // a new call's index
            let Some(t) = &mut self.tools else { return };
            match e {
                ToolEvent::Content(c) if !c.is_empty() => self.message_text(&c),
                ToolEvent::Content(_) => {}
                ToolEvent::Start { index, .. } | ToolEvent::Args { index, .. }
                    if index > 0 && !t.parallel => {}
                ToolEvent::Start { name, .. } => {
                    let hex = || uuid::Uuid::new_v4().simple().to_string();
                    let call = Call {
                        id: format!("fc_{}", hex()),
                        call_id: format!("call_{}", hex()),
                        name,
                        arguments: String::new(),
                        output_index: next,
                    };
                    self.out
                        .push("response.output_item.added", |sequence_number| ItemEvent {
                            output_index: call.output_index,
                            item: call.item("in_progress"),
                            kind: "response.output_item.added",
                            sequence_number,
                        });
                    t.calls.push(call);
                }
                ToolEvent::Args { index, text } => {
                    let Some(call) = t.calls.get_mut(index) else {
                        continue;
                    };
                    call.arguments.push_str(&text);
                    self.out.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": call.id, "output_index": call.output_index,
                               "delta": text}),
                    );
                }
            }
        }
    }

    /// One engine event: its text's events.
    pub fn event(&mut self, p: usize, ev: &GenEvent) {
        let o = match ev {
            GenEvent::Prompt(info) => return self.usage.on_prompt(p, info),
            GenEvent::Output(o) => o,
        };
        self.usage.on_output(o.num_tokens);
        if let Some(f) = &o.finish {
            self.finish = f.reason;
        }
        if let Some(l) = &mut self.logprobs {
            l.pending = responses_logprobs(&l.tokenizer, &o.logprobs, l.top, false);
            l.all.extend(o.logprobs.iter().cloned());
        }
        if !o.text.is_empty() || o.finish.is_some() {
            self.read_text(&o.text, o.finish.is_some());
        }
        if let Some(l) = &mut self.logprobs {
            l.pending.clear();
        }
    }

    /// The events written since the last take (None: none).
    pub fn take(&mut self) -> Option<Bytes> {
        (!self.out.buf.is_empty()).then(|| self.out.take())
    }

    /// The stream's end when generation failed: an `error` event.
    pub fn error(&mut self, e: &ApiError) -> Bytes {
        let param = e.body()["error"]["param"].clone();
        self.out.event(
            "error",
            json!({"code": e.error_type(), "message": e.to_string(), "param": param}),
        );
        self.out.take()
    }

    /// Whether the reply has a message item: text, or no other item (a reply with no text,
    /// no call and no reasoning has an empty message).
    fn has_message(&self) -> bool {
        self.message_at.is_some() || self.opened() == 0
    }

    /// The message's logprobs in the response object (vLLM's full shape), when asked for.
    fn message_logprobs(&self) -> Option<Vec<Value>> {
        let l = self.logprobs.as_ref()?;
        Some(responses_logprobs(&l.tokenizer, &l.all, l.top, true))
    }

    /// The output items, in their order (`logprobs`: the message's, when asked for).
    fn output<'a>(
        &'a self,
        st: &'static str,
        logprobs: Option<&'a [Value]>,
    ) -> Vec<OutputItem<'a>> {
        let calls = self.tools.as_ref().map_or(&[][..], |t| &t.calls[..]);
        let mut items: Vec<(u32, OutputItem<'_>)> = calls
            .iter()
            .map(|c| (c.output_index, c.item("completed")))
            .collect();
        if let Some((r, at)) = self.reasoning.as_ref().and_then(OutputReasoning::placed) {
            items.push((at, r.item(st)));
        }
        if self.has_message() {
            let at = self.message_at.unwrap_or(0);
            items.push((
                at,
                OutputItem::Message(self.head.item_with(st, Some(&self.text), logprobs)),
            ));
        }
        items.sort_by_key(|(at, _)| *at);
        items.into_iter().map(|(_, item)| item).collect()
    }

    /// The events that close the stream, item by item in output order, then the response
    /// (stored if asked for).
    pub fn closing(&mut self, store: &ResponseStore) -> Bytes {
        if self.has_message() {
            self.open_message();
        }
        let st = status(self.finish);
        let (head, text) = (&self.head, self.text.as_str());
        let mut order: Vec<(u32, Closing<'_>)> = self
            .message_at
            .map(|at| (at, Closing::Message))
            .into_iter()
            .collect();
        if let Some((r, at)) = self.reasoning.as_ref().and_then(OutputReasoning::placed) {
            order.push((at, Closing::Reasoning(r)));
        }
        if let Some(t) = &self.tools {
            order.extend(t.calls.iter().map(|c| (c.output_index, Closing::Call(c))));
        }
        order.sort_by_key(|(at, _)| *at);
        for (at, item) in order {
            let c = match item {
                Closing::Call(c) => c,
                Closing::Reasoning(r) => {
                    self.out.event(
                        "response.reasoning_text.done",
                        json!({"item_id": r.id, "output_index": at, "content_index": 0,
                               "text": r.text}),
                    );
                    self.out
                        .push("response.content_part.done", |sequence_number| PartEvent {
                            item_id: &r.id,
                            output_index: at,
                            content_index: 0,
                            part: reasoning_text(&r.text),
                            kind: "response.content_part.done",
                            sequence_number,
                        });
                    self.out
                        .push("response.output_item.done", |sequence_number| ItemEvent {
                            output_index: at,
                            item: r.item(st),
                            kind: "response.output_item.done",
                            sequence_number,
                        });
                    continue;
                }
                Closing::Message => {
                    self.out
                        .push("response.output_text.done", |sequence_number| TextDone {
                            item_id: &head.item_id,
                            output_index: at,
                            content_index: 0,
                            text,
                            logprobs: [],
                            kind: "response.output_text.done",
                            sequence_number,
                        });
                    self.out
                        .push("response.content_part.done", |sequence_number| PartEvent {
                            item_id: &head.item_id,
                            output_index: at,
                            content_index: 0,
                            part: output_text(text),
                            kind: "response.content_part.done",
                            sequence_number,
                        });
                    self.out
                        .push("response.output_item.done", |sequence_number| ItemEvent {
                            output_index: at,
                            item: OutputItem::Message(head.item(st, Some(text))),
                            kind: "response.output_item.done",
                            sequence_number,
                        });
                    continue;
                }
            };
            self.out.event(
                "response.function_call_arguments.done",
                json!({"item_id": c.id, "output_index": at, "name": c.name,
                       "arguments": c.arguments}),
            );
            self.out
                .push("response.output_item.done", |sequence_number| ItemEvent {
                    output_index: at,
                    item: c.item("completed"),
                    kind: "response.output_item.done",
                    sequence_number,
                });
        }
        let lps = self.message_logprobs();
        let done = self.head.object(
            st,
            &self.output(st, lps.as_deref()),
            &self.usage.to_responses_json(),
        );
        let last = if st == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.out.with_response(last, &*done);
        self.store(store, done, st);
        self.out.take()
    }

    /// The response object of a request that is not streamed (stored if asked for).
    pub fn body(&mut self, c: Collected, store: &ResponseStore) -> String {
        let choice = &c.choices[0];
        // The stream's reading, its events dropped.
        self.read_text(&choice.text, true);
        self.out.buf.clear();
        if let Some(l) = &mut self.logprobs {
            l.all = choice.logprobs.clone();
        }
        let st = status(choice.finish.reason);
        let lps = self.message_logprobs();
        let obj = self.head.object(
            st,
            &self.output(st, lps.as_deref()),
            &c.usage.to_responses_json(),
        );
        let body = obj.get().to_owned();
        self.store(store, obj, st);
        body
    }

    fn store(&mut self, store: &ResponseStore, response: Box<RawValue>, st: &'static str) {
        let Some(s) = self.to_store.take().filter(|_| self.head.store) else {
            return;
        };
        let mut conversation = s.conversation;
        let calls = self.tools.as_ref().map_or(&[][..], |t| &t.calls[..]);
        let mut reply = json!({"role": "assistant", "content": self.text});
        if !calls.is_empty() {
            reply["tool_calls"] = calls
                .iter()
                .map(|c| {
                    json!({"id": c.call_id, "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
        }
        conversation.push(reply);
        let r = StoredResponse {
            owner: s.owner,
            response,
            input_items: s.input_items,
            conversation,
            background: self.head.background,
            status: st,
        };
        match self.head.background {
            // A background response cancelled meanwhile stays cancelled (as vLLM).
            true => store.put_unless_cancelled(self.head.id.clone(), r),
            false => store.put(self.head.id.clone(), r),
        }
    }

    /// A background response's answer: its object `queued` (no output, no usage), stored at
    /// once so that `GET /v1/responses/{id}` finds it while the shell's task runs it (as a
    /// request not streamed: `started`, then `body`, or `failed`).
    pub fn queued(&mut self, store: &ResponseStore) -> String {
        let obj = self.head.object("queued", &[], &Value::Null);
        let body = obj.get().to_owned();
        if let Some(s) = &self.to_store {
            store.put(
                self.head.id.clone(),
                StoredResponse {
                    owner: s.owner.clone(),
                    response: obj,
                    input_items: s.input_items.clone(),
                    conversation: s.conversation.clone(),
                    background: true,
                    status: "queued",
                },
            );
        }
        body
    }

    /// A background response's engine request has started: `in_progress` (unless cancelled).
    pub fn started(&self, store: &ResponseStore) {
        self.restatus(store, "in_progress", None);
    }

    /// A background response's engine request failed: `failed`, with the error.
    pub fn failed(&self, store: &ResponseStore, e: &ApiError) {
        let error = json!({"code": e.error_type(), "message": e.to_string()});
        self.restatus(store, "failed", Some(error));
    }

    /// Whether the background response was cancelled (the shell then stops its request).
    pub fn cancelled(&self, store: &ResponseStore) -> bool {
        let owner = self.to_store.as_ref().and_then(|s| s.owner.as_deref());
        store
            .get(&self.head.id, owner)
            .is_some_and(|r| r.status == "cancelled")
    }

    fn restatus(&self, store: &ResponseStore, to: &'static str, error: Option<Value>) {
        let owner = self.to_store.as_ref().and_then(|s| s.owner.as_deref());
        store.update(&self.head.id, owner, |r| {
            let new = matches!(r.status, "queued" | "in_progress").then(|| restatus(r, to, error));
            Ok::<_, ()>((new, ()))
        });
    }
}

/// The stored response with another `status` (and `error`, when given).
fn restatus(r: &StoredResponse, to: &'static str, error: Option<Value>) -> StoredResponse {
    let mut obj: Value = serde_json::from_str(r.response.get()).unwrap_or_default();
    obj["status"] = json!(to);
    if let Some(e) = error {
        obj["error"] = e;
    }
    StoredResponse {
        owner: r.owner.clone(),
        response: serde_json::value::to_raw_value(&obj).expect("a JSON object serializes"),
        input_items: r.input_items.clone(),
        conversation: r.conversation.clone(),
        background: r.background,
        status: to,
    }
}

/// POST /v1/responses/{id}/cancel: a background response still queued or in progress
/// becomes `cancelled` (the shell then stops its task); any other is vLLM's 400.
pub fn cancel(store: &ResponseStore, id: &str, owner: Option<&str>) -> Result<String, ApiError> {
    store
        .update(id, owner, |r| {
            if !r.background || !matches!(r.status, "queued" | "in_progress") {
                return Err(ApiError::bad_param(
                    "response_id",
                    "Cannot cancel a synchronous response.",
                ));
            }
            let new = restatus(r, "cancelled", None);
            let body = new.response.get().to_owned();
            Ok((Some(new), body))
        })
        .unwrap_or_else(|| Err(not_found(id)))
}

/// GET /v1/responses/{id}'s query: vLLM's `stream=true` replays a background stream's
/// events, and background responses are not streamed here.
pub fn check_retrieve_query(stream: Option<&str>) -> Result<(), ApiError> {
    match stream {
        None | Some("false") => Ok(()),
        Some(_) => Err(ApiError::bad_param(
            "stream",
            "stored responses are retrieved whole: background responses are not streamed (stream must be false).",
        )),
    }
}

/// GET /v1/responses/{id}: the stored object as it was returned (a background response's
/// as it stands).
pub fn retrieve(store: &ResponseStore, id: &str, owner: Option<&str>) -> Result<String, ApiError> {
    let r = store.get(id, owner).ok_or_else(|| not_found(id))?;
    Ok(r.response.get().to_owned())
}

/// DELETE /v1/responses/{id}.
pub fn delete(store: &ResponseStore, id: &str, owner: Option<&str>) -> Result<Value, ApiError> {
    if !store.remove(id, owner) {
        return Err(not_found(id));
    }
    Ok(json!({"id": id, "object": "response", "deleted": true}))
}

/// How many input items one page may list.
pub const INPUT_ITEMS_LIMIT: Bound = closed(1.0, 100.0);

/// A page of the response's own input items: `order` (desc by default, as OpenAI), `limit`
/// (1 to 100, default 20), `after` (an item id), from the query string's values.
pub fn input_items(
    store: &ResponseStore,
    id: &str,
    owner: Option<&str>,
    order: Option<&str>,
    limit: Option<&str>,
    after: Option<&str>,
) -> Result<Value, ApiError> {
    let r = store.get(id, owner).ok_or_else(|| not_found(id))?;
    let mut items: Vec<&Value> = r.input_items.iter().collect();
    match order {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(o) => {
            return Err(ApiError::bad_param(
                "order",
                format!("order must be \"asc\" or \"desc\", got {}.", json!(o)),
            ))
        }
    }
    let limit = match limit {
        None => 20,
        Some(l) => l
            .parse::<i64>()
            .ok()
            .filter(|&n| INPUT_ITEMS_LIMIT.contains_int(n))
            .ok_or_else(|| {
                let b = INPUT_ITEMS_LIMIT;
                ApiError::bad_param(
                    "limit",
                    format!(
                        "limit must be an integer in [{}, {}], got {}.",
                        b.lo,
                        b.hi,
                        json!(l)
                    ),
                )
            })? as usize,
    };
    if let Some(after) = after {
        let at = items.iter().position(|i| i["id"] == after).ok_or_else(|| {
            ApiError::bad_param(
                "after",
                format!(
                    "after: no input item with id {} in this response.",
                    json!(after)
                ),
            )
        })?;
        items.drain(..=at);
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    Ok(json!({
        "object": "list",
        "data": items,
        "first_id": items.first().map(|i| &i["id"]),
        "last_id": items.last().map(|i| &i["id"]),
        "has_more": has_more,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Collector;
    use crate::context::test_context;
    use crate::request::parse_body;
    use crate::sequence_text::Finish;
    use crate::text_deltas::SeqOutput;

    fn output(text: &str, finish: bool) -> GenEvent {
        GenEvent::Output(SeqOutput {
            index: 0,
            token_ids: vec![],
            text: text.into(),
            num_tokens: 1,
            logprobs: vec![],
            finish: finish.then(|| Finish {
                reason: "stop",
                stop_reason: Value::Null,
            }),
        })
    }

    /// The named events of a stream's bytes: (name, data).
    fn events(b: &[u8]) -> Vec<(String, Value)> {
        std::str::from_utf8(b)
            .unwrap()
            .split("\n\n")
            .filter(|f| !f.is_empty())
            .map(|f| {
                let (name, data) = f.split_once('\n').unwrap();
                let name = name.strip_prefix("event: ").unwrap().to_string();
                (
                    name,
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn background_statuses_and_cancel() {
        let ctx = test_context();
        let store = ResponseStore::new(4);
        let new = |body: Value| {
            let req = parse_body::<ResponsesRequest>(body.to_string().as_bytes()).unwrap();
            let call = ResponsesCall::new(&ctx, req, &store, None).unwrap();
            call.plan(&ctx, vec![1], 8).unwrap().1
        };
        let status = |id: &str| {
            let v: Value = serde_json::from_str(&retrieve(&store, id, None).unwrap()).unwrap();
            v["status"].as_str().unwrap().to_string()
        };
        // Runs to its end: queued, in_progress, completed; then it cannot be cancelled.
        let mut resp = new(json!({"input": "Hello", "background": true}));
        let id = resp.id().to_string();
        let q: Value = serde_json::from_str(&resp.queued(&store)).unwrap();
        assert_eq!(
            (&q["status"], &q["background"], &q["output"], &q["usage"]),
            (&json!("queued"), &json!(true), &json!([]), &Value::Null)
        );
        assert_eq!(status(&id), "queued");
        resp.started(&store);
        assert_eq!(status(&id), "in_progress");
        let mut col = Collector::new(1, vec![1]);
        col.push(&ctx.tokenizer, 0, output("Hi", true));
        resp.body(col.finish(), &store);
        assert_eq!(status(&id), "completed");
        let sync = |e: ApiError| (e.to_string(), e.body()["error"]["param"].clone());
        let cannot = (
            "Cannot cancel a synchronous response.".to_string(),
            json!("response_id"),
        );
        assert_eq!(sync(cancel(&store, &id, None).unwrap_err()), cannot);
        // Cancelled while it runs: stays cancelled when it ends.
        let mut resp = new(json!({"input": "Hello", "background": true}));
        let id = resp.id().to_string();
        resp.queued(&store);
        resp.started(&store);
        let c: Value = serde_json::from_str(&cancel(&store, &id, None).unwrap()).unwrap();
        assert_eq!((&c["status"], &c["id"]), (&json!("cancelled"), &json!(id)));
        assert!(resp.cancelled(&store));
        let mut col = Collector::new(1, vec![1]);
        col.push(&ctx.tokenizer, 0, output("Hi", true));
        resp.body(col.finish(), &store);
        assert_eq!(status(&id), "cancelled");
        assert_eq!(sync(cancel(&store, &id, None).unwrap_err()), cannot);
        // A foreground response, and an unknown id.
        let mut resp = new(json!({"input": "Hello"}));
        let col = {
            let mut c = Collector::new(1, vec![1]);
            c.push(&ctx.tokenizer, 0, output("Hi", true));
            c.finish()
        };
        resp.body(col, &store);
        assert_eq!(sync(cancel(&store, resp.id(), None).unwrap_err()), cannot);
        assert!(matches!(
            cancel(&store, "resp_x", None),
            Err(ApiError::NotFound(_))
        ));
        // A store that keeps nothing: no background mode.
        let none = ResponseStore::new(0);
        let req = parse_body::<ResponsesRequest>(
            json!({"input": "Hello", "background": true})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        let e = ResponsesCall::new(&ctx, req, &none, None).err().unwrap();
        assert_eq!(e.body()["error"]["param"], "background");
        // A failure: failed, with its error.
        let mut resp = new(json!({"input": "Hello", "background": true}));
        resp.queued(&store);
        resp.failed(&store, &ApiError::Internal("boom".into()));
        let v: Value = serde_json::from_str(&retrieve(&store, resp.id(), None).unwrap()).unwrap();
        assert_eq!(v["status"], "failed");
        assert_eq!(v["error"]["message"], "boom");
    }

    #[test]
    fn output_logprobs_in_the_object_and_the_deltas() {
        use crate::engine_io::{PositionLogprobs, TokenLogprob};
        let ctx = test_context();
        let store = ResponseStore::new(0);
        let lp = |id: u32, x: f32| TokenLogprob {
            token_id: id,
            logprob: x,
            rank: 1,
        };
        let pos = |id: u32| PositionLogprobs {
            token: Some(lp(id, -0.5)),
            top: vec![lp(7, -0.25), lp(id, -0.5), lp(9, -2.0)],
        };
        let body = json!({"input": "Hello", "stream": true, "include": ["message.output_text.logprobs"],
                          "top_logprobs": 2});
        let req = parse_body::<ResponsesRequest>(body.to_string().as_bytes()).unwrap();
        let call = ResponsesCall::new(&ctx, req, &store, None).unwrap();
        let (gen, mut resp) = call.plan(&ctx, vec![1], 8).unwrap();
        assert_eq!(gen.params.logprobs, Some(2));
        resp.opening();
        let mut ev = output("Hi", true);
        if let GenEvent::Output(o) = &mut ev {
            o.logprobs = vec![pos(3)];
        }
        resp.event(0, &ev);
        let mut bytes = resp.take().unwrap().to_vec();
        bytes.extend_from_slice(&resp.closing(&store));
        let evs = events(&bytes);
        let t = |id: u32| ctx.tokenizer.token_text(id);
        let delta = evs
            .iter()
            .find(|(n, _)| n == "response.output_text.delta")
            .unwrap();
        assert_eq!(
            delta.1["logprobs"],
            json!([{"token": t(3), "logprob": -0.5, "top_logprobs": [
                {"token": t(3), "logprob": -0.5}, {"token": t(7), "logprob": -0.25}]}])
        );
        let last = &evs.last().unwrap().1["response"];
        assert_eq!(last["top_logprobs"], 2);
        let b = |id: u32| json!(t(id).as_bytes());
        assert_eq!(
            last["output"][0]["content"][0]["logprobs"],
            json!([{"token": t(3), "logprob": -0.5, "bytes": b(3), "top_logprobs": [
                {"token": t(3), "logprob": -0.5, "bytes": b(3)},
                {"token": t(7), "logprob": -0.25, "bytes": b(7)}]}])
        );
    }

    #[test]
    fn function_calls_stream_and_collect_alike() {
        let mut ctx = test_context();
        ctx.tools = crate::tools::ToolOptions::new(Some("hermes"), true).unwrap();
        let body = json!({"input": "Hello", "stream": true, "store": false,
                          "tools": [{"type": "function", "name": "f", "strict": false},
                                    {"type": "function", "name": "g", "strict": false}]});
        let store = ResponseStore::new(4);
        let new = || {
            let req = parse_body::<ResponsesRequest>(body.to_string().as_bytes()).unwrap();
            let call = ResponsesCall::new(&ctx, req, &store, None).unwrap();
            call.plan(&ctx, vec![1], 8).unwrap().1
        };
        let text = "Hi <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\
                    <tool_call>{\"name\": \"g\", \"arguments\": {\"a\": 1}}</tool_call>";
        let mut resp = new();
        resp.opening();
        resp.event(0, &output("Hi <tool_", false));
        resp.event(0, &output(&text["Hi <tool_".len()..], true));
        let mut bytes = resp.take().unwrap().to_vec();
        bytes.extend_from_slice(&resp.closing(&store));
        let evs = events(&bytes);
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added", // the message, at its first text
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_item.added", // f
                "response.function_call_arguments.delta",
                "response.output_item.added", // g
                "response.function_call_arguments.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let seq: Vec<u64> = evs
            .iter()
            .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seq, (0..17).collect::<Vec<u64>>());
        assert_eq!(evs[4].1["delta"], "Hi ");
        assert_eq!(
            (&evs[5].1["output_index"], &evs[5].1["item"]["name"]),
            (&json!(1), &json!("f"))
        );
        assert_eq!(evs[8].1["delta"], "{\"a\": 1}");
        assert_eq!(evs[14].1["arguments"], "{\"a\": 1}");
        let streamed = evs[16].1["response"]["output"].clone();
        // Not streamed: the same items (their ids aside).
        let mut resp = new();
        let mut col = Collector::new(1, vec![1]);
        col.push(&ctx.tokenizer, 0, output(text, true));
        let whole: Value = serde_json::from_str(&resp.body(col.finish(), &store)).unwrap();
        let strip = |items: &Value| -> Vec<Value> {
            let mut items = items.as_array().unwrap().clone();
            for i in &mut items {
                let o = i.as_object_mut().unwrap();
                assert!(o.remove("id").is_some());
                if o["type"] == "function_call" {
                    assert!(o
                        .remove("call_id")
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .starts_with("call_"));
                }
            }
            items
        };
        assert_eq!(strip(&whole["output"]), strip(&streamed));
        assert_eq!(
            strip(&streamed),
            vec![
                json!({"type": "message", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": "Hi ", "annotations": []}]}),
                json!({"type": "function_call", "name": "f", "arguments": "{}",
                       "status": "completed"}),
                json!({"type": "function_call", "name": "g", "arguments": "{\"a\": 1}",
                       "status": "completed"}),
            ]
        );
    }

    #[test]
    fn reasoning_is_an_item_before_the_message_and_calls() {
        let mut ctx = test_context();
        ctx.tools = crate::tools::ToolOptions::new(Some("hermes"), true).unwrap();
        ctx.reasoning = Some(crate::reasoning::ReasoningFormat::DeepSeekR1);
        let body = json!({"input": "Hello", "stream": true, "store": false,
                          "tools": [{"type": "function", "name": "f", "strict": false}]});
        let store = ResponseStore::new(4);
        let new = || {
            let req = parse_body::<ResponsesRequest>(body.to_string().as_bytes()).unwrap();
            let call = ResponsesCall::new(&ctx, req, &store, None).unwrap();
            assert_eq!(call.reply_start, Some(ReplyStart::Reasoning));
            call.plan(&ctx, vec![1], 8).unwrap().1
        };
        let pieces = [
            "pla",
            "n</thi",
            "nk>Hi <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
        ];
        let mut resp = new();
        resp.opening();
        for (i, piece) in pieces.iter().enumerate() {
            resp.event(0, &output(piece, i == pieces.len() - 1));
        }
        let mut bytes = resp.take().unwrap().to_vec();
        bytes.extend_from_slice(&resp.closing(&store));
        let evs = events(&bytes);
        let got: Vec<(&str, Option<u64>)> = evs
            .iter()
            .map(|(n, d)| (n.as_str(), d["output_index"].as_u64()))
            .collect();
        assert_eq!(
            got,
            [
                ("response.created", None),
                ("response.in_progress", None),
                ("response.output_item.added", Some(0)), // reasoning, as the span opens
                ("response.content_part.added", Some(0)),
                ("response.reasoning_text.delta", Some(0)),
                ("response.reasoning_text.delta", Some(0)), // "n": "</thi" held back
                ("response.output_item.added", Some(1)),    // the message
                ("response.content_part.added", Some(1)),
                ("response.output_text.delta", Some(1)),
                ("response.output_item.added", Some(2)), // f
                ("response.function_call_arguments.delta", Some(2)),
                ("response.reasoning_text.done", Some(0)),
                ("response.content_part.done", Some(0)),
                ("response.output_item.done", Some(0)),
                ("response.output_text.done", Some(1)),
                ("response.content_part.done", Some(1)),
                ("response.output_item.done", Some(1)),
                ("response.function_call_arguments.done", Some(2)),
                ("response.output_item.done", Some(2)),
                ("response.completed", None),
            ]
        );
        let deltas: Vec<&Value> = evs[4..6].iter().map(|(_, d)| &d["delta"]).collect();
        assert_eq!(deltas, [&json!("pla"), &json!("n")]);
        assert_eq!(
            evs[2].1["item"],
            json!({"type": "reasoning", "id": evs[2].1["item"]["id"],
                   "summary": [], "content": [], "status": "in_progress"})
        );
        assert!(evs[2].1["item"]["id"].as_str().unwrap().starts_with("rs_"));
        assert_eq!(
            evs[3].1["part"],
            json!({"type": "reasoning_text", "text": ""})
        );
        assert_eq!(evs[11].1["text"], "plan");
        let streamed = evs[19].1["response"]["output"].clone();
        assert_eq!(
            streamed[0],
            json!({"type": "reasoning", "id": evs[2].1["item"]["id"], "summary": [],
                   "content": [{"type": "reasoning_text", "text": "plan"}],
                   "status": "completed"})
        );
        let kinds: Vec<&Value> = streamed
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["type"])
            .collect();
        assert_eq!(
            kinds,
            [
                &json!("reasoning"),
                &json!("message"),
                &json!("function_call")
            ]
        );
        assert_eq!(streamed[1]["content"][0]["text"], "Hi ");
        // Not streamed: the same items (their ids aside).
        let mut resp = new();
        let mut col = Collector::new(1, vec![1]);
        col.push(&ctx.tokenizer, 0, output(&pieces.concat(), true));
        let whole: Value = serde_json::from_str(&resp.body(col.finish(), &store)).unwrap();
        let strip = |items: &Value| -> Vec<Value> {
            let mut items = items.as_array().unwrap().clone();
            for i in &mut items {
                let o = i.as_object_mut().unwrap();
                o.remove("id");
                o.remove("call_id");
            }
            items
        };
        assert_eq!(strip(&whole["output"]), strip(&streamed));
        // A reply cut inside its span: the reasoning alone, incomplete; no empty message.
        let mut resp = new();
        resp.opening();
        resp.event(
            0,
            &GenEvent::Output(SeqOutput {
                index: 0,
                token_ids: vec![],
                text: "thinking".into(),
                num_tokens: 1,
                logprobs: vec![],
                finish: Some(Finish {
                    reason: "length",
                    stop_reason: Value::Null,
                }),
            }),
        );
        resp.take();
        let evs = events(&resp.closing(&store));
        let out = &evs.last().unwrap().1["response"]["output"];
        assert_eq!(out.as_array().unwrap().len(), 1);
        assert_eq!(
            (
                &out[0]["type"],
                &out[0]["status"],
                &out[0]["content"][0]["text"]
            ),
            (
                &json!("reasoning"),
                &json!("incomplete"),
                &json!("thinking")
            )
        );
    }
}
