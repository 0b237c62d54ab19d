//! POST /v1/embeddings: inputs checked, tokenized and truncated here (the worker only pools),
//! returned as floats or base64 (little-endian float32, as the openai client decodes it).
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::request::{RequestBody, Unhonoured, MULTIMODAL_OPTIONS};
use crate::usage::{now, CallerId};
use crate::validation::truncation_limit;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

pub const MAX_INPUTS: usize = 2048;
const BAD_INPUT: &str =
    "input must be a string, a list of strings, a list of token ids, or a list of token-id lists.";

/// OpenAI's embeddings request with vLLM's extensions.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbeddingRequest {
    pub model: Option<String>,
    /// A string, strings, token ids or lists of them (checked by `parse_inputs`); or, instead,
    /// `messages`.
    #[serde(default)]
    #[schema(value_type = Option<crate::completions::PromptInput>)]
    pub input: Value,
    /// vLLM's chat form (EmbeddingChatRequest): chat messages, rendered with the chat
    /// template (the model's, or `chat_template`), the text then embedded as one input
    /// (without the tokenizer's special tokens unless `add_special_tokens`).
    #[schema(value_type = Option<Vec<Object>>)]
    pub messages: Option<Value>,
    /// Chat form: end the prompt with the generation prompt (default false).
    pub add_generation_prompt: Option<bool>,
    /// Chat form: leave the last message open (default false; not with
    /// `add_generation_prompt`).
    pub continue_final_message: Option<bool>,
    /// Chat form: a Jinja template instead of the model's.
    pub chat_template: Option<String>,
    /// Chat form: more variables for the template.
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// "float" (the default), "base64", or vLLM's "bytes" (the raw vectors as the body, a
    /// `metadata` header describing them) and "bytes_only" (the same without the header).
    pub encoding_format: Option<String>,
    /// Only the model's own (no matryoshka models).
    pub dimensions: Option<i64>,
    #[allow(dead_code)] // accepted, as OpenAI documents it; nothing to do with it
    pub user: Option<String>,
    /// -1 (the model's limit) or at least 1.
    pub truncate_prompt_tokens: Option<i64>,
    /// Default true for `input`, false for `messages` (the template adds its own), as vLLM.
    pub add_special_tokens: Option<bool>,
    pub normalize: Option<bool>,
    /// vLLM's current name for `normalize` (which wins when both are set).
    pub use_activation: Option<bool>,
    /// vLLM's: the dtype of base64 and bytes vectors: "float32" (the default), "float16",
    /// "bfloat16".
    pub embed_dtype: Option<String>,
    /// vLLM's: the byte order of base64 and bytes vectors: "native" (the default: little
    /// here), "little" or "big".
    pub endianness: Option<String>,
    /// vLLM's: the response id is `embd-<request_id>` (an `X-Request-Id` header wins).
    pub request_id: Option<String>,
    /// vLLM's: an embedding step shares no KV cache between requests, so every salt is
    /// already isolated; checked as on chat (non-empty).
    pub cache_salt: Option<String>,
}

impl RequestBody for EmbeddingRequest {
    const UNHONOURED: &'static [&'static [Unhonoured]] =
        &[EMBEDDING_UNHONOURED, MULTIMODAL_OPTIONS];
}

/// vLLM's extensions that an embedding request here refuses rather than ignores.
const EMBEDDING_UNHONOURED: &[Unhonoured] = &[
    Unhonoured {
        field: "priority",
        neutral: crate::request::zero,
        why: "an embedding step takes every waiting input in arrival order",
    },
    Unhonoured {
        field: "truncation_side",
        neutral: |v| v.as_str() == Some("right"),
        why: "truncate_prompt_tokens keeps an input's first tokens (\"right\" is served)",
    },
    Unhonoured {
        field: "padding",
        neutral: |v| v.as_str() == Some("do_not_pad"),
        why: "inputs are pooled as they are, under the model's attention mask \
              (\"do_not_pad\" is served)",
    },
];

pub enum Input {
    Text(String),
    Ids(Vec<i64>),
}

