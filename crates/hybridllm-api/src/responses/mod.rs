//! OpenAI's Responses API, text only: a request rendered through the chat template like chat
//! completions (`instructions` as the system message, `previous_response_id` continuing a
//! stored conversation, `auto` truncation dropping the oldest turns), its named events or its
//! response object, and the stored responses (GET, DELETE, input items).
pub mod input;
pub mod object;

use crate::aggregate::Collected;
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::prompt::TemplateArgs;
use crate::response_store::{ResponseStore, StoredResponse};
use crate::sse::write_named_frame;
use crate::text_deltas::GenEvent;
use crate::usage::{Usage, MAX_REQUEST_ID_LEN};
use crate::validation::{
    closed, fit_max_tokens, priority, Bound, Constrained, GenParams, GenRequest,
};
use bytes::Bytes;
use input::{read_input, ResponsesRequest};
use object::{output_text, status, ItemEvent, PartEvent, ResponseHead, TextDelta, TextDone};
use serde_json::value::RawValue;
use serde_json::{json, Value};

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
        let sampling = req.sampling(ctx.max_tokens_limit)?;
        let mut params = sampling.validate(None, ctx.vocab_size)?;
        params.constrain(req.text_constraint()?)?;
        params.priority = priority(req.priority, ctx.priority_scheduling)?;
        let previous = match &req.previous_response_id {
            Some(id) => Some(store.get(id, owner.as_deref()).ok_or_else(|| {
                ApiError::NotFound(format!("Previous response with id '{id}' not found."))
            })?),
            None => None,
        };
        let input = read_input(&req.input)?;
        let mut conversation = previous.map_or_else(Vec::new, |p| p.conversation.clone());
        conversation.extend(input.messages);
        Ok(ResponsesCall {
            head: ResponseHead::new(&req, ctx.model_name(), id),
            params,
            instructions: req.instructions.clone(),
            auto_truncate,
            stream: req.stream.unwrap_or(false),
            to_store: ToStore {
                owner,
                input_items: input.items,
                conversation,
            },
        })
    }

    /// The prompt of `instructions` and the conversation without its `first` oldest turns.
    pub fn prompt(&self, ctx: &ApiContext, first: usize) -> Result<String, ApiError> {
        let conversation = &self.to_store.conversation;
        let mut messages = Vec::with_capacity(conversation.len() + 1 - first);
        if let Some(s) = &self.instructions {
            messages.push(json!({"role": "system", "content": s}));
        }
        messages.extend_from_slice(&conversation[first..]);
        ctx.render_prompt(&messages, &TemplateArgs::default(), true)
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
            finish: "abort",
            stream: self.stream,
            to_store: Some(self.to_store),
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

/// The response of one Responses request, from its engine events: streamed, the named events
/// in OpenAI's order, each with the next `sequence_number` (written into a buffer that the
/// shell takes before it waits for more); or, not streamed, the response object.
pub struct ResponsesResponse {
    head: ResponseHead,
    usage: Usage,
    out: Events,
    text: String,
    finish: &'static str,
    pub stream: bool,
    to_store: Option<ToStore>,
}

impl ResponsesResponse {
    /// The four events that open the stream.
    pub fn opening(&mut self) {
        let pending = self.head.object("in_progress", &[], &Value::Null);
        self.out.with_response("response.created", &*pending);
        self.out.with_response("response.in_progress", &*pending);
        drop(pending);
        let head = &self.head;
        self.out
            .push("response.output_item.added", |sequence_number| ItemEvent {
                output_index: 0,
                item: head.item("in_progress", None),
                kind: "response.output_item.added",
                sequence_number,
            });
        self.out
            .push("response.content_part.added", |sequence_number| PartEvent {
                item_id: &head.item_id,
                output_index: 0,
                content_index: 0,
                part: output_text(""),
                kind: "response.content_part.added",
                sequence_number,
            });
    }

    /// One engine event: a text delta event when it carries text.
    pub fn event(&mut self, p: usize, ev: &GenEvent) {
        let o = match ev {
            GenEvent::Prompt(info) => return self.usage.on_prompt(p, info),
            GenEvent::Output(o) => o,
        };
        self.usage.on_output(o.num_tokens);
        if let Some(f) = &o.finish {
            self.finish = f.reason;
        }
        if o.text.is_empty() {
            return;
        }
        self.text.push_str(&o.text);
        let item_id = &self.head.item_id;
        self.out
            .push("response.output_text.delta", |sequence_number| TextDelta {
                kind: "response.output_text.delta",
                sequence_number,
                item_id,
                output_index: 0,
                content_index: 0,
                delta: &o.text,
                logprobs: [],
            });
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

    /// The four events that close the stream (the response stored if asked for).
    pub fn closing(&mut self, store: &ResponseStore) -> Bytes {
        let (head, text) = (&self.head, self.text.as_str());
        let part = |kind, text, sequence_number| PartEvent {
            item_id: &head.item_id,
            output_index: 0,
            content_index: 0,
            part: output_text(text),
            kind,
            sequence_number,
        };
        self.out
            .push("response.output_text.done", |sequence_number| TextDone {
                item_id: &head.item_id,
                output_index: 0,
                content_index: 0,
                text,
                logprobs: [],
                kind: "response.output_text.done",
                sequence_number,
            });
        self.out.push("response.content_part.done", |n| {
            part("response.content_part.done", text, n)
        });
        let st = status(self.finish);
        self.out
            .push("response.output_item.done", |sequence_number| ItemEvent {
                output_index: 0,
                item: head.item(st, Some(text)),
                kind: "response.output_item.done",
                sequence_number,
            });
        let done = head.finished(text, self.finish, &self.usage.to_responses_json());
        let last = if st == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.out.with_response(last, &*done);
        self.store(store, done);
        self.out.take()
    }

    /// The response object of a request that is not streamed (stored if asked for).
    pub fn body(&mut self, c: Collected, store: &ResponseStore) -> String {
        let choice = &c.choices[0];
        self.text.clone_from(&choice.text);
        let obj = self.head.finished(
            &choice.text,
            choice.finish.reason,
            &c.usage.to_responses_json(),
        );
        let body = obj.get().to_owned();
        self.store(store, obj);
        body
    }

    fn store(&mut self, store: &ResponseStore, response: Box<RawValue>) {
        let Some(s) = self.to_store.take().filter(|_| self.head.store) else {
            return;
        };
        let mut conversation = s.conversation;
        conversation.push(json!({"role": "assistant", "content": self.text}));
        store.put(
            self.head.id.clone(),
            StoredResponse {
                owner: s.owner,
                response,
                input_items: s.input_items,
                conversation,
            },
        );
    }
}

/// GET /v1/responses/{id}: the stored object as it was returned.
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
