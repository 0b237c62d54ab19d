//! The OpenAPI 3.1 document of every route both shells serve: the schemas of the requests and
//! of the bodies written from structs (errors, completions, embeddings, tokenize) derived
//! from the core's own types (utoipa's `ToSchema`, which reads their serde attributes), the
//! numeric bounds from the `Bound`s validation checks, the open paths from `Auth`, and the
//! operations listed once here. Built once; the Rust frontend serves it at `/openapi.json`
//! and the Python fallback through `hybridllm._api.openapi_json`, so both serve the same
//! bytes.
use crate::auth::Auth;
use crate::chat::{ChatCompletion, ChatRequest};
use crate::completions::{CompletionRequest, TextCompletion};
use crate::embeddings::{Body as EmbeddingList, EmbeddingRequest};
use crate::errors::ErrorBody;
use crate::request::RequestBody;
use crate::responses::input::ResponsesRequest;
use crate::responses::INPUT_ITEMS_LIMIT;
use crate::tokenize::{DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse};
use crate::validation::{Bound, SamplingRequest};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;
use utoipa::openapi::path::{OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, HttpMethod, InfoBuilder, ObjectBuilder, OpenApiBuilder,
    PathItem, PathsBuilder, Ref, RefOr, Required, ResponseBuilder, Schema, Type,
};
use utoipa::ToSchema;