fn bad_input(message: String) -> ApiError {
    ApiError::bad_param("input", message)
}

fn integers(v: &Value) -> Option<Vec<i64>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_i64().or_else(|| x.as_u64().map(|_| i64::MAX)))
        .collect()
}

/// The inputs, and whether `input` was a list of them (errors then say `input[i]`).
pub fn parse_inputs(value: Value, vocab: usize) -> Result<(Vec<Input>, bool), ApiError> {
    let is_int = |x: &Value| x.is_i64() || x.is_u64();
    let (inputs, listed): (Vec<Value>, bool) = match value {
        Value::String(_) => (vec![value], false),
        Value::Array(a) if a.is_empty() => {
            return Err(bad_input("input must not be empty.".into()))
        }
        Value::Array(a) if a.iter().all(is_int) => (vec![Value::Array(a)], false),
        Value::Array(a) if a.iter().all(Value::is_string) || a.iter().all(Value::is_array) => {
            (a, true)
        }
        _ => return Err(bad_input(BAD_INPUT.into())),
    };
    if inputs.len() > MAX_INPUTS {
        return Err(bad_input(format!(
            "input holds {} inputs; at most {MAX_INPUTS} are allowed per request.",
            inputs.len()
        )));
    }
    let mut out = Vec::with_capacity(inputs.len());
    for (i, item) in inputs.into_iter().enumerate() {
        let at = if listed {
            format!("input[{i}]")
        } else {
            "input".into()
        };
        if let Value::String(s) = item {
            if s.is_empty() {
                return Err(bad_input(format!("{at} must not be an empty string.")));
            }
            out.push(Input::Text(s));
            continue;
        }
        let Some(ids) = integers(&item) else {
            return Err(bad_input(format!(
                "{at} must be a list of token ids (integers)."
            )));
        };
        if ids.is_empty() {
            return Err(bad_input(format!(
                "{at} must not be an empty list of token ids."
            )));
        }
        // A u64 over i64::MAX reads as i64::MAX above: out of vocabulary either way.
        let raw = item.as_array().into_iter().flatten();
        if let Some((_, v)) = ids
            .iter()
            .zip(raw)
            .find(|(&t, _)| t < 0 || t as usize >= vocab)
        {
            return Err(bad_input(format!(
                "{at}: token id {v} is out of vocabulary (size {vocab})."
            )));
        }
        out.push(Input::Ids(ids));
    }
    Ok((out, listed))
}

/// `value`, when given, is one of `allowed`; else a 400 naming `field` and the choices.
fn one_of(field: &str, value: Option<&str>, allowed: &[&str]) -> Result<(), ApiError> {
    let Some(v) = value.filter(|v| !allowed.contains(v)) else {
        return Ok(());
    };
    let quoted: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
    let (last, rest) = quoted.split_last().expect("choices");
    Err(ApiError::bad_param(
        field,
        format!("{field} must be {} or {last}, got '{v}'.", rest.join(", ")),
    ))
}

fn check_options(ctx: &ApiContext, req: &EmbeddingRequest) -> Result<(), ApiError> {
    one_of(
        "encoding_format",
        req.encoding_format.as_deref(),
        &["float", "base64", "bytes", "bytes_only"],
    )?;
    one_of(
        "embed_dtype",
        req.embed_dtype.as_deref(),
        &["float32", "float16", "bfloat16"],
    )?;
    one_of(
        "endianness",
        req.endianness.as_deref(),
        &["native", "little", "big"],
    )?;
    let hidden = ctx.hidden_size as i64;
    match req.dimensions {
        Some(d) if d != hidden => Err(ApiError::bad_param(
            "dimensions",
            format!(
                "dimensions ({d}) is not supported: this model's embeddings have {hidden} \
                 dimensions and it cannot shorten them (not a matryoshka model)."
            ),
        )),
        _ => Ok(()),
    }
}

