//! `POST /inference/v1/generate` (vLLM's "tokens in, tokens out" endpoint, for routers and
//! disaggregated set-ups that tokenize themselves): `token_ids` and vLLM's `SamplingParams`
//! in, token ids (and logprobs named `token_id:<id>`) out, streamed or not.
//!
//! It is a completion of a token-id prompt in another shape: the body becomes the completion
//! request it means (so every sampling rule, limit and error is the completion's, its field
//! named `sampling_params.<field>`), and the completion's response writes vLLM's
//! `GenerateResponse` instead (`TokensOut`).
use crate::engine_io::PositionLogprobs;
use crate::errors::ApiError;
use crate::logprobs::finite;
use crate::request::json_object;
use bytes::Bytes;
use serde_json::{json, Map, Value};

/// vLLM's `SamplingParams` fields that mean here what they mean there; any other one is
/// refused by name (vLLM's `logits_processors`, `extra_args`, `output_kind`, ... have no
/// counterpart in this server).
const SAMPLING_FIELDS: &[&str] = &[
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "max_tokens",
    "min_tokens",
    "logprobs",
    "prompt_logprobs",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
    "logit_bias",
    "allowed_token_ids",
    "bad_words",
    "truncate_prompt_tokens",
    "structured_outputs",
    "detokenize",
];

/// `GenerateRequest`'s own fields besides `token_ids` and `sampling_params`, as the
/// completion request takes them.
const REQUEST_FIELDS: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "cache_salt",
    "priority",
    "request_id",
];

/// vLLM's fields for what this server does not do (multimodal features, KV transfer between
/// servers): refused unless null.
const UNSERVED: &[(&str, &str)] = &[
    ("features", "multimodal inputs are not served"),
    (
        "kv_transfer_params",
        "disaggregated prefill (KV transfer) is not served",
    ),
];

fn bad(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, msg)
}

/// The completion request a generate body means (a 400 naming the field otherwise).
fn completion_fields(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let mut fields = json_object(body)?;
    for (name, why) in UNSERVED {
        if fields.get(*name).is_some_and(|v| !v.is_null()) {
            return Err(bad(name, format!("{name} is not supported: {why}.")));
        }
    }
    let ids = match fields.remove("token_ids") {
        Some(Value::Array(ids)) if ids.iter().all(|x| x.as_u64().is_some()) => ids,
        Some(_) => {
            return Err(bad(
                "token_ids",
                "token_ids must be a list of non-negative integers.",
            ))
        }
        None => return Err(bad("token_ids", "token_ids is required.")),
    };
    let sampling = match fields.remove("sampling_params") {
        Some(Value::Object(s)) => s,
        Some(_) => return Err(bad("sampling_params", "sampling_params must be an object.")),
        None => return Err(bad("sampling_params", "sampling_params is required.")),
    };
    let mut out = Map::new();
    for (k, v) in fields {
        if REQUEST_FIELDS.contains(&k.as_str()) {
            out.insert(k, v);
        }
        // Other top-level fields are ignored, as vLLM's pydantic model ignores them.
    }
    let detokenize = match sampling.get("detokenize") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(bad(
                "sampling_params.detokenize",
                "sampling_params.detokenize must be a boolean.",
            ))
        }
    };
    for (k, v) in sampling {
        if !SAMPLING_FIELDS.contains(&k.as_str()) {
            return Err(bad(
                &format!("sampling_params.{k}"),
                format!("sampling_params.{k} is not supported."),
            ));
        }
        if k == "stop" && !detokenize && !v.is_null() && v != json!([]) {
            // vLLM's own rule: stop strings are matched on text.
            return Err(bad(
                "sampling_params.stop",
                "stop strings are only supported when detokenize is True. \
                 Set detokenize=True to use stop.",
            ));
        }
        if k != "detokenize" {
            out.insert(k, v);
        }
    }
    out.insert("prompt".into(), Value::Array(ids));
    // The response carries ids, and logprobs name tokens by id.
    out.insert("return_token_ids".into(), Value::Bool(true));
    out.insert("return_tokens_as_token_ids".into(), Value::Bool(true));
    Ok(out)
}

/// A generate body as the completion request it means.
pub struct TokensRequest {
    /// The completion request's fields.
    pub fields: Map<String, Value>,
    /// The fields that came from `sampling_params`.
    sampling: Vec<String>,
}