/// How a route answers besides its errors.
enum Answer {
    /// A JSON body, of this component schema (None: an object described in words).
    Json(Option<&'static str>),
    /// A JSON body (as `Json`), or SSE events with `stream: true`.
    JsonOrEvents(Option<&'static str>),
    /// A body of this media type.
    Text(&'static str),
    /// No body.
    Empty,
}

/// One operation of the API.
struct Op {
    method: HttpMethod,
    path: &'static str,
    id: &'static str,
    summary: &'static str,
    /// The request body's component schema.
    body: Option<&'static str>,
    answer: Answer,
    answer_says: &'static str,
    /// The error statuses it may answer (their bodies are `ErrorResponse`).
    errors: &'static [u16],
}

/// What a refusal of each status means.
const ERRORS: &[(u16, &str)] = &[
    (400, "Invalid request (the error names the field)"),
    (401, "Missing or wrong API key"),
    (404, "Unknown model or id"),
    (413, "Body over the size limit"),
    (415, "Not a JSON content type"),
    (
        429,
        "Admission control: too many waiting requests (Retry-After)",
    ),
    (503, "The engine is unavailable"),
];

const GENERATE: &[u16] = &[400, 401, 404, 413, 415, 429, 503];
const TOKENS: &[u16] = &[400, 401, 404, 413, 415];
const STORED: &[u16] = &[401, 404];
const KEY: &[u16] = &[401];

#[rustfmt::skip]
const OPS: &[Op] = &[
    Op { method: HttpMethod::Post, path: "/v1/chat/completions", id: "createChatCompletion",
         summary: "Chat completion (streamed with stream: true)",
         body: Some("ChatCompletionRequest"), answer: Answer::JsonOrEvents(Some("ChatCompletion")),
         answer_says: "A chat.completion object, or chat.completion.chunk events",
         errors: GENERATE },
    Op { method: HttpMethod::Post, path: "/v1/chat/completions/batch",
         id: "createBatchChatCompletion",
         summary: "vLLM's batch chat: one choice per conversation (not streamed)",
         body: Some("BatchChatCompletionRequest"), answer: Answer::Json(Some("ChatCompletion")),
         answer_says: "A chat.completion object whose choice i answers conversation i",
         errors: GENERATE },
    Op { method: HttpMethod::Post, path: "/v1/completions", id: "createCompletion",
         summary: "Text completion (streamed with stream: true)",
         body: Some("CompletionRequest"), answer: Answer::JsonOrEvents(Some("TextCompletion")),
         answer_says: "A text_completion object, or its chunk events",
         errors: GENERATE },
    Op { method: HttpMethod::Post, path: "/v1/embeddings", id: "createEmbedding",
         summary: "Embeddings (embedding models)",
         body: Some("EmbeddingRequest"), answer: Answer::Json(Some("EmbeddingList")),
         answer_says: "A list of embedding objects", errors: GENERATE },
    Op { method: HttpMethod::Post, path: "/pooling", id: "pooling",
         summary: "vLLM's pooling endpoint: an embeddings request (task `embed`) of an \
                   embedding model, answered as `pooling` objects",
         body: None, answer: Answer::Json(None),
         answer_says: "A list of pooling objects (`data`: the vector)", errors: GENERATE },
    Op { method: HttpMethod::Post, path: "/inference/v1/generate", id: "generateTokens",
         summary: "vLLM's tokens in, tokens out: `token_ids` and `sampling_params` (vLLM's \
                   SamplingParams fields) in, a GenerateResponse of token ids out",
         body: None, answer: Answer::JsonOrEvents(None),
         answer_says: "{request_id, choices: [{index, logprobs, finish_reason, token_ids}], \
                       prompt_logprobs, kv_transfer_params}, or its chunk events",
         errors: GENERATE },
    Op { method: HttpMethod::Post, path: "/invocations", id: "invocations",
         summary: "vLLM's SageMaker endpoint: a chat completion (`messages`), a completion \
                   (`prompt`) or embeddings (an embedding model's `input`)",
         body: None, answer: Answer::JsonOrEvents(None),
         answer_says: "The answer of the endpoint the body calls", errors: GENERATE },
    Op { method: HttpMethod::Post, path: "/v1/responses", id: "createResponse",
         summary: "A model response (Responses API; named events with stream: true)",
         body: Some("ResponsesRequest"), answer: Answer::JsonOrEvents(None),
         answer_says: "A response object, or its named events", errors: GENERATE },
    Op { method: HttpMethod::Get, path: "/v1/responses/{response_id}", id: "getResponse",
         summary: "A stored response (a background one as it stands)", body: None,
         answer: Answer::Json(None), answer_says: "The response object", errors: &[400, 401, 404] },
    Op { method: HttpMethod::Post, path: "/v1/responses/{response_id}/cancel",
         id: "cancelResponse",
         summary: "Cancel a background response still queued or in progress", body: None,
         answer: Answer::Json(None), answer_says: "The response object, cancelled",
         errors: &[400, 401, 404] },
    Op { method: HttpMethod::Delete, path: "/v1/responses/{response_id}", id: "deleteResponse",
         summary: "Delete a stored response", body: None, answer: Answer::Json(None),
         answer_says: "{id, object: response, deleted: true}", errors: STORED },
    Op { method: HttpMethod::Get, path: "/v1/responses/{response_id}/input_items",
         id: "listInputItems", summary: "A stored response's own input items", body: None,
         answer: Answer::Json(None), answer_says: "A list of input items",
         errors: &[400, 401, 404] },
    Op { method: HttpMethod::Get, path: "/v1/models", id: "listModels",
         summary: "The served model", body: None, answer: Answer::Json(None),
         answer_says: "A list of models", errors: KEY },
    Op { method: HttpMethod::Get, path: "/health", id: "health",
         summary: "200 when the engine serves", body: None, answer: Answer::Empty,
         answer_says: "Healthy", errors: &[] },
    Op { method: HttpMethod::Get, path: "/version", id: "version", summary: "Server version",
         body: None, answer: Answer::Json(None), answer_says: "{version}", errors: &[] },
    Op { method: HttpMethod::Get, path: "/load", id: "load",
         summary: "Requests in flight (vLLM's; 0 without --enable-server-load-tracking)",
         body: None, answer: Answer::Json(None), answer_says: "{server_load}", errors: &[] },
    Op { method: HttpMethod::Get, path: "/openapi.json", id: "openapi", summary: "This document",
         body: None, answer: Answer::Json(None), answer_says: "OpenAPI 3.1", errors: KEY },
    Op { method: HttpMethod::Get, path: "/", id: "playground",
         summary: "The web playground (no key needed to load it; absent with \
                   --disable-playground)",
         body: None, answer: Answer::Text("text/html"), answer_says: "An HTML page",
         errors: &[] },
    Op { method: HttpMethod::Get, path: "/metrics", id: "metrics", summary: "Prometheus metrics",
         body: None, answer: Answer::Text("text/plain"), answer_says: "Prometheus text format",
         errors: KEY },
    Op { method: HttpMethod::Post, path: "/tokenize", id: "tokenize",
         summary: "Token ids of a prompt or chat", body: Some("TokenizeRequest"),
         answer: Answer::Json(Some("TokenizeResponse")), answer_says: "The token ids",
         errors: TOKENS },
    Op { method: HttpMethod::Post, path: "/detokenize", id: "detokenize",
         summary: "Text of token ids", body: Some("DetokenizeRequest"),
         answer: Answer::Json(Some("DetokenizeResponse")), answer_says: "The text",
         errors: TOKENS },
    Op { method: HttpMethod::Get, path: "/tokenizer_info", id: "tokenizerInfo",
         summary: "The tokenizer's configuration (vLLM's /tokenizer_info)", body: None,
         answer: Answer::Json(None), answer_says: "tokenizer_config.json with the chat template",
         errors: KEY },
];

/// The document as JSON text, built on first use.
pub fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| build().to_string())
}

/// Each schema's own bounded properties (flattened groups have theirs).
fn bounds() -> [(&'static str, &'static [(&'static str, Bound)]); 4] {
    [
        ("SamplingRequest", SamplingRequest::BOUNDS),
        ("ChatCompletionRequest", ChatRequest::BOUNDS),
        ("CompletionRequest", CompletionRequest::BOUNDS),
        ("ResponsesRequest", ResponsesRequest::BOUNDS),
    ]
}

fn schemas() -> Vec<(String, RefOr<Schema>)> {
    fn add<T: ToSchema>(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push((T::name().into_owned(), T::schema()));
        T::schemas(out);
    }
    let mut out = vec![];
    add::<ChatRequest>(&mut out);
    add::<CompletionRequest>(&mut out);
    add::<EmbeddingRequest>(&mut out);
    add::<ResponsesRequest>(&mut out);
    add::<TokenizeRequest>(&mut out);
    add::<DetokenizeRequest>(&mut out);
    add::<ChatCompletion>(&mut out);
    add::<TextCompletion>(&mut out);
    add::<EmbeddingList>(&mut out);
    add::<TokenizeResponse>(&mut out);
    add::<DetokenizeResponse>(&mut out);
    add::<ErrorBody>(&mut out);
    out
}

fn json_of(schema: impl Into<RefOr<Schema>>) -> utoipa::openapi::Content {
    ContentBuilder::new().schema(Some(schema)).build()
}

fn object() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Object)
}

fn operation(op: &Op) -> utoipa::openapi::path::Operation {
    let mut b = OperationBuilder::new()
        .operation_id(Some(op.id))
        .summary(Some(op.summary));
    // Open as the default serve options leave it (the playground on, /metrics keyed).
    if Auth::new(vec![], false, true).is_open(op.path) {
        b = b.securities(Some(Vec::<SecurityRequirement>::new()));
    }
    if let Some(name) = op.body {
        b = b.request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content("application/json", json_of(Ref::from_schema_name(name)))
                .build(),
        ));
    }
    for p in parameters(op.path) {
        b = b.parameter(p);
    }
    let ok = ResponseBuilder::new().description(op.answer_says);
    let body = |name: Option<&str>| match name {
        Some(name) => json_of(Ref::from_schema_name(name)),
        None => json_of(object()),
    };
    let ok = match op.answer {
        Answer::Json(name) => ok.content("application/json", body(name)),
        Answer::JsonOrEvents(name) => ok.content("application/json", body(name)).content(
            "text/event-stream",
            json_of(ObjectBuilder::new().schema_type(Type::String)),
        ),
        Answer::Text(media) => ok.content(
            media,
            json_of(ObjectBuilder::new().schema_type(Type::String)),
        ),
        Answer::Empty => ok,
    };
    b = b.response("200", ok.build());
    if op.path == "/health" {
        b = b.response(
            "503",
            ResponseBuilder::new()
                .description("The engine is not serving")
                .build(),
        );
    }
    for status in op.errors {
        let says = ERRORS
            .iter()
            .find(|(s, _)| s == status)
            .map(|(_, says)| *says)
            .expect("every error status is in ERRORS");
        b = b.response(
            status.to_string(),
            ResponseBuilder::new()
                .description(says)
                .content(
                    "application/json",
                    json_of(Ref::from_schema_name("ErrorResponse")),
                )
                .build(),
        );
    }
    b.build()
}

