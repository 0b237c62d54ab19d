//! Request intake shared by every endpoint: a body read into its typed request (a JSON
//! object; the error names the first mistyped field in body order), `stream_options`, and
//! the documented OpenAI/vLLM fields this server does not honour, refused by name instead of
//! silently ignored.
use crate::errors::ApiError;
use crate::validation::Bound;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Mutex, OnceLock};
use utoipa::ToSchema;

#[derive(Debug, Default, ToSchema)]
pub struct StreamOptions {
    /// A last chunk with the usage (false by default).
    // `serde(default)` tells the schema what the Deserialize below does.
    #[serde(default)]
    pub include_usage: bool,
    /// vLLM's: with `include_usage`, every chunk carries the running usage of its choice.
    #[serde(default)]
    pub continuous_usage_stats: bool,
}

impl StreamOptions {
    /// (`include_usage`, `continuous_usage_stats` with it): the usage a stream's chunks carry.
    /// `force` (`--enable-force-include-usage`) includes the usage whatever the request says,
    /// as vLLM's flag does.
    pub fn usage(opts: Option<&StreamOptions>, force: bool) -> (bool, bool) {
        let include = force || opts.is_some_and(|o| o.include_usage);
        (
            include,
            include && opts.is_some_and(|o| o.continuous_usage_stats),
        )
    }
}

/// A JSON object only (serde's derive would also read it from the sequence of its fields).
impl<'de> Deserialize<'de> for StreamOptions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            #[serde(default)]
            include_usage: bool,
            #[serde(default)]
            continuous_usage_stats: bool,
        }
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Fields, A::Error> {
                Fields::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        let fields = d.deserialize_map(Object)?;
        Ok(StreamOptions {
            include_usage: fields.include_usage,
            continuous_usage_stats: fields.continuous_usage_stats,
        })
    }
}

/// A documented request field that the server does not honour: a request that sets it to
/// anything but a neutral value is refused, naming it.
pub struct Unhonoured {
    pub field: &'static str,
    /// The values that ask for nothing (null always does).
    pub neutral: fn(&Value) -> bool,
    /// Why, as the refusal says it.
    pub why: &'static str,
}

pub fn never(_: &Value) -> bool {
    false
}
pub fn empty_or_false(v: &Value) -> bool {
    matches!(v, Value::Bool(false)) || v.as_array().is_some_and(Vec::is_empty)
}
/// false, 0, "", [] or {}: a value that asks for nothing.
pub fn nothing(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Null => true,
    }
}
pub fn truthy(v: &Value) -> bool {
    matches!(v, Value::Bool(true))
}
pub fn zero(v: &Value) -> bool {
    v.as_f64() == Some(0.0)
}
pub fn text_format(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("text")
}
pub fn no_tool(v: &Value) -> bool {
    v.as_str() == Some("none")
}
pub fn one(v: &Value) -> bool {
    v.as_f64() == Some(1.0)
}
pub fn left(v: &Value) -> bool {
    v.as_str() == Some("left")
}
pub fn text_modality(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().all(|m| m.as_str() == Some("text")))
}

const FUNCTIONS: &str =
    "OpenAI's deprecated function calling is not served; use tools and tool_choice";
const VLLM: &str = "this vLLM extension is not implemented by this server yet";
const MULTIMODAL: &str = "multimodal inputs are not supported";
pub const KV_TRANSFER: &str =
    "disaggregated serving (KV and encoder-cache transfer) is not supported";
const RENDER_ONLY: &str =
    "vLLM reads it only on its /render endpoints, which this server does not serve";

/// A list of `Unhonoured`, one `"field" => neutral, why;` a line.
macro_rules! unhonoured {
    ($($field:literal => $neutral:expr, $why:expr;)*) => {
        &[$(Unhonoured { field: $field, neutral: $neutral, why: $why }),*]
    };
}

