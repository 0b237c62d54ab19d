//! The `/v1/responses` request: its fields, those served only in their text-only form, and
//! its input items read into stored items and chat messages.
use crate::errors::ApiError;
use crate::request::{never, nothing, Unhonoured, KV_TRANSFER, MULTIMODAL_OPTIONS};
use crate::structured::{Constraint, TextFormat};
use crate::validation::{
    range_i, Bound, SamplingRequest, Stop, LOGPROBS, MAX_TOKENS, MIN_P, REPETITION_PENALTY,
    TEMPERATURE, TOP_K, TOP_P,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use utoipa::openapi::{ObjectBuilder, Type};
use utoipa::ToSchema;

/// OpenAI's Responses API request (text only).
#[derive(Debug, Deserialize, ToSchema)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    #[schema(value_type = ResponsesInput)]
    pub input: Value,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// vLLM's sampling extensions, as on chat completions.
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    #[schema(value_type = Option<Stop>)]
    pub stop: Option<Value>,
    pub ignore_eos: Option<bool>,
    pub stream: Option<bool>,
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    /// Up to 16 keys of up to 64 characters, string values of up to 512.
    #[schema(value_type = Option<HashMap<String, String>>)]
    pub metadata: Option<Map<String, Value>>,
    pub user: Option<String>,
    /// "auto" or "disabled" (the default).
    pub truncation: Option<String>,
    /// vLLM's: scheduling priority, lower first (`--scheduling-policy priority`; else 0).
    pub priority: Option<i64>,
    /// vLLM's: prefix-cache hits only between requests with the same salt.
    pub cache_salt: Option<String>,
    /// vLLM's sampling and decoding extensions, as on chat completions.
    pub logit_bias: Option<std::collections::HashMap<String, f64>>,
    pub skip_special_tokens: Option<bool>,
    pub include_stop_str_in_output: Option<bool>,
    /// vLLM's: the response's id, as given (1 to 512 bytes; not one a stored response has).
    pub request_id: Option<String>,
    /// Echoed in the response object, as vLLM and OpenAI do. `service_tier`: auto (the
    /// default), default, flex, scale, priority.
    pub service_tier: Option<String>,
    /// More than one function call per turn (default true).
    pub parallel_tool_calls: Option<bool>,
    /// A limit on built-in tools' calls, none of which are served: echoed.
    pub max_tool_calls: Option<i64>,
    /// OpenAI's prefix-cache routing key: one engine serves every request, so its prefix
    /// cache is shared already (cache_salt isolates); echoed.
    pub prompt_cache_key: Option<String>,
    /// Function tools, `{"type": "function", "name", "description", "parameters",
    /// "strict"}` (built-in tools are refused), and the choice among them: `none`, `auto`,
    /// `required` or `{"type": "function", "name": ...}`; read as chat's (docs/tool_calling.md).
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Value>,
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    /// Answer at once as `queued` and run the response in the background (needs `store`;
    /// not streamed): `GET /v1/responses/{id}` polls it, `POST .../cancel` stops it.
    pub background: Option<bool>,
    /// Extra output: only `"message.output_text.logprobs"` is served (the message's token
    /// logprobs, streamed and not).
    #[schema(value_type = Option<Vec<String>>)]
    pub include: Option<Vec<Value>>,
    /// With the logprobs `include`: alternatives per token, 0 to 20.
    pub top_logprobs: Option<i64>,
    // Refused unless in their text-only form (`check_unsupported`), never ignored.
    pub reasoning: Option<Value>,
    #[schema(value_type = Option<crate::structured::ResponsesText>)]
    pub text: Option<Value>,
    pub prompt: Option<Value>,
    pub conversation: Option<Value>,
}

