//! The response object of the Responses API and its streamed events (OpenAI's shapes for
//! text-only responses: one assistant `message` item with one `output_text` part).
use super::input::{new_item_id, ResponsesRequest};
use crate::openai::response::now;
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
    pub item_id: String,
    pub store: bool,
    /// `id`, `object`, `created_at`, `model` and the echoed request fields, in wire order.
    fields: Map<String, Value>,
}

/// How a response ended: `length` is OpenAI's `incomplete` (max_output_tokens).
pub fn status(finish_reason: &str) -> &'static str {
    if finish_reason == "length" {
        "incomplete"
    } else {
        "completed"
    }
}

impl ResponseHead {
    pub fn new(req: &ResponsesRequest, model: &str) -> Self {
        let id = new_response_id();
        let store = req.store.unwrap_or(true);
        let Value::Object(fields) = json!({
            "id": id,
            "object": "response",
            "created_at": now(),
            "model": model,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "previous_response_id": req.previous_response_id,
            "store": store,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "truncation": req.truncation.as_deref().unwrap_or("disabled"),
            "metadata": req.metadata.clone().unwrap_or_default(),
            "user": req.user,
            "background": false,
            "parallel_tool_calls": true,
            "tool_choice": req.tool_choice.clone().unwrap_or(json!("auto")),
            "tools": [],
            "reasoning": {"effort": null, "summary": null},
            "text": {"format": {"type": "text"}},
            "error": null,
        }) else {
            unreachable!("json! of an object literal is an object")
        };
        ResponseHead {
            id,
            item_id: new_item_id(),
            store,
            fields,
        }
    }

    /// The response object, serialized once (events, body and store share it) from borrows:
    /// the head's fields are not copied. `output` empty and `usage` null while in progress.
    pub fn object(&self, status: &str, output: &[Value], usage: &Value) -> Box<RawValue> {
        #[derive(Serialize)]
        struct Object<'a> {
            #[serde(flatten)]
            fields: &'a Map<String, Value>,
            status: &'a str,
            incomplete_details: Option<Incomplete>,
            output: &'a [Value],
            usage: &'a Value,
        }
        #[derive(Serialize)]
        struct Incomplete {
            reason: &'static str,
        }
        let object = Object {
            fields: &self.fields,
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
    pub fn item(&self, status: &str, text: Option<&str>) -> Value {
        let content = match text {
            Some(t) => vec![output_text(t)],
            None => vec![],
        };
        json!({
            "id": self.item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        })
    }

    /// The finished response with its one message.
    pub fn finished(&self, text: &str, finish_reason: &str, usage: &Value) -> Box<RawValue> {
        let st = status(finish_reason);
        self.object(st, &[self.item(st, Some(text))], usage)
    }
}

pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
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
    pub logprobs: [u8; 0],
}