impl TokensRequest {
    pub fn new(body: &[u8]) -> Result<Self, ApiError> {
        let fields = completion_fields(body)?;
        let sampling = fields
            .keys()
            .filter(|k| SAMPLING_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect();
        Ok(TokensRequest { fields, sampling })
    }

    /// A refusal of the completion request, naming the generate request's field.
    pub fn rename(&self, e: ApiError) -> ApiError {
        match e {
            ApiError::BadRequest {
                message,
                param: Some(p),
            } => {
                let p = match p.as_str() {
                    "prompt" => "token_ids".to_string(),
                    _ if self.sampling.contains(&p) => format!("sampling_params.{p}"),
                    _ => p,
                };
                ApiError::BadRequest {
                    message,
                    param: Some(p),
                }
            }
            e => e,
        }
    }
}

/// The errors `CompletionCall::plan` gives, named as for a generate request.
pub fn rename_plan_error(e: ApiError) -> ApiError {
    match e {
        ApiError::BadRequest {
            message,
            param: Some(p),
        } if p == "prompt" => ApiError::BadRequest {
            message,
            param: Some("token_ids".into()),
        },
        e => e,
    }
}

/// vLLM's logprobs of a tokens-out choice: the chat shape, each token named `token_id:<id>`,
/// `top_logprobs` the sampled token then the most likely others (`max(top_n, 1)` entries, as
/// vLLM lists its logprobs dict), `bytes` null.
pub fn logprobs_content(lps: &[PositionLogprobs], top_n: u32) -> Vec<Value> {
    let name = |id: u32| format!("token_id:{id}");
    lps.iter()
        .filter_map(|p| {
            let t = p.token.as_ref()?;
            let top: Vec<Value> = std::iter::once(t)
                .chain(p.top.iter().filter(|x| x.token_id != t.token_id))
                .take(top_n.max(1) as usize)
                .map(|x| json!({"token": name(x.token_id), "logprob": finite(x.logprob), "bytes": null}))
                .collect();
            Some(json!({
                "token": name(t.token_id),
                "logprob": finite(t.logprob),
                "bytes": null,
                "top_logprobs": top,
            }))
        })
        .collect()
}

/// The response of a generate request, written from the completion's facts.
pub struct TokensOut;

impl TokensOut {
    /// One streamed chunk: a choice's new ids (vLLM's `GenerateStreamResponse`).
    pub fn chunk(request_id: &str, choice: Value, usage: Option<Value>) -> Bytes {
        let mut v = json!({"request_id": request_id, "choices": [choice]});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        crate::sse::frame(&v)
    }

    /// The last streamed chunk, with `include_usage`.
    pub fn usage_chunk(request_id: &str, usage: Value) -> Bytes {
        crate::sse::frame(&json!({"request_id": request_id, "choices": [], "usage": usage}))
    }

    /// One choice (streamed or whole).
    pub fn choice(index: usize, ids: &[u32], logprobs: Value, finish: Option<&str>) -> Value {
        json!({
            "index": index,
            "logprobs": logprobs,
            "finish_reason": finish,
            "token_ids": ids,
        })
    }

    /// The whole response (vLLM's `GenerateResponse`).
    pub fn body(request_id: &str, choices: Vec<Value>, prompt_logprobs: Value) -> Value {
        json!({
            "request_id": request_id,
            "choices": choices,
            "prompt_logprobs": prompt_logprobs,
            "kv_transfer_params": null,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_io::TokenLogprob;

    #[test]
    fn logprobs_list_the_sampled_token_first() {
        let t = |id, lp| TokenLogprob {
            token_id: id,
            logprob: lp,
            rank: 1,
        };
        let pos = PositionLogprobs {
            token: Some(t(7, -1.5)),
            top: vec![t(3, -0.5), t(7, -1.5), t(9, -2.0)],
        };
        let c = logprobs_content(std::slice::from_ref(&pos), 2);
        assert_eq!(
            c[0],
            json!({"token": "token_id:7", "logprob": -1.5, "bytes": null, "top_logprobs": [
                {"token": "token_id:7", "logprob": -1.5, "bytes": null},
                {"token": "token_id:3", "logprob": -0.5, "bytes": null}]})
        );
        assert_eq!(
            logprobs_content(&[pos], 0)[0]["top_logprobs"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}