/// vLLM's fields of its Responses request that this endpoint refuses rather than ignores.
const RESPONSES_UNHONOURED: &[Unhonoured] = &[
    Unhonoured {
        field: "vllm_xargs",
        neutral: never,
        why: "this vLLM extension is not implemented by this server yet",
    },
    Unhonoured {
        field: "structured_outputs",
        neutral: never,
        why: "on /v1/responses the output constraint is text.format",
    },
    Unhonoured {
        field: "enable_response_messages",
        neutral: nothing,
        why: "the prompt and output are not returned as raw chat messages",
    },
    Unhonoured {
        field: "previous_response",
        neutral: never,
        why: "continue a conversation with previous_response_id",
    },
    Unhonoured {
        field: "kv_transfer_params",
        neutral: nothing,
        why: KV_TRANSFER,
    },
    Unhonoured {
        field: "chat_template_kwargs",
        neutral: nothing,
        why: "vLLM fills it in itself; the request's template options are not served here",
    },
    Unhonoured {
        field: "previous_input_messages",
        neutral: nothing,
        why: "it carries gpt-oss Harmony history, a format this server does not serve",
    },
];

const SERVICE_TIERS: [&str; 5] = ["auto", "default", "flex", "scale", "priority"];

impl crate::request::RequestBody for ResponsesRequest {
    const UNHONOURED: &'static [&'static [Unhonoured]] =
        &[RESPONSES_UNHONOURED, MULTIMODAL_OPTIONS];
    const BOUNDS: &'static [(&'static str, Bound)] = &[
        ("max_output_tokens", MAX_TOKENS),
        ("max_tool_calls", MAX_TOKENS),
        ("temperature", TEMPERATURE),
        ("top_p", TOP_P),
        ("top_k", TOP_K),
        ("min_p", MIN_P),
        ("repetition_penalty", REPETITION_PENALTY),
        ("top_logprobs", LOGPROBS),
    ];
}

/// The one `include` value served.
pub const OUTPUT_LOGPROBS: &str = "message.output_text.logprobs";

const METADATA_KEYS: usize = 16;
const METADATA_KEY_CHARS: usize = 64;
const METADATA_VALUE_CHARS: usize = 512;

impl ResponsesRequest {
    /// `text.format` as an output constraint (None: plain text).
    pub fn text_constraint(&self) -> Result<Option<Constraint>, ApiError> {
        if self
            .text
            .as_ref()
            .is_some_and(|t| !t.is_object() && !t.is_null())
        {
            return Err(ApiError::bad_param("text", "text must be an object."));
        }
        match self.text_format() {
            None => Ok(None),
            Some(f) => serde_json::from_value::<TextFormat>(f.clone())
                .map_err(|e| ApiError::bad_param("text.format", format!("text.format: {e}.")))?
                .constraint(),
        }
    }

    /// `text.format` as given (None: unset or null).
    pub fn text_format(&self) -> Option<&Value> {
        self.text
            .as_ref()
            .and_then(|t| t.get("format"))
            .filter(|f| !f.is_null())
    }

    /// Reasoning options, stored prompts and conversations are not served.
    pub fn check_unsupported(&self) -> Result<(), ApiError> {
        let no = |field: &str, why: &str| Err(ApiError::bad_param(field, why));
        if self.reasoning.as_ref().is_some_and(|r| !r.is_null()) {
            return no(
                "reasoning",
                "reasoning is not supported: the model has no reasoning options (reasoning must be null).",
            );
        }
        if self.prompt.as_ref().is_some_and(|p| !p.is_null()) {
            return no(
                "prompt",
                "prompt is not supported: stored prompt templates are not available (use input).",
            );
        }
        if self.conversation.as_ref().is_some_and(|c| !c.is_null()) {
            return no(
                "conversation",
                "conversation is not supported: use previous_response_id to continue a conversation.",
            );
        }
        Ok(())
    }