/// The chat form's one input: `messages` rendered by the chat template (vLLM's
/// EmbeddingChatRequest, whose generation prompt is off by default).
fn chat_text(ctx: &ApiContext, req: &EmbeddingRequest) -> Result<String, ApiError> {
    if !req.input.is_null() {
        return Err(ApiError::bad_param(
            "messages",
            "Give either input or messages, not both.",
        ));
    }
    let Some(Value::Array(messages)) = &req.messages else {
        return Err(ApiError::bad_param(
            "messages",
            "messages must be a list of chat messages.",
        ));
    };
    if req.add_generation_prompt == Some(true) && req.continue_final_message == Some(true) {
        return Err(ApiError::bad(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        ));
    }
    let args = crate::prompt::TemplateArgs {
        add_generation_prompt: req.add_generation_prompt,
        continue_final_message: req.continue_final_message,
        chat_template: req.chat_template.clone(),
        chat_template_kwargs: req.chat_template_kwargs.clone(),
        ..Default::default()
    };
    let text = ctx.render_prompt(messages, &args, false)?;
    if text.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages render to an empty prompt.",
        ));
    }
    Ok(text)
}

/// Each input's ids as the worker gets them: tokenized, cut to `limit` keeping [CLS]/[SEP].
fn token_ids(
    ctx: &ApiContext,
    inputs: Vec<Input>,
    limit: Option<usize>,
    special: bool,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let tok = &ctx.tokenizer;
    let lower = ctx.lowercase_inputs;
    let has_text = inputs.iter().any(|i| matches!(i, Input::Text(_)));
    let k = tok.num_special_tokens();
    if let (true, true, Some(l)) = (has_text, special, limit) {
        if l <= k {
            return Err(ApiError::bad_param(
                "truncate_prompt_tokens",
                format!(
                    "truncate_prompt_tokens ({l}) must leave room for at least one token \
                     besides the model's {k} special tokens."
                ),
            ));
        }
    }
    inputs
        .into_iter()
        .map(|input| match input {
            Input::Text(s) => {
                let text = if lower { s.to_lowercase() } else { s };
                tok.encode_truncated(&text, special, limit)
                    .map_err(ApiError::bad)
            }
            Input::Ids(ids) => {
                let ids: Vec<u32> = ids.into_iter().map(|t| t as u32).collect();
                Ok(tok.truncate_ids(&ids, limit))
            }
        })
        .collect()
}

/// Each input within the limits: at most `max_embed_len` tokens when set (vLLM's message),
/// and at most `max_model_len` unless chunked processing pools longer ones in pieces.
fn check_lengths(ctx: &ApiContext, ids: &[Vec<u32>], listed: bool) -> Result<(), ApiError> {
    let max_len = ctx.max_model_len as usize;
    for (i, x) in ids.iter().enumerate() {
        let at = if listed {
            format!("input[{i}]")
        } else {
            "input".into()
        };
        if x.is_empty() {
            return Err(bad_input(format!("{at} has no tokens after tokenization.")));
        }
        if let Some(limit) = ctx.max_embed_len.filter(|&l| x.len() > l) {
            return Err(bad_input(format!(
                "This model's maximum embedding input length is {limit} tokens. However, you \
                 requested {} tokens in the input for embedding generation. Please reduce the \
                 length of the input.",
                x.len()
            )));
        }
        if x.len() > max_len && !ctx.chunked_processing {
            return Err(bad_input(format!(
                "{at} has {} tokens, more than the model's maximum input length of {max_len} \
                 tokens; pass truncate_prompt_tokens to truncate it.",
                x.len()
            )));
        }
    }
    Ok(())
}

/// vLLM's chunked processing: each input longer than `chunk` tokens is cut into pieces of
/// `chunk` tokens (the first keeps [CLS], the last [SEP]), each pooled by the worker as an
/// input of its own. Returns the worker's inputs and, when any input was cut, each input's
/// piece lengths (the weights `merge_chunks` averages the pieces' vectors by).
fn split_chunks(ids: Vec<Vec<u32>>, chunk: usize) -> (Vec<Vec<u32>>, Option<Vec<Vec<usize>>>) {
    if ids.iter().all(|x| x.len() <= chunk) {
        return (ids, None);
    }
    let mut inputs = vec![];
    let mut pieces = vec![];
    for x in ids {
        let lens = x.chunks(chunk).map(<[u32]>::len).collect();
        inputs.extend(x.chunks(chunk).map(<[u32]>::to_vec));
        pieces.push(lens);
    }
    (inputs, Some(pieces))
}

