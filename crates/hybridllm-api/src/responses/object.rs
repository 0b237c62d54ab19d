//! The response object of the Responses API and its streamed events (OpenAI's shapes: an
//! assistant `message` item with one `output_text` part, and `function_call` items).
use super::input::{new_item_id, ResponsesRequest};
use crate::usage::now;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// OpenAI's ids: `resp_<32 hex>`.
pub fn new_response_id() -> String {
    format!("resp_{}", uuid::Uuid::new_v4().simple())
}

/// What every form of one response repeats: ids, the model and the request's echoed fields.
pub struct ResponseHead {
    pub id: String,
    /// The engine request's: `id`, or (a caller's `request_id` need not be unique) that with
    /// a uuid after it.
    pub engine_id: String,
    pub item_id: String,
    pub store: bool,
    /// `background: true`: answered at once as `queued`, run by the shell's task.
    pub background: bool,
    /// With `include: ["message.output_text.logprobs"]`: the alternatives per token (echoed
    /// as vLLM does, null otherwise).
    pub top_logprobs: Option<u32>,
    created_at: i64,
    model: String,
    instructions: Option<String>,
    max_output_tokens: Option<i64>,
    previous_response_id: Option<String>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    truncation: String,
    metadata: Map<String, Value>,
    user: Option<String>,
    tool_choice: Value,
    service_tier: String,
    parallel_tool_calls: bool,
    max_tool_calls: Option<i64>,
    prompt_cache_key: Option<String>,
    /// `text.format` as the request gave it (`{"type": "text"}` by default).
    text_format: Value,
    /// The request's tools, as given.
    tools: Value,
}

/// How a response ended: `length` is OpenAI's `incomplete` (max_output_tokens).
pub fn status(finish_reason: &str) -> &'static str {
    if finish_reason == "length" {
        "incomplete"
    } else {
        "completed"
    }
}

/// The response object's wire form, borrowed from the head: no JSON tree per response.
/// Field order is the wire order.
#[derive(Serialize)]
struct Object<'a> {
    id: &'a str,
    object: &'static str,
    created_at: i64,
    model: &'a str,
    instructions: Option<&'a str>,
    max_output_tokens: Option<i64>,
    previous_response_id: Option<&'a str>,
    store: bool,
    temperature: Option<f64>,
    top_p: Option<f64>,
    truncation: &'a str,
    metadata: &'a Map<String, Value>,
    user: Option<&'a str>,
    background: bool,
    service_tier: &'a str,
    parallel_tool_calls: bool,
    max_tool_calls: Option<i64>,
    prompt_cache_key: Option<&'a str>,
    tool_choice: &'a Value,
    tools: &'a Value,
    reasoning: Reasoning,
    text: TextConfig<'a>,
    top_logprobs: Option<u32>,
    error: Option<()>,
    status: &'a str,
    incomplete_details: Option<Incomplete>,
    output: &'a [OutputItem<'a>],
    usage: &'a Value,
}

/// `{"effort": null, "summary": null}`.
#[derive(Serialize)]
struct Reasoning {
    effort: Option<()>,
    summary: Option<()>,
}

/// `{"format": ...}`: the request's format.
#[derive(Serialize)]
struct TextConfig<'a> {
    format: &'a Value,
}

#[derive(Serialize)]
struct Incomplete {
    reason: &'static str,
}

/// An item of `output`.
#[derive(Serialize)]
#[serde(untagged)]
pub enum OutputItem<'a> {
    Reasoning(ReasoningItem<'a>),
    Message(Item<'a>),
    Call(CallItem<'a>),
}

/// A `reasoning` item: the reply's reasoning span (with `--reasoning-parser`) as one
/// `reasoning_text` part, none while in progress; no summary is written.
#[derive(Serialize)]
pub struct ReasoningItem<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: &'a str,
    pub summary: [u8; 0],
    #[serde(serialize_with = "as_list")]
    pub content: Option<ReasoningPart<'a>>,
    pub status: &'a str,
}

/// A `reasoning_text` content part.
#[derive(Serialize)]
pub struct ReasoningPart<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: &'a str,
}

pub fn reasoning_text(text: &str) -> ReasoningPart<'_> {
    ReasoningPart {
        kind: "reasoning_text",
        text,
    }
}

/// A `function_call` item: the model's call of a function tool.
#[derive(Serialize)]
pub struct CallItem<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: &'a str,
    pub call_id: &'a str,
    pub name: &'a str,
    /// JSON text (empty while in progress).
    pub arguments: &'a str,
    pub status: &'a str,
}

/// The assistant `message` item: no content while in progress, else its one text part.
#[derive(Serialize)]
pub struct Item<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    status: &'a str,
    role: &'static str,
    #[serde(serialize_with = "as_list")]
    content: Option<Part<'a>>,
}

fn as_list<S: serde::Serializer, P: Serialize>(part: &Option<P>, s: S) -> Result<S::Ok, S::Error> {
    part.as_slice().serialize(s)
}

/// An `output_text` content part; `logprobs` (vLLM's full shape) only in the response
/// object's message, when asked for.
#[derive(Serialize)]
pub struct Part<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    annotations: [u8; 0],
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<&'a [Value]>,
}