/// Structured outputs' forms that are not served (the others: `structured::ConstraintFields`).
const OUTPUT_CONSTRAINTS: &[Unhonoured] = unhonoured! {
    "structural_tag" => never, "use response_format or structured_outputs instead";
};

/// vLLM's extensions of both generate endpoints that are not implemented yet.
const VLLM_EXTENSIONS: &[Unhonoured] = unhonoured! {
    "logits_processors" => empty_or_false, VLLM;
    "kv_transfer_params" => never, VLLM;
    "vllm_xargs" => never, VLLM;
    "thinking_token_budget" => never, "thinking budgets are not implemented by this server yet";
    "watermarking" => empty_or_false, VLLM;
    "logprob_token_ids" => never, VLLM;
    "repetition_detection" => never, VLLM;
    "stream_interval" => one, "every token is streamed as it comes (only 1 is served)";
    "truncation_side" => left, "truncate_prompt_tokens always keeps a prompt's last tokens \
        (\"left\" is served)";
    // Not applicable here (docs/api_fields.md): refused when they ask for anything.
    "ec_transfer_params" => nothing, KV_TRANSFER;
    "routed_experts_prompt_start" => nothing, "no mixture-of-experts routing data is exported";
    "return_token_offsets" => nothing, RENDER_ONLY;
    "return_mm_kwargs" => truthy, RENDER_ONLY;
};

const CHAT_ONLY: &[Unhonoured] = unhonoured! {
    "functions" => empty_or_false, FUNCTIONS;
    "function_call" => no_tool, FUNCTIONS;
    "reasoning_effort" => never, "reasoning output is not implemented by this server yet";
    "audio" => never, "audio output is not supported";
    "modalities" => text_modality, "only text output is supported";
    "prediction" => never, "predicted outputs are not implemented by this server";
    "web_search_options" => never, "web search is not supported";
    "return_prompt_text" => empty_or_false, VLLM;
};

/// The options of multimodal inputs (chat, embeddings, Responses).
pub const MULTIMODAL_OPTIONS: &[Unhonoured] = unhonoured! {
    "mm_processor_kwargs" => nothing, MULTIMODAL;
    "media_io_kwargs" => nothing, MULTIMODAL;
};

const COMPLETION_ONLY: &[Unhonoured] = unhonoured! {
    "prompt_embeds" => never, "prompt embeddings are not supported";
};

pub const CHAT_UNHONOURED: &[&[Unhonoured]] = &[
    OUTPUT_CONSTRAINTS,
    CHAT_ONLY,
    MULTIMODAL_OPTIONS,
    VLLM_EXTENSIONS,
];
pub const COMPLETION_UNHONOURED: &[&[Unhonoured]] =
    &[OUTPUT_CONSTRAINTS, COMPLETION_ONLY, VLLM_EXTENSIONS];

/// A request body: a JSON object. Its error names the first mistyped field in body order.
pub trait RequestBody: DeserializeOwned + ToSchema {
    /// Readers of the `#[serde(flatten)]`ed groups, whose errors serde reports without a path.
    const GROUPS: &'static [FieldError] = &[];
    /// The documented fields it refuses (see `Unhonoured`), in groups.
    const UNHONOURED: &'static [&'static [Unhonoured]] = &[];
    /// Its own bounded fields (those of flattened groups are the group's), for the OpenAPI
    /// document; validation checks the same `Bound`s.
    const BOUNDS: &'static [(&'static str, Bound)] = &[];
}

/// The path and message of the error reading a value as some type, if any.
pub type FieldError = fn(&Value) -> Option<(String, String)>;

pub fn field_error<T: DeserializeOwned>(v: &Value) -> Option<(String, String)> {
    serde_path_to_error::deserialize::<_, T>(v)
        .err()
        .map(|e| (e.path().to_string(), e.into_inner().to_string()))
}