/// One vector per input: a cut input's piece vectors averaged, each weighted by its token
/// count, as vLLM aggregates them (each piece pooled and normalized as the request asks;
/// the mean itself is not normalized again).
fn merge_chunks(vectors: &[Vec<f32>], pieces: &[Vec<usize>]) -> Vec<Vec<f32>> {
    let mut at = 0;
    pieces
        .iter()
        .map(|lens| {
            let group = &vectors[at..at + lens.len()];
            at += lens.len();
            if let [one] = group {
                return one.clone();
            }
            let total: usize = lens.iter().sum();
            let mut sum = vec![0f64; group.first().map_or(0, Vec::len)];
            for (v, &n) in group.iter().zip(lens) {
                for (s, &x) in sum.iter_mut().zip(v) {
                    *s += f64::from(x) * n as f64;
                }
            }
            sum.into_iter().map(|s| (s / total as f64) as f32).collect()
        })
        .collect()
}

/// A valid embedding request before its text inputs are tokenized.
pub struct EmbeddingCall {
    inputs: Vec<Input>,
    listed: bool,
    limit: Option<usize>,
    special: bool,
    format: Format,
    pub normalize: Option<bool>,
    caller: CallerId,
    /// vLLM's generic `/pooling` endpoint: the same pooling, its own response shape.
    pooling: bool,
}

impl EmbeddingCall {
    /// vLLM's `POST /pooling` on this embedding model: an embeddings request with a `task`
    /// (the model's own, `embed`, or none) and no `dimensions`, as vLLM's serving refuses.
    pub fn pooling(ctx: &ApiContext, body: &[u8]) -> Result<Self, ApiError> {
        if !ctx.embed {
            return Err(ApiError::bad("The model does not support Pooling API"));
        }
        let mut fields = crate::request::json_object(body)?;
        match fields.remove("task") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t == "embed" => {}
            Some(t) => {
                let shown = t.as_str().map_or(t.to_string(), |s| format!("'{s}'"));
                return Err(ApiError::bad_param(
                    "task",
                    format!("Unsupported task: {shown} Supported tasks: ('embed',)"),
                ));
            }
        }
        if fields.get("dimensions").is_some_and(|d| !d.is_null()) {
            return Err(ApiError::bad_param(
                "dimensions",
                "dimensions is currently not supported",
            ));
        }
        let body = serde_json::to_vec(&fields).map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut call = Self::new(ctx, crate::request::parse_body(&body)?)?;
        call.pooling = true;
        Ok(call)
    }

    pub fn new(ctx: &ApiContext, req: EmbeddingRequest) -> Result<Self, ApiError> {
        ctx.check_model(&req.model)?;
        ctx.check_task("Embeddings", true)?;
        check_options(ctx, &req)?;
        let limit = truncation_limit(req.truncate_prompt_tokens, ctx.max_model_len as usize)?;
        if req.cache_salt.as_deref() == Some("") {
            return Err(ApiError::bad_param(
                "cache_salt",
                "cache_salt must be a non-empty string.",
            ));
        }
        let format = Format::new(&req);
        let chat = req.messages.as_ref().is_some_and(|m| !m.is_null());
        let (inputs, listed) = match chat {
            true => (vec![Input::Text(chat_text(ctx, &req)?)], false),
            false if req.input.is_null() => {
                return Err(bad_input(
                    "input is required (or, vLLM's chat form, messages).".into(),
                ))
            }
            false => parse_inputs(req.input, ctx.vocab_size)?,
        };
        Ok(EmbeddingCall {
            inputs,
            listed,
            limit,
            special: req.add_special_tokens.unwrap_or(!chat),
            format,
            normalize: req.normalize.or(req.use_activation),
            caller: CallerId {
                body: req.request_id,
                header: None,
            },
            pooling: false,
        })
    }

    /// The request's `X-Request-Id` header (it wins over the body's `request_id`).
    pub fn set_request_id_header(&mut self, value: Option<String>) {
        self.caller.header = value;
    }

    /// The bytes of text to tokenize (the shell may do it off its event loop when many).
    pub fn text_bytes(&self) -> usize {
        self.inputs
            .iter()
            .map(|i| match i {
                Input::Text(s) => s.len(),
                Input::Ids(_) => 0,
            })
            .sum()
    }

    /// Each input's ids as the worker gets them (tokenized, truncated, within the model's
    /// limit), and the response to build from the worker's vectors.
    pub fn plan(self, ctx: &ApiContext) -> Result<(Vec<Vec<u32>>, EmbeddingResponse), ApiError> {
        let rid = self
            .caller
            .ids(if self.pooling { "pooling" } else { "embd" })?;
        let ids = token_ids(ctx, self.inputs, self.limit, self.special)?;
        check_lengths(ctx, &ids, self.listed)?;
        let prompt_tokens = ids.iter().map(Vec::len).sum();
        let (ids, pieces) = split_chunks(ids, ctx.max_model_len as usize);
        let resp = EmbeddingResponse {
            id: rid.response,
            engine_id: rid.engine,
            model: ctx.model_name().to_string(),
            prompt_tokens,
            format: self.format,
            pooling: self.pooling,
            pieces,
        };
        Ok((ids, resp))
    }
}