/// The path's parameters (`{response_id}`) and, for input_items, its query.
fn parameters(path: &str) -> Vec<utoipa::openapi::path::Parameter> {
    let string = || ObjectBuilder::new().schema_type(Type::String);
    let mut out = vec![];
    if path.contains("{response_id}") {
        out.push(
            ParameterBuilder::new()
                .name("response_id")
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .schema(Some(string()))
                .build(),
        );
    }
    if path.ends_with("/input_items") {
        let query = |name: &str, says: &str, schema: ObjectBuilder| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some(says))
                .schema(Some(schema))
                .build()
        };
        out.push(query("order", "asc, or desc (the default)", string()));
        out.push(query(
            "limit",
            "Items per page (20 by default)",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(INPUT_ITEMS_LIMIT.lo))
                .maximum(Some(INPUT_ITEMS_LIMIT.hi)),
        ));
        out.push(query("after", "The item id to list after", string()));
    }
    out
}

fn build() -> Value {
    let mut paths = PathsBuilder::new();
    for op in OPS {
        paths = paths.path(op.path, PathItem::new(op.method.clone(), operation(op)));
    }
    let components = ComponentsBuilder::new()
        .schemas_from_iter(schemas())
        .security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        )
        .build();
    let doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("hybridllm")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "OpenAI-compatible LLM inference server (vLLM's extensions included). The \
                     Rust frontend and the Python fallback serve the same API and this same \
                     document.",
                ))
                .build(),
        )
        .paths(paths.build())
        .components(Some(components))
        .security(Some([SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]))
        .build();
    let mut doc = serde_json::to_value(doc).expect("the document serializes");
    for (schema, bounds) in bounds() {
        let schema = &mut doc["components"]["schemas"][schema];
        for (field, bound) in bounds {
            let prop = property(schema, field)
                .unwrap_or_else(|| panic!("a bounded field {field} is not in the schema"));
            set_bound(prop, *bound);
        }
    }
    let batch = batch_chat_schema(&doc["components"]["schemas"]["ChatCompletionRequest"]);
    doc["components"]["schemas"]["BatchChatCompletionRequest"] = batch;
    doc
}

