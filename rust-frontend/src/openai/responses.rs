//! OpenAI's Responses API, text only: POST /v1/responses (rendered through the chat template
//! like chat completions, `instructions` as the system message), and the stored responses:
//! GET and DELETE /v1/responses/{response_id}, GET /v1/responses/{response_id}/input_items.
mod input;
mod object;

use super::aggregate::collect;
use super::generate::{generate_many, GenRequest};
use super::prompt::{render_prompt, tokenize, TemplateArgs};
use super::request::JsonBody;
use super::sse::{sse_events_response, write_named_frame};
use super::text_deltas::GenEvent;
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use hybridllm_api::response_store::StoredResponse;
use hybridllm_api::usage::Usage;
use hybridllm_api::validation::fit_max_tokens;
use input::{read_input, ResponsesRequest};
use object::{output_text, status, ItemEvent, PartEvent, ResponseHead, TextDelta, TextDone};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Who may see a stored response: the key that created it (None when no keys are set; the
/// auth layer has already checked the key).
fn owner(state: &AppState, headers: &HeaderMap) -> Option<String> {
    if state.config.api_keys.is_empty() {
        return None;
    }
    let h = headers.get("authorization")?.to_str().ok()?;
    Some(h.strip_prefix("Bearer ")?.trim().to_string())
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Response with id '{id}' not found."))
}

/// What is stored once the response has finished (`store: true`).
struct ToStore {
    owner: Option<String>,
    input_items: Vec<Value>,
    conversation: Vec<Value>,
}

fn store(state: &AppState, head: &ResponseHead, s: ToStore, response: Box<RawValue>, text: &str) {
    if !head.store {
        return;
    }
    let mut conversation = s.conversation;
    conversation.push(json!({"role": "assistant", "content": text}));
    state.responses.put(
        head.id.clone(),
        StoredResponse {
            owner: s.owner,
            response,
            input_items: s.input_items,
            conversation,
        },
    );
}

/// The prompt of `instructions` + `conversation`; with `auto` truncation the oldest turns are
/// dropped until it fits (the last one always stays).
async fn fit_prompt(
    state: &Arc<AppState>,
    instructions: Option<&str>,
    conversation: &[Value],
    max_tokens: Option<u32>,
    auto: bool,
) -> Result<(Vec<u32>, u32), ApiError> {
    let mut first = 0;
    loop {
        let mut messages = Vec::with_capacity(conversation.len() + 1 - first);
        if let Some(s) = instructions {
            messages.push(json!({"role": "system", "content": s}));
        }
        messages.extend_from_slice(&conversation[first..]);
        let prompt = render_prompt(state, &messages, &TemplateArgs::default(), true)?;
        let ids = tokenize(state, prompt, false).await?;
        let cap = state.config.max_tokens_limit;
        match fit_max_tokens(ids.len(), max_tokens, state.api.max_model_len, cap) {
            Ok(m) => return Ok((ids, m)),
            Err(e) if !auto || first + 1 >= conversation.len() => return Err(e),
            Err(_) => first += 1,
        }
    }
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<ResponsesRequest>,
) -> Result<Response, HttpError> {
    state.api.check_model(&req.model)?;
    state.api.check_task("Responses", false)?;
    req.check_unsupported()?;
    let auto_truncate = req.truncation_auto()?;
    req.check_metadata()?;
    let sampling = req.sampling(state.config.max_tokens_limit)?;
    let params = sampling.validate(None, state.api.vocab_size)?;
    let owner = owner(&state, &headers);
    let previous = match &req.previous_response_id {
        Some(id) => Some(state.responses.get(id, owner.as_deref()).ok_or_else(|| {
            ApiError::NotFound(format!("Previous response with id '{id}' not found."))
        })?),
        None => None,
    };
    let input = read_input(&req.input)?;
    let mut conversation = previous.map_or_else(Vec::new, |p| p.conversation.clone());
    conversation.extend(input.messages);
    let instructions = req.instructions.as_deref();
    let (ids, max_tokens) = fit_prompt(
        &state,
        instructions,
        &conversation,
        params.max_tokens,
        auto_truncate,
    )
    .await?;
    let head = ResponseHead::new(&req, &state.api.served_names[0]);
    let prompt_len = ids.len();
    let gen = GenRequest {
        request_id: head.id.clone(),
        prompt_ids: ids,
        params,
        max_tokens,
    };
    let events = generate_many(state.clone(), vec![gen]).await?;
    let to_store = ToStore {
        owner,
        input_items: input.items,
        conversation,
    };
    if req.stream.unwrap_or(false) {
        return Ok(stream_response(state, events, head, prompt_len, to_store));
    }
    let c = collect(events, 1, vec![prompt_len], &state.api.tokenizer).await?;
    let choice = &c.choices[0];
    let obj = head.finished(
        &choice.text,
        choice.finish.reason,
        &c.usage.to_responses_json(),
    );
    let body = json_body(&obj);
    store(&state, &head, to_store, obj, &choice.text);
    Ok(body)
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

    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// What was written since the last `take`, as one chunk.
    fn take(&mut self) -> Bytes {
        Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(512)))
    }
}