pub fn output_text(text: &str) -> Part<'_> {
    Part {
        kind: "output_text",
        text,
        annotations: [],
        logprobs: None,
    }
}

impl ResponseHead {
    /// `id`: the caller's `request_id` if it gave one (checked by the caller).
    pub fn new(req: &ResponsesRequest, model: &str, id: Option<String>) -> Self {
        let (id, engine_id) = match id {
            Some(id) => (
                id.clone(),
                format!("{id}-{}", uuid::Uuid::new_v4().simple()),
            ),
            None => {
                let id = new_response_id();
                (id.clone(), id)
            }
        };
        ResponseHead {
            id,
            engine_id,
            item_id: new_item_id(),
            store: req.store.unwrap_or(true),
            background: req.background.unwrap_or(false),
            top_logprobs: None,
            created_at: now(),
            model: model.to_string(),
            instructions: req.instructions.clone(),
            max_output_tokens: req.max_output_tokens,
            previous_response_id: req.previous_response_id.clone(),
            temperature: req.temperature,
            top_p: req.top_p,
            truncation: req.truncation.as_deref().unwrap_or("disabled").to_string(),
            metadata: req.metadata.clone().unwrap_or_default(),
            user: req.user.clone(),
            tool_choice: req.tool_choice.clone().unwrap_or_else(|| json!("auto")),
            service_tier: req.service_tier.clone().unwrap_or_else(|| "auto".into()),
            parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
            max_tool_calls: req.max_tool_calls,
            prompt_cache_key: req.prompt_cache_key.clone(),
            text_format: req
                .text_format()
                .cloned()
                .unwrap_or_else(|| json!({"type": "text"})),
            tools: req.tools.clone().unwrap_or_else(|| json!([])),
        }
    }

    /// The response object, serialized once (events, body and store share it) from borrows.
    /// `output` empty and `usage` null while in progress.
    pub fn object(&self, status: &str, output: &[OutputItem<'_>], usage: &Value) -> Box<RawValue> {
        let object = Object {
            id: &self.id,
            object: "response",
            created_at: self.created_at,
            model: &self.model,
            instructions: self.instructions.as_deref(),
            max_output_tokens: self.max_output_tokens,
            previous_response_id: self.previous_response_id.as_deref(),
            store: self.store,
            temperature: self.temperature,
            top_p: self.top_p,
            truncation: &self.truncation,
            metadata: &self.metadata,
            user: self.user.as_deref(),
            background: self.background,
            service_tier: &self.service_tier,
            parallel_tool_calls: self.parallel_tool_calls,
            max_tool_calls: self.max_tool_calls,
            prompt_cache_key: self.prompt_cache_key.as_deref(),
            tool_choice: &self.tool_choice,
            tools: &self.tools,
            reasoning: Reasoning {
                effort: None,
                summary: None,
            },
            text: TextConfig {
                format: &self.text_format,
            },
            top_logprobs: self.top_logprobs,
            error: None,
            status,
            incomplete_details: (status == "incomplete").then_some(Incomplete {
                reason: "max_output_tokens",
            }),
            output,
            usage,
        };
        serde_json::value::to_raw_value(&object).expect("the response object serializes")
    }

    /// The assistant message item: `content` empty while in progress.
    pub fn item<'a>(&'a self, status: &'a str, text: Option<&'a str>) -> Item<'a> {
        self.item_with(status, text, None)
    }

    /// The message item with its text part's `logprobs`.
    pub fn item_with<'a>(
        &'a self,
        status: &'a str,
        text: Option<&'a str>,
        logprobs: Option<&'a [Value]>,
    ) -> Item<'a> {
        Item {
            id: &self.item_id,
            kind: "message",
            status,
            role: "assistant",
            content: text.map(|text| Part {
                logprobs,
                ..output_text(text)
            }),
        }
    }
}

/// `response.output_text.delta`, serialized without a JSON tree per token.
#[derive(Serialize)]
pub struct TextDelta<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub sequence_number: u64,
    pub item_id: &'a str,
    pub output_index: u32,
    pub content_index: u32,
    pub delta: &'a str,
    /// The delta's tokens (vLLM's streamed shape), when asked for; else empty.
    pub logprobs: &'a [Value],
}

/// `response.output_item.added` / `.done`.
#[derive(Serialize)]
pub struct ItemEvent<'a> {
    pub output_index: u32,
    pub item: OutputItem<'a>,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub sequence_number: u64,
}

/// `response.content_part.added` / `.done`, of a message (`Part`) or of reasoning
/// (`ReasoningPart`).
#[derive(Serialize)]
pub struct PartEvent<'a, P> {
    pub item_id: &'a str,
    pub output_index: u32,
    pub content_index: u32,
    pub part: P,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub sequence_number: u64,
}

/// `response.output_text.done`.
#[derive(Serialize)]
pub struct TextDone<'a> {
    pub item_id: &'a str,
    pub output_index: u32,
    pub content_index: u32,
    pub text: &'a str,
    pub logprobs: [u8; 0],
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub sequence_number: u64,
}