    /// `include` and `top_logprobs`: the alternatives per token to return with the message's
    /// logprobs (None: no logprobs). Other `include` values ask for output this server does
    /// not make, and `top_logprobs` without the logprobs `include` would be ignored: refused.
    pub fn output_logprobs(&self) -> Result<Option<u32>, ApiError> {
        let mut wanted = false;
        for v in self.include.iter().flatten() {
            match v.as_str() {
                Some(OUTPUT_LOGPROBS) => wanted = true,
                Some(other) => {
                    return Err(ApiError::bad_param(
                        "include",
                        format!(
                        "include value {} is not supported: only \"{OUTPUT_LOGPROBS}\" is served.",
                        json!(other)
                    ),
                    ))
                }
                None => {
                    return Err(ApiError::bad_param(
                        "include",
                        "include must be a list of strings.",
                    ))
                }
            }
        }
        let top = self.top_logprobs.unwrap_or(0);
        range_i("top_logprobs", top, LOGPROBS)?;
        if !wanted && top > 0 {
            return Err(ApiError::bad_param(
                "top_logprobs",
                format!("top_logprobs requires include to contain \"{OUTPUT_LOGPROBS}\"."),
            ));
        }
        Ok(wanted.then_some(top as u32))
    }

    /// `background: true` needs `store` (as vLLM) and is not streamed here.
    pub fn check_background(&self) -> Result<bool, ApiError> {
        if self.background != Some(true) {
            return Ok(false);
        }
        if self.store == Some(false) {
            return Err(ApiError::bad_param(
                "background",
                "background can only be used when `store` is true",
            ));
        }
        if self.stream == Some(true) {
            return Err(ApiError::bad_param(
                "stream",
                "a background response is not streamed: poll GET /v1/responses/{id} (stream must be false).",
            ));
        }
        Ok(true)
    }

    /// The echoed fields' values: `service_tier` one of OpenAI's, `max_tool_calls` at least 1.
    pub fn check_echoed(&self) -> Result<(), ApiError> {
        if let Some(t) = self.service_tier.as_deref() {
            if !SERVICE_TIERS.contains(&t) {
                return Err(ApiError::bad_param(
                    "service_tier",
                    format!(
                        "service_tier must be one of {}, got {}.",
                        SERVICE_TIERS.join(", "),
                        json!(t)
                    ),
                ));
            }
        }
        if let Some(n) = self.max_tool_calls {
            range_i("max_tool_calls", n, MAX_TOKENS)?;
        }
        Ok(())
    }

    /// `truncation: "auto"` drops the oldest turns of a prompt that does not fit.
    pub fn truncation_auto(&self) -> Result<bool, ApiError> {
        match self.truncation.as_deref() {
            None | Some("disabled") => Ok(false),
            Some("auto") => Ok(true),
            Some(t) => Err(ApiError::bad_param(
                "truncation",
                format!(
                    "truncation must be \"auto\" or \"disabled\", got {}.",
                    json!(t)
                ),
            )),
        }
    }

    /// OpenAI's limits: 16 string values, keys up to 64 characters, values up to 512.
    pub fn check_metadata(&self) -> Result<(), ApiError> {
        let Some(m) = &self.metadata else {
            return Ok(());
        };
        let bad = |msg: String| Err(ApiError::bad_param("metadata", msg));
        if m.len() > METADATA_KEYS {
            return bad(format!(
                "metadata must have at most {METADATA_KEYS} keys, got {}.",
                m.len()
            ));
        }
        for (k, v) in m {
            let n = k.chars().count();
            if n > METADATA_KEY_CHARS {
                return bad(format!(
                    "metadata keys must be at most {METADATA_KEY_CHARS} characters, got {n}."
                ));
            }
            let Some(s) = v.as_str() else {
                return bad("metadata values must be strings.".into());
            };
            let n = s.chars().count();
            if n > METADATA_VALUE_CHARS {
                return bad(format!(
                    "metadata values must be at most {METADATA_VALUE_CHARS} characters, got {n}."
                ));
            }
        }
        Ok(())
    }