/// Floats, or their little-endian float32 bytes in base64 (`encoding_format`).
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize, ToSchema)]
#[schema(as = Embedding)]
pub struct Datum {
    index: usize,
    /// "embedding"
    object: &'static str,
    embedding: Vector,
}

/// The vectors, as /v1/embeddings or /pooling writes them.
#[derive(Serialize)]
#[serde(untagged)]
enum Data {
    Embeddings(Vec<Datum>),
    Pooling(Vec<PoolingDatum>),
}

/// One input's vector in vLLM's `/pooling` answer.
#[derive(Serialize)]
struct PoolingDatum {
    index: usize,
    /// "pooling"
    object: &'static str,
    data: Vector,
}

/// The body of /v1/embeddings (and, with its own data, of /pooling).
#[derive(Serialize, ToSchema)]
#[schema(as = EmbeddingList)]
pub struct Body<'a> {
    id: &'a str,
    /// "list"
    object: &'static str,
    created: i64,
    model: &'a str,
    #[schema(value_type = Vec<Datum>)]
    data: Data,
    /// Prompt and total tokens (no completion).
    #[schema(value_type = Object)]
    usage: Value,
}

pub struct EmbeddingResponse {
    pub id: String,
    /// The engine request's: the response id, or (a caller's id need not be unique) that
    /// with a uuid after it.
    pub engine_id: String,
    model: String,
    prompt_tokens: usize,
    format: Format,
    pooling: bool,
    /// Chunked processing: each input's piece lengths, when any input was cut (the worker
    /// then answers one vector per piece).
    pieces: Option<Vec<Vec<usize>>>,
}

/// How the vectors are written (`encoding_format`).
#[derive(Clone, Copy)]
enum Format {
    Float,
    Base64(Encoding),
    /// vLLM's raw bytes; `metadata`: with the header describing them ("bytes").
    Bytes {
        enc: Encoding,
        metadata: bool,
    },
}

impl Format {
    fn new(req: &EmbeddingRequest) -> Self {
        let dtype = match req.embed_dtype.as_deref() {
            Some("float16") => Dtype::F16,
            Some("bfloat16") => Dtype::Bf16,
            _ => Dtype::F32,
        };
        let endianness = match req.endianness.as_deref() {
            Some("little") => Endianness::Little,
            Some("big") => Endianness::Big,
            _ => Endianness::Native,
        };
        let enc = Encoding { dtype, endianness };
        match req.encoding_format.as_deref() {
            Some("base64") => Format::Base64(enc),
            Some("bytes") => Format::Bytes {
                enc,
                metadata: true,
            },
            Some("bytes_only") => Format::Bytes {
                enc,
                metadata: false,
            },
            _ => Format::Float,
        }
    }
}