/// vLLM's batch chat body (`chat_batch.rs`): the chat request's schema, bounds included,
/// with `messages` a non-empty list of conversations (each a chat request's `messages`).
fn batch_chat_schema(chat: &Value) -> Value {
    let mut schema = chat.clone();
    let messages = property(&mut schema, "messages").expect("a chat request has messages");
    let mut conversation = messages.clone();
    conversation.insert("minItems".into(), 1.into());
    let list = serde_json::json!({"type": "array", "minItems": 1, "items": conversation,
                                  "description": "The conversations, each answered by the \
                                                  choice of the same index."});
    *messages = list.as_object().expect("an object").clone();
    schema
}

/// A property of an object schema, or of one of its `allOf` parts (a flattened struct).
fn property<'a>(schema: &'a mut Value, name: &str) -> Option<&'a mut Map<String, Value>> {
    if schema["properties"].get(name).is_some() {
        return schema["properties"][name].as_object_mut();
    }
    schema
        .get_mut("allOf")?
        .as_array_mut()?
        .iter_mut()
        .find_map(|part| part.get_mut("properties")?.get_mut(name)?.as_object_mut())
}

/// The bound on a number (or on a map's values: logit_bias).
fn set_bound(prop: &mut Map<String, Value>, b: Bound) {
    let target = match prop.get_mut("additionalProperties") {
        Some(Value::Object(values)) => values,
        _ => prop,
    };
    let integer = target["type"] == "integer"
        || target["type"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("integer")));
    let num = |x: f64| if integer { json!(x as i64) } else { json!(x) };
    let lo = if b.lo_open {
        "exclusiveMinimum"
    } else {
        "minimum"
    };
    target.insert(lo.into(), num(b.lo));
    target.insert("maximum".into(), num(b.hi));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        serde_json::from_str(document()).unwrap()
    }

    /// Every `$ref` in the document names a schema it has.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    out.push(r.clone());
                }
                o.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn document_is_complete_and_resolves() {
        let d = doc();
        assert_eq!(d["openapi"], "3.1.0");
        let mut found = vec![];
        refs(&d, &mut found);
        assert!(!found.is_empty());
        for r in found {
            let name = r.strip_prefix("#/components/schemas/").expect(&r);
            assert!(d["components"]["schemas"].get(name).is_some(), "{r}");
        }
        let ops: Vec<(String, String)> = d["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(p, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    .map(move |m| (m.to_uppercase(), p.clone()))
            })
            .collect();
        assert_eq!(ops.len(), OPS.len());
        let open: Vec<&String> = d["paths"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, item)| {
                item.as_object()
                    .unwrap()
                    .values()
                    .all(|op| op["security"] == json!([]))
            })
            .map(|(p, _)| p)
            .collect();
        assert_eq!(open, ["/health", "/version", "/load", "/"]);
        assert_eq!(d["paths"]["/health"]["get"]["security"], json!([]));
        assert_eq!(d["security"], json!([{"bearer": []}]));
        assert_eq!(
            d["components"]["securitySchemes"]["bearer"],
            json!({"type": "http", "scheme": "bearer"})
        );
        // The same text every time (built once).
        assert!(std::ptr::eq(document(), document()));
    }

    #[test]
    fn bounds_are_validations() {
        let d = doc();
        let s = &d["components"]["schemas"];
        let sampling = &s["SamplingRequest"]["properties"];
        assert_eq!(sampling["temperature"]["minimum"], json!(0.0));
        assert_eq!(sampling["temperature"]["maximum"], json!(2.0));
        assert_eq!(sampling["top_p"]["exclusiveMinimum"], json!(0.0));
        assert!(sampling["top_p"].get("minimum").is_none());
        assert_eq!(sampling["n"]["minimum"], json!(1));
        assert_eq!(sampling["n"]["maximum"], json!(128));
        assert_eq!(
            sampling["logit_bias"]["additionalProperties"]["maximum"],
            json!(100.0)
        );
        assert_eq!(
            s["ResponsesRequest"]["properties"]["max_output_tokens"]["maximum"],
            json!(u32::MAX)
        );
    }

    #[test]
    fn serde_attributes_are_in_the_schemas() {
        let d = doc();
        let s = &d["components"]["schemas"];
        // Flattened groups are parts of the request, not properties of it.
        let chat = &s["ChatCompletionRequest"];
        let parts: Vec<&Value> = chat["allOf"].as_array().unwrap().iter().collect();
        let names: Vec<&str> = parts.iter().filter_map(|p| p["$ref"].as_str()).collect();
        assert_eq!(
            names,
            [
                "#/components/schemas/SamplingRequest",
                "#/components/schemas/ConstraintFields",
                "#/components/schemas/TemplateArgs"
            ]
        );
        let own = parts
            .iter()
            .find(|p| p.get("properties").is_some())
            .unwrap();
        assert_eq!(own["required"], json!(["messages"]));
        assert!(own["properties"].get("sampling").is_none());
        // Option fields take null; only what serde needs is required.
        assert_eq!(
            s["SamplingRequest"]["properties"]["seed"]["type"],
            json!(["integer", "null"])
        );
        assert!(s["SamplingRequest"].get("required").is_none());
        // StreamOptions' include_usage is read with a default.
        assert!(s["StreamOptions"].get("required").is_none());
        // The error body: `param` always there, null or the field.
        assert_eq!(
            s["ErrorDetail"]["required"],
            json!(["message", "type", "param", "code"])
        );
        assert_eq!(s["DetokenizeRequest"]["required"], json!(["tokens"]));
        // Bodies: nullable fields that are always written are required.
        assert_eq!(
            s["CompletionChoice"]["required"],
            json!([
                "index",
                "text",
                "logprobs",
                "finish_reason",
                "stop_reason",
                "prompt_logprobs"
            ])
        );
    }
}
