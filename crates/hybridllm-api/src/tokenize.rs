//! POST /tokenize and /detokenize (vLLM's), and the bodies of GET /v1/models and
//! /tokenizer_info.
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::prompt::{ChatMessage, TemplateArgs};
use crate::request::{field_error, FieldError, RequestBody};
use crate::text::tokenizer::DecodeOpts;
use crate::usage::new_id;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

/// vLLM's /tokenize: exactly one of `prompt` or `messages`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    #[schema(value_type = Option<Vec<ChatMessage>>)]
    pub messages: Option<Vec<Value>>,
    pub add_special_tokens: Option<bool>,
    /// vLLM's: the tokens' vocabulary strings beside their ids (`token_strs`, else null).
    #[serde(default)]
    pub return_token_strs: bool,
    #[serde(flatten)]
    pub template: TemplateArgs,
}

impl RequestBody for TokenizeRequest {
    const GROUPS: &'static [FieldError] = &[field_error::<TemplateArgs>];
}

/// What to tokenize: a prompt as it is, or chat messages through the chat template.
pub struct TokenizeCall {
    pub text: String,
    pub add_special_tokens: bool,
    pub return_token_strs: bool,
}

impl TokenizeCall {
    pub fn new(ctx: &ApiContext, req: TokenizeRequest) -> Result<Self, ApiError> {
        ctx.check_model(&req.model)?;
        let (text, default_special) = match (req.prompt, &req.messages) {
            (Some(p), None) => (p, true),
            (None, Some(m)) => (ctx.render_prompt(m, &req.template, true)?, false),
            _ => {
                return Err(ApiError::bad(
                    "Exactly one of `prompt` or `messages` must be given.",
                ))
            }
        };
        Ok(TokenizeCall {
            text,
            add_special_tokens: req.add_special_tokens.unwrap_or(default_special),
            return_token_strs: req.return_token_strs,
        })
    }

    /// The body for `tokens`; `token_strs`: the vocabulary's string of each (as vLLM's
    /// `convert_ids_to_tokens`), or null.
    pub fn body(ctx: &ApiContext, tokens: &[u32], token_strs: bool) -> Value {
        let strs = token_strs.then(|| {
            tokens
                .iter()
                .map(|&t| ctx.tokenizer.id_to_token(t))
                .collect()
        });
        serde_json::to_value(TokenizeResponse {
            count: tokens.len(),
            max_model_len: ctx.max_model_len,
            tokens,
            token_strs: strs,
        })
        .expect("a tokenize body serializes")
    }
}

/// The body of /tokenize.
#[derive(Serialize, ToSchema)]
pub struct TokenizeResponse<'a> {
    pub count: usize,
    pub max_model_len: u32,
    pub tokens: &'a [u32],
    /// With `return_token_strs`; null otherwise.
    pub token_strs: Option<Vec<String>>,
}

/// The body of /detokenize.
#[derive(Serialize, ToSchema)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

/// vLLM's /detokenize.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<u32>,
}

impl RequestBody for DetokenizeRequest {}

pub fn detokenize(ctx: &ApiContext, req: DetokenizeRequest) -> Result<Value, ApiError> {
    ctx.check_model(&req.model)?;
    ctx.check_ids("tokens", &req.tokens)?;
    let prompt = ctx
        .tokenizer
        .decode(&req.tokens, DecodeOpts::default())
        .map_err(ApiError::Internal)?;
    Ok(serde_json::to_value(DetokenizeResponse { prompt }).expect("a detokenize body serializes"))
}

/// GET /load, vLLM's: the generation requests in flight when `--enable-server-load-tracking`
/// is on, else 0 (as vLLM, which counts nothing then). Open, like /health: load balancers
/// poll it.
pub fn load(in_flight: i64, tracking: bool) -> Value {
    json!({"server_load": if tracking { in_flight.max(0) } else { 0 }})
}

/// GET /v1/models: each served name, `created` when the server started, `root` the model's
/// folder.
pub fn models(ctx: &ApiContext, created: i64, root: &str) -> Value {
    let data: Vec<Value> = ctx
        .served_names
        .iter()
        .map(|name| {
            json!({
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "hybridllm",
                "root": root,
                "parent": null,
                "max_model_len": ctx.max_model_len,
                "permission": [{
                    "id": new_id("modelperm"),
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": false,
                    "allow_sampling": true,
                    "allow_logprobs": true,
                    "allow_search_indices": false,
                    "allow_view": true,
                    "allow_fine_tuning": false,
                    "organization": "*",
                    "group": null,
                    "is_blocking": false,
                }],
            })
        })
        .collect();
    json!({"object": "list", "data": data})
}

/// An AddedToken object (`{"content": ..., "lstrip": ...}`) as its text; lists element-wise.
fn plain(v: Value) -> Value {
    match v {
        Value::Object(o) if o.get("content").is_some_and(Value::is_string) => o["content"].clone(),
        Value::Array(a) => Value::Array(a.into_iter().map(plain).collect()),
        v => v,
    }
}

/// GET /tokenizer_info, vLLM's: the tokenizer's configuration as its tokenizer_config.json
/// holds it (`config`: its text, None when the tokenizer has none; `path` names it in an
/// error) — what transformers keeps as `init_kwargs` — special tokens as plain strings, the
/// added-token table left out, with the chat template and context window this server uses.
pub fn tokenizer_info(
    ctx: &ApiContext,
    path: &str,
    config: Option<&str>,
) -> Result<Value, ApiError> {
    let read: Map<String, Value> = match config.map(serde_json::from_str) {
        None => Map::new(),
        Some(Ok(Value::Object(o))) => o,
        Some(_) => return Err(ApiError::Internal(format!("{path} is not a JSON object"))),
    };
    let mut cfg: Map<String, Value> = read
        .into_iter()
        .filter(|(k, _)| k != "added_tokens_decoder")
        .map(|(k, v)| (k, plain(v)))
        .collect();
    for (key, value) in [("bos_token", &ctx.bos_token), ("eos_token", &ctx.eos_token)] {
        if !value.is_empty() {
            cfg.insert(key.into(), json!(value));
        }
    }
    cfg.entry("tokenizer_class")
        .or_insert(json!("PreTrainedTokenizerFast"));
    cfg.insert("model_max_length".into(), json!(ctx.max_model_len));
    match &ctx.template {
        Some(t) => cfg.insert("chat_template".into(), json!(t.source())),
        None => cfg.remove("chat_template"),
    };
    Ok(Value::Object(cfg))
}