/// An answer of raw bytes (`encoding_format` "bytes" or "bytes_only").
pub struct RawAnswer {
    pub body: Vec<u8>,
    /// vLLM's `application/octet-stream`.
    pub content_type: &'static str,
    /// The `metadata` header ("bytes"): `{"id", "created", "model", "data": [{"index",
    /// "embed_dtype", "endianness", "start", "end", "shape"}], "usage"}`, written as Python's
    /// `json.dumps` writes it.
    pub metadata: Option<String>,
}

#[derive(Clone, Copy)]
enum Dtype {
    F32,
    F16,
    Bf16,
}

#[derive(Clone, Copy)]
enum Endianness {
    Native,
    Little,
    Big,
}

/// How base64 and bytes vectors are written (vLLM's `embed_dtype` and `endianness`).
#[derive(Clone, Copy)]
struct Encoding {
    dtype: Dtype,
    endianness: Endianness,
}

impl Encoding {
    fn big(self) -> bool {
        match self.endianness {
            Endianness::Big => true,
            Endianness::Little => false,
            Endianness::Native => cfg!(target_endian = "big"),
        }
    }

    /// The names vLLM's metadata echoes.
    fn names(self) -> (&'static str, &'static str) {
        let dtype = match self.dtype {
            Dtype::F32 => "float32",
            Dtype::F16 => "float16",
            Dtype::Bf16 => "bfloat16",
        };
        let endianness = match self.endianness {
            Endianness::Native => "native",
            Endianness::Little => "little",
            Endianness::Big => "big",
        };
        (dtype, endianness)
    }

    fn bytes(self, values: &[f32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(values.len() * 4);
        let big = self.big();
        for &v in values {
            match (self.dtype, big) {
                (Dtype::F32, false) => out.extend(v.to_le_bytes()),
                (Dtype::F32, true) => out.extend(v.to_be_bytes()),
                (Dtype::F16, false) => out.extend(half::f16::from_f32(v).to_le_bytes()),
                (Dtype::F16, true) => out.extend(half::f16::from_f32(v).to_be_bytes()),
                (Dtype::Bf16, false) => out.extend(half::bf16::from_f32(v).to_le_bytes()),
                (Dtype::Bf16, true) => out.extend(half::bf16::from_f32(v).to_be_bytes()),
            }
        }
        out
    }
}

impl EmbeddingResponse {
    /// The raw answer of the worker's vectors with `encoding_format` "bytes" or "bytes_only"
    /// (None: the answer is the JSON `body`): each vector's bytes one after the other, as
    /// vLLM writes them.
    pub fn raw(&self, vectors: &[Vec<f32>]) -> Option<RawAnswer> {
        let Format::Bytes { enc, metadata } = self.format else {
            return None;
        };
        let merged;
        let vectors = match &self.pieces {
            Some(p) => {
                merged = merge_chunks(vectors, p);
                &merged[..]
            }
            None => vectors,
        };
        let (dtype, endianness) = enc.names();
        let mut body = vec![];
        let mut items = vec![];
        for (index, values) in vectors.iter().enumerate() {
            let start = body.len();
            body.extend(enc.bytes(values));
            items.push(serde_json::json!({
                "index": index, "embed_dtype": dtype, "endianness": endianness,
                "start": start, "end": body.len(), "shape": [values.len()],
            }));
        }
        let metadata = metadata.then(|| {
            let meta = serde_json::json!({
                "id": self.id, "created": now(), "model": self.model, "data": items,
                "usage": {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens},
            });
            let opts = crate::text::pyjson::DumpOpts {
                ensure_ascii: true,
                ..Default::default()
            };
            crate::text::pyjson::dumps(&minijinja::Value::from_serialize(&meta), &opts)
        });
        Some(RawAnswer {
            body,
            content_type: "application/octet-stream",
            metadata,
        })
    }