fn check_unhonoured(groups: &[&[Unhonoured]], fields: &Map<String, Value>) -> Result<(), ApiError> {
    for u in groups.iter().copied().flatten() {
        match fields.get(u.field) {
            Some(v) if !v.is_null() && !(u.neutral)(v) => {
                return Err(ApiError::bad_param(
                    u.field,
                    format!("{} is not supported: {}.", u.field, u.why),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Where fields that no request type knows are reported: like vLLM, the server ignores them
/// and logs each one once (per request schema and name). A shell sets its logger at start-up;
/// it is called with the schema's name and the field's.
static UNKNOWN_FIELD_LOG: OnceLock<fn(&str, &str)> = OnceLock::new();

/// What both shells log for such a field.
pub fn ignored_field_message(field: &str) -> String {
    format!("request field {field:?} is not known to this server and was ignored (logged once)")
}

pub fn log_unknown_fields_with(log: fn(&str, &str)) {
    let _ = UNKNOWN_FIELD_LOG.set(log);
}

/// The top-level field names `T`'s schema accepts: its properties and those of the schemas it
/// is made of (`#[serde(flatten)]` makes an `allOf` of them), worked out once per type.
fn known_fields<T: ToSchema>() -> &'static HashSet<String> {
    static KNOWN: Mutex<BTreeMap<String, &'static HashSet<String>>> = Mutex::new(BTreeMap::new());
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    known.entry(T::name().into_owned()).or_insert_with(|| {
        let mut parts = vec![];
        T::schemas(&mut parts);
        fn json<S: serde::Serialize>(s: &S) -> Value {
            serde_json::to_value(s).unwrap_or_default()
        }
        let parts: BTreeMap<String, Value> =
            parts.iter().map(|(n, s)| (n.clone(), json(s))).collect();
        fn collect(parts: &BTreeMap<String, Value>, s: &Value, out: &mut HashSet<String>) {
            if let Some(r) = s["$ref"].as_str() {
                let name = r.trim_start_matches("#/components/schemas/");
                if let Some(part) = parts.get(name) {
                    collect(parts, part, out);
                }
                return;
            }
            let props = s["properties"].as_object().into_iter().flatten();
            out.extend(props.map(|(k, _)| k.clone()));
            for part in s["allOf"].as_array().into_iter().flatten() {
                collect(parts, part, out);
            }
        }
        let mut out = HashSet::new();
        collect(&parts, &json(&T::schema()), &mut out);
        Box::leak(Box::new(out))
    })
}

/// The body's fields that neither `T`'s schema nor its refused list names, each reported the
/// first time it is seen.
fn report_unknown<T: RequestBody>(fields: &Map<String, Value>) {
    let Some(log) = UNKNOWN_FIELD_LOG.get() else {
        return;
    };
    static SEEN: Mutex<BTreeSet<(String, String)>> = Mutex::new(BTreeSet::new());
    let schema = T::name();
    let known = known_fields::<T>();
    let refused = |k: &str| {
        T::UNHONOURED
            .iter()
            .copied()
            .flatten()
            .any(|u| u.field == k)
    };
    for k in fields.keys() {
        if known.contains(k) || refused(k) {
            continue;
        }
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        if seen.insert((schema.to_string(), k.clone())) {
            drop(seen);
            log(&schema, k);
        }
    }
}

/// The body (already within the size limit) as the typed request.
pub fn parse_body<T: RequestBody>(bytes: &[u8]) -> Result<T, ApiError> {
    parse_fields(json_object(bytes)?)
}

/// The body as a JSON object, before it is read as a request.
pub fn json_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(ApiError::bad(
            "Invalid request: the body must be a JSON object.",
        )),
        Err(e) => Err(ApiError::bad(format!("Invalid JSON body: {e}"))),
    }
}

/// A body's fields as the typed request: mistyped fields and refused values are 400s that
/// name the field; unknown ones are logged.
pub fn parse_fields<T: RequestBody>(fields: Map<String, Value>) -> Result<T, ApiError> {
    // First: a refused field is named even where the body lacks a required one (the chat
    // form of embeddings has `messages` and no `input`).
    check_unhonoured(T::UNHONOURED, &fields)?;
    let value = Value::Object(fields);
    let fields = value.as_object().expect("an object");
    let (path, inner) = match serde_path_to_error::deserialize(&value) {
        Ok(v) => {
            report_unknown::<T>(fields);
            return Ok(v);
        }
        Err(e) => (e.path().to_string(), e.into_inner().to_string()),
    };
    // The field first in the body of those mistyped is `param` (the message has the path,
    // e.g. `stop_token_ids[1]: invalid value: ...`); else serde's error has no field (a
    // missing one).
    let field = |p: &str| {
        let name = p.split(['.', '[']).next().filter(|n| !n.is_empty())?;
        Some((fields.keys().position(|k| k == name)?, name.to_string()))
    };
    let first = T::GROUPS
        .iter()
        .filter_map(|read| read(&value))
        .chain([(path, inner.clone())])
        .filter_map(|(p, m)| Some((field(&p)?, p, m)))
        .min_by_key(|((i, _), ..)| *i);
    Err(match first {
        Some(((_, name), p, m)) => ApiError::bad_param(&name, format!("Invalid request: {p}: {m}")),
        None => ApiError::bad(format!("Invalid request: {inner}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, ToSchema)]
    struct Req {
        #[allow(dead_code)]
        n: Option<i64>,
    }
    impl RequestBody for Req {
        const UNHONOURED: &'static [&'static [Unhonoured]] = CHAT_UNHONOURED;
    }

    fn err(body: &str) -> ApiError {
        parse_body::<Req>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn mistyped_and_refused_fields_are_named() {
        let e = err(r#"{"n": "x"}"#);
        assert_eq!(e.body()["error"]["param"], "n");
        assert!(
            e.to_string()
                .starts_with("Invalid request: n: invalid type"),
            "{e}"
        );
        let e = err(r#"{"structural_tag": "{}"}"#);
        assert_eq!(e.body()["error"]["param"], "structural_tag");
        assert_eq!(
            e.to_string(),
            "structural_tag is not supported: use response_format or structured_outputs \
             instead."
        );
        assert_eq!(
            err(r#"{"function_call": "auto"}"#).body()["error"]["param"],
            "function_call"
        );
        assert_eq!(
            err("[1]").to_string(),
            "Invalid request: the body must be a JSON object."
        );
        assert!(err("{").to_string().starts_with("Invalid JSON body: "));
    }

    #[test]
    fn neutral_values_ask_for_nothing() {
        for body in [
            r#"{"structural_tag": null, "functions": [], "function_call": "none"}"#,
            r#"{"priority": 0, "modalities": ["text"], "bad_words": []}"#,
            r#"{"user": "u", "metadata": {"a": "b"}, "unknown_field": 1}"#,
        ] {
            assert!(parse_body::<Req>(body.as_bytes()).is_ok(), "{body}");
        }
    }

    static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

    #[test]
    fn unknown_fields_are_logged_once_known_and_refused_ones_never() {
        log_unknown_fields_with(|schema, field| {
            LOGGED.lock().unwrap().push(format!("{schema}.{field}"))
        });
        let body = br#"{"messages": [], "temperature": 0.5, "chat_template_kwargs": {},
                        "tools": [], "no_such_field_x": 1, "no_such_field_y": 2}"#;
        for _ in 0..3 {
            parse_body::<crate::chat::ChatRequest>(body).unwrap();
        }
        let logged: Vec<String> = LOGGED.lock().unwrap().clone();
        let mine = |f: &str| logged.iter().filter(|l| l.ends_with(f)).count();
        assert_eq!(mine(".no_such_field_x"), 1, "{logged:?}");
        assert_eq!(mine(".no_such_field_y"), 1, "{logged:?}");
        assert!(logged.contains(&"ChatCompletionRequest.no_such_field_x".to_string()));
        for known in ["messages", "temperature", "chat_template_kwargs", "tools"] {
            assert_eq!(mine(&format!(".{known}")), 0, "{known}: {logged:?}");
        }
    }
}