/// The named events, in OpenAI's order, each with the next `sequence_number`.
fn stream_response(
    state: Arc<AppState>,
    events: impl futures_util::Stream<Item = Result<(usize, GenEvent), ApiError>> + Send + 'static,
    head: ResponseHead,
    prompt_len: usize,
    to_store: ToStore,
) -> Response {
    let s = async_stream::stream! {
        let mut out = Events::new();
        let pending = head.object("in_progress", &[], &Value::Null);
        out.with_response("response.created", &*pending);
        out.with_response("response.in_progress", &*pending);
        drop(pending);
        let (item_id, item) = (head.item_id.as_str(), |st, text| head.item(st, text));
        out.push("response.output_item.added", |sequence_number| ItemEvent {
            output_index: 0, item: item("in_progress", None), kind: "response.output_item.added", sequence_number,
        });
        let part = |kind, text, sequence_number| PartEvent {
            item_id, output_index: 0, content_index: 0, part: output_text(text), kind, sequence_number,
        };
        out.push("response.content_part.added", |n| part("response.content_part.added", "", n));
        let mut usage = Usage::new(vec![prompt_len]);
        let (mut text, mut finish) = (String::new(), "abort");
        let mut events = std::pin::pin!(events);
        loop {
            // What is ready now joins the events not yet sent; before waiting, they go out.
            let next = match events.next().now_or_never() {
                Some(next) => next,
                None => {
                    if !out.is_empty() {
                        yield out.take();
                    }
                    events.next().await
                }
            };
            let Some(ev) = next else { break };
            match ev {
                Err(e) => {
                    tracing::warn!("stream failed: {e}");
                    let param = e.body()["error"]["param"].clone();
                    out.event("error", json!({"code": e.error_type(), "message": e.to_string(), "param": param}));
                    yield out.take();
                    return;
                }
                Ok((p, GenEvent::Prompt(info))) => usage.on_prompt(p, &info),
                Ok((_, GenEvent::Output(o))) => {
                    usage.on_output(o.num_tokens);
                    if let Some(f) = &o.finish {
                        finish = f.reason;
                    }
                    if o.text.is_empty() {
                        continue;
                    }
                    text.push_str(&o.text);
                    out.push("response.output_text.delta", |sequence_number| TextDelta {
                        kind: "response.output_text.delta",
                        sequence_number,
                        item_id,
                        output_index: 0,
                        content_index: 0,
                        delta: &o.text,
                        logprobs: [],
                    });
                }
            }
        }
        out.push("response.output_text.done", |sequence_number| TextDone {
            item_id, output_index: 0, content_index: 0, text: &text, logprobs: [], kind: "response.output_text.done", sequence_number,
        });
        out.push("response.content_part.done", |n| part("response.content_part.done", &text, n));
        let st = status(finish);
        out.push("response.output_item.done", |sequence_number| ItemEvent {
            output_index: 0, item: item(st, Some(&text)), kind: "response.output_item.done", sequence_number,
        });
        let done = head.finished(&text, finish, &usage.to_responses_json());
        let last = if st == "incomplete" { "response.incomplete" } else { "response.completed" };
        out.with_response(last, &*done);
        yield out.take();
        store(&state, &head, to_store, done, &text);
    };
    sse_events_response(s)
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let r = state
        .responses
        .get(&id, owner(&state, &headers).as_deref())
        .ok_or_else(|| not_found(&id))?;
    Ok(json_body(&r.response))
}

/// An `application/json` body of an already serialized object.
fn json_body(raw: &RawValue) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        raw.get().to_owned(),
    )
        .into_response()
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    if !state
        .responses
        .remove(&id, owner(&state, &headers).as_deref())
    {
        return Err(not_found(&id).into());
    }
    Ok(axum::Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}

/// A page of the response's own input items: `order` (desc by default, as OpenAI), `limit`
/// (1 to 100, default 20), `after` (an item id).
pub async fn input_items(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, HttpError> {
    let r = state
        .responses
        .get(&id, owner(&state, &headers).as_deref())
        .ok_or_else(|| not_found(&id))?;
    let mut items: Vec<&Value> = r.input_items.iter().collect();
    match q.get("order").map(String::as_str) {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(o) => {
            return Err(ApiError::bad_param(
                "order",
                format!("order must be \"asc\" or \"desc\", got {}.", json!(o)),
            )
            .into())
        }
    }
    let limit = match q.get("limit") {
        None => 20,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| {
                ApiError::bad_param(
                    "limit",
                    format!("limit must be an integer in [1, 100], got {}.", json!(l)),
                )
            })?,
    };
    if let Some(after) = q.get("after") {
        let at = items
            .iter()
            .position(|i| i["id"] == after.as_str())
            .ok_or_else(|| {
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
    Ok(axum::Json(json!({
        "object": "list",
        "data": items,
        "first_id": items.first().map(|i| &i["id"]),
        "last_id": items.last().map(|i| &i["id"]),
        "has_more": has_more,
    }))
    .into_response())
}

#[cfg(test)]
mod tests;