    /// The body of the worker's vectors, one per input in input order.
    pub fn body(&self, vectors: Vec<Vec<f32>>) -> Vec<u8> {
        let vectors = match &self.pieces {
            Some(p) => merge_chunks(&vectors, p),
            None => vectors,
        };
        let vectors = vectors.into_iter().map(|values| match self.format {
            Format::Base64(enc) | Format::Bytes { enc, .. } => {
                Vector::Base64(base64::engine::general_purpose::STANDARD.encode(enc.bytes(&values)))
            }
            Format::Float => Vector::Float(values),
        });
        let data = match self.pooling {
            false => Data::Embeddings(
                vectors
                    .enumerate()
                    .map(|(index, embedding)| Datum {
                        index,
                        object: "embedding",
                        embedding,
                    })
                    .collect(),
            ),
            true => Data::Pooling(
                vectors
                    .enumerate()
                    .map(|(index, data)| PoolingDatum {
                        index,
                        object: "pooling",
                        data,
                    })
                    .collect(),
            ),
        };
        // Serialized straight from the structs: through a `Value` each f32 would become an
        // f64 and print 17 digits instead of its shortest form.
        serde_json::to_vec(&Body {
            id: &self.id,
            object: "list",
            created: now(),
            model: &self.model,
            data,
            usage: serde_json::json!({
                "prompt_tokens": self.prompt_tokens,
                "total_tokens": self.prompt_tokens,
                "completion_tokens": 0,
                "prompt_tokens_details": null,
            }),
        })
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_inputs_are_cut_into_pieces_of_the_model_length() {
        let (inputs, pieces) = split_chunks(vec![vec![1, 2, 3], vec![9; 10]], 4);
        assert_eq!(
            inputs,
            vec![vec![1, 2, 3], vec![9; 4], vec![9; 4], vec![9; 2]]
        );
        assert_eq!(pieces, Some(vec![vec![3], vec![4, 4, 2]]));
        let (inputs, pieces) = split_chunks(vec![vec![1, 2, 3, 4]], 4);
        assert_eq!((inputs, pieces), (vec![vec![1, 2, 3, 4]], None));
    }

    #[test]
    fn pieces_average_by_their_token_counts() {
        let vectors = vec![
            vec![1.0, 2.0],
            vec![1.0, 0.0],
            vec![0.0, 1.0],
            vec![4.0, 4.0],
        ];
        let merged = merge_chunks(&vectors, &[vec![5], vec![3, 1], vec![7]]);
        assert_eq!(
            merged,
            vec![vec![1.0, 2.0], vec![0.75, 0.25], vec![4.0, 4.0]]
        );
    }

    fn ctx(chunked: bool, max_embed_len: Option<usize>) -> ApiContext {
        let mut c = crate::context::test_context();
        c.chunked_processing = chunked;
        c.max_embed_len = max_embed_len;
        c
    }

    #[test]
    fn limits_with_and_without_chunked_processing() {
        let long = vec![vec![5u32; 40]];
        let off = check_lengths(&ctx(false, None), &long, false).unwrap_err();
        assert!(off
            .to_string()
            .contains("more than the model's maximum input length of 32"));
        assert!(check_lengths(&ctx(true, None), &long, false).is_ok());
        assert!(check_lengths(&ctx(true, Some(40)), &long, false).is_ok());
        let over = check_lengths(&ctx(true, Some(39)), &long, true).unwrap_err();
        assert_eq!(
            over.to_string(),
            "This model's maximum embedding input length is 39 tokens. However, you requested \
             40 tokens in the input for embedding generation. Please reduce the length of the \
             input."
        );
        // max_embed_len below max_model_len lowers the limit, chunked or not (vLLM's check).
        assert!(check_lengths(&ctx(false, Some(20)), &[vec![5; 21]], false).is_err());
    }
}