    /// The sampling fields as chat completions reads them; `max_output_tokens` checked here
    /// so that its errors name it.
    pub fn sampling(&self, limit: Option<u32>) -> Result<SamplingRequest, ApiError> {
        if let Some(m) = self.max_output_tokens {
            range_i("max_output_tokens", m, MAX_TOKENS)?;
            if let Some(l) = limit.filter(|l| m > *l as i64) {
                return Err(ApiError::bad_param(
                    "max_output_tokens",
                    format!(
                        "max_output_tokens must be at most {l} (the server's --max-tokens-limit), got {m}."
                    ),
                ));
            }
        }
        Ok(SamplingRequest {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            max_tokens: self.max_output_tokens,
            cache_salt: self.cache_salt.clone(),
            priority: self.priority,
            logit_bias: self.logit_bias.clone(),
            skip_special_tokens: self.skip_special_tokens,
            include_stop_str_in_output: self.include_stop_str_in_output,
            ..Default::default()
        })
    }
}

/// OpenAI's item ids: `msg_<32 hex>`.
pub fn new_item_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4().simple())
}

/// The input as stored (`input_items`, with ids) and as chat messages for the template.
pub struct Input {
    pub items: Vec<Value>,
    pub messages: Vec<Value>,
}

const ROLES: [&str; 4] = ["user", "system", "developer", "assistant"];

/// What `input` may be (read by `read_input`): a string, or a non-empty list of messages.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // a schema only
pub enum ResponsesInput {
    Text(String),
    Items(Vec<InputMessage>),
}

/// An input item: a message (`type` "message" or absent).
#[derive(ToSchema)]
#[allow(dead_code)] // a schema only
pub struct InputMessage {
    #[serde(rename = "type")]
    kind: Option<MessageKind>,
    #[schema(schema_with = role_schema)]
    role: String,
    #[schema(value_type = InputContent)]
    content: Value,
}

#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // a schema only
pub enum MessageKind {
    Message,
}

/// `ROLES`, as the document lists them.
fn role_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(ROLES))
}

#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // a schema only
pub enum InputContent {
    Text(String),
    Parts(Vec<InputPart>),
}

#[derive(ToSchema)]
#[allow(dead_code)] // a schema only
pub struct InputPart {
    #[serde(rename = "type")]
    kind: PartKind,
    text: String,
}

#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)] // a schema only
pub enum PartKind {
    InputText,
    OutputText,
}

/// A string is one user message; a list holds messages (`{"role", "content"}`, optionally
/// `"type": "message"`) whose content is a string or text parts.
pub fn read_input(input: &Value) -> Result<Input, ApiError> {
    let bad = |msg: String| ApiError::bad_param("input", msg);
    let list = match input {
        Value::String(s) => return Ok(one_input("user", vec![(part_type("user"), s.clone())])),
        Value::Array(a) if a.is_empty() => return Err(bad("input must not be empty.".into())),
        Value::Array(a) => a,
        _ => {
            return Err(bad(
                "input must be a string or a list of input items.".into()
            ))
        }
    };
    let mut out = Input {
        items: vec![],
        messages: vec![],
    };
    for (i, item) in list.iter().enumerate() {
        let Some(o) = item.as_object() else {
            return Err(bad(format!("input[{i}] must be an object.")));
        };
        match o.get("type") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t == "message" => {}
            Some(Value::String(t)) if t == "function_call" || t == "function_call_output" => {
                tool_item(&mut out, i, o)?;
                continue;
            }
            // An earlier reply's reasoning, handed back (the Agents SDK does): listed with the
            // input items, not rendered (chat templates drop earlier turns' reasoning).
            Some(Value::String(t)) if t == "reasoning" => {
                out.items.push(item.clone());
                continue;
            }
            Some(t) => {
                return Err(bad(format!(
                    "input[{i}]: item type {} is not supported (only messages, function_call, \
                     function_call_output and reasoning).",
                    t.as_str()
                        .map_or("<not a string>".to_string(), |t| json!(t).to_string())
                )))
            }
        }
        let role = match o.get("role").and_then(Value::as_str) {
            Some(r) if ROLES.contains(&r) => r,
            _ => {
                return Err(bad(format!(
                    "input[{i}].role must be one of user, system, developer, assistant."
                )))
            }
        };
        let parts = match o.get("content") {
            Some(Value::String(s)) => vec![(part_type(role), s.clone())],
            Some(Value::Array(ps)) => {
                let mut parts = vec![];
                for (j, p) in ps.iter().enumerate() {
                    match (
                        p.get("type").and_then(Value::as_str),
                        p.get("text").and_then(Value::as_str),
                    ) {
                        (Some(t @ ("input_text" | "output_text")), Some(text)) => {
                            parts.push((if t == "input_text" { "input_text" } else { "output_text" }, text.to_string()))
                        }
                        (t, _) => {
                            return Err(bad(format!(
                                "input[{i}].content[{j}]: content part type {} is not supported (text only).",
                                t.map_or("<missing>".to_string(), |t| json!(t).to_string())
                            )))
                        }
                    }
                }
                parts
            }
            _ => {
                return Err(bad(format!(
                    "input[{i}].content must be a string or a list of content parts."
                )))
            }
        };
        let one = one_input(role, parts);
        out.items.extend(one.items);
        out.messages.extend(one.messages);
    }
    Ok(out)
}

/// A `function_call` item (the assistant's call: a `tool_calls` entry of the assistant message
/// before it, or of a new one) or a `function_call_output` (a `tool` message answering it).
fn tool_item(out: &mut Input, i: usize, o: &Map<String, Value>) -> Result<(), ApiError> {
    let text = |key: &str| match o.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(ApiError::bad_param(
            "input",
            format!("input[{i}].{key} must be a string."),
        )),
    };
    let call_id = text("call_id")?;
    let mut item = Value::Object(o.clone());
    let message = if o.get("type").and_then(Value::as_str) == Some("function_call") {
        let call = json!({"id": call_id, "type": "function",
                          "function": {"name": text("name")?, "arguments": text("arguments")?}});
        if !o.contains_key("id") {
            item["id"] = json!(new_call_item_id());
        }
        item["status"] = json!("completed");
        let last = out.messages.last_mut().filter(|m| m["role"] == "assistant");
        match last.and_then(|m| m.as_object_mut()) {
            Some(m) => {
                let calls = m.entry("tool_calls").or_insert_with(|| json!([]));
                if let Value::Array(calls) = calls {
                    calls.push(call);
                }
                None
            }
            None => Some(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
        }
    } else {
        let output = match o.get("output") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Option<Vec<_>>>()
                .map(|t| t.join("\n"))
                .ok_or_else(|| {
                    ApiError::bad_param(
                        "input",
                        format!("input[{i}].output must be a string or a list of text parts."),
                    )
                })?,
            _ => text("output")?,
        };
        if !o.contains_key("id") {
            item["id"] = json!(new_call_item_id());
        }
        Some(json!({"role": "tool", "tool_call_id": call_id, "content": output}))
    };
    out.items.push(item);
    out.messages.extend(message);
    Ok(())
}

/// OpenAI's function call item ids: `fc_<32 hex>`.
pub fn new_call_item_id() -> String {
    format!("fc_{}", uuid::Uuid::new_v4().simple())
}

/// What a plain string becomes: the assistant's own words are output text.
fn part_type(role: &str) -> &'static str {
    if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    }
}

fn one_input(role: &str, parts: Vec<(&'static str, String)>) -> Input {
    let text = parts
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let content: Vec<Value> = parts
        .into_iter()
        .map(|(t, text)| match t {
            "output_text" => json!({"type": t, "text": text, "annotations": []}),
            _ => json!({"type": t, "text": text}),
        })
        .collect();
    // Templates know system, not OpenAI's newer name for it.
    let template_role = if role == "developer" { "system" } else { role };
    Input {
        items: vec![json!({
            "id": new_item_id(),
            "type": "message",
            "role": role,
            "content": content,
            "status": "completed",
        })],
        messages: vec![json!({"role": template_role, "content": text})],
    }
}
