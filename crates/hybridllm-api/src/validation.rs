//! Sampling-parameter validation shared by chat and completions: every out-of-range value is
//! a 400 naming the field and its limit, before anything reaches the worker.
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::sampling::{BeamSearchParams, SamplingParams};
use crate::structured::{Constraint, ConstraintFields};
use crate::text::tokenizer::DecodeOpts;
use crate::tools::ToolPlan;
use serde::Deserialize;
use serde_json::Value as Json;
use std::collections::HashMap;
use utoipa::ToSchema;

/// What `stop` may be (read by `stop_list`).
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // a schema only
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// The interval a number must lie in: validation refuses a value outside it and the OpenAPI
/// document states it (`openapi.rs`), so the rule is written once.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub lo: f64,
    pub hi: f64,
    /// `lo` itself excluded.
    pub lo_open: bool,
}

pub const fn closed(lo: f64, hi: f64) -> Bound {
    Bound {
        lo,
        hi,
        lo_open: false,
    }
}

impl Bound {
    pub fn contains(&self, x: f64) -> bool {
        x.is_finite()
            && (if self.lo_open {
                x > self.lo
            } else {
                x >= self.lo
            })
            && x <= self.hi
    }
    /// Exact: every bound is an integer far below 2^53, so rounding `x` crosses none.
    pub fn contains_int(&self, x: i64) -> bool {
        self.contains(x as f64)
    }
}

pub const N: Bound = closed(1.0, 128.0);
pub const TEMPERATURE: Bound = closed(0.0, 2.0);
pub const TOP_P: Bound = Bound {
    lo: 0.0,
    hi: 1.0,
    lo_open: true,
};
/// -1 or 0 turn top-k off.
pub const TOP_K: Bound = closed(-1.0, i32::MAX as f64);
pub const MIN_P: Bound = closed(0.0, 1.0);
/// presence_penalty and frequency_penalty.
pub const PENALTY: Bound = closed(-2.0, 2.0);
pub const REPETITION_PENALTY: Bound = Bound {
    lo: 0.0,
    hi: 2.0,
    lo_open: true,
};
/// max_tokens and its other names; the upper end is the wire type's (u32).
pub const MAX_TOKENS: Bound = closed(1.0, u32::MAX as f64);
/// The upper end is max_tokens when it is set.
pub const MIN_TOKENS: Bound = closed(0.0, u32::MAX as f64);
pub const MAX_LOGPROBS: i64 = 20;
/// logprobs, top_logprobs and prompt_logprobs.
pub const LOGPROBS: Bound = closed(0.0, MAX_LOGPROBS as f64);
pub const LOGIT_BIAS: Bound = closed(-100.0, 100.0);

impl SamplingRequest {
    /// Each bounded field and its bound, for the OpenAPI document (`logit_bias` bounds its
    /// values).
    pub const BOUNDS: &'static [(&'static str, Bound)] = &[
        ("n", N),
        ("temperature", TEMPERATURE),
        ("top_p", TOP_P),
        ("top_k", TOP_K),
        ("min_p", MIN_P),
        ("presence_penalty", PENALTY),
        ("frequency_penalty", PENALTY),
        ("repetition_penalty", REPETITION_PENALTY),
        ("max_tokens", MAX_TOKENS),
        ("max_completion_tokens", MAX_TOKENS),
        ("min_tokens", MIN_TOKENS),
        ("prompt_logprobs", LOGPROBS),
        ("logit_bias", LOGIT_BIAS),
    ];
}

/// Sampling fields common to /v1/completions and /v1/chat/completions (OpenAI + vLLM).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct SamplingRequest {
    /// Choices to generate (the beam width with `use_beam_search`).
    pub n: Option<i64>,
    /// Only equal to `n`.
    pub best_of: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub min_tokens: Option<i64>,
    #[schema(value_type = Option<Stop>)]
    pub stop: Option<Json>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub ignore_eos: Option<bool>,
    /// Token id (a decimal string) to a bias.
    pub logit_bias: Option<HashMap<String, f64>>,
    pub skip_special_tokens: Option<bool>,
    pub spaces_between_special_tokens: Option<bool>,
    pub include_stop_str_in_output: Option<bool>,
    pub prompt_logprobs: Option<i64>,
    pub use_beam_search: Option<bool>,
    pub length_penalty: Option<f64>,
    /// Keep the prompt's last this many tokens (-1: the context window).
    pub truncate_prompt_tokens: Option<i64>,
    /// Logprobs name tokens as `token_id:<id>` (for tokens that are not valid text).
    pub return_tokens_as_token_ids: Option<bool>,
    /// vLLM's: the prompt's token ids and each choice's output ids in the response.
    pub return_token_ids: Option<bool>,
    /// Prefix-cache hits only between requests with the same salt (a tenant's secret).
    pub cache_salt: Option<String>,
    /// vLLM's: only these token ids may be sampled (at least one, each in the vocabulary).
    pub allowed_token_ids: Option<Vec<i64>>,
    /// vLLM's: words the output never contains (each tokenized alone and after a space).
    pub bad_words: Option<Vec<String>>,
    /// vLLM's: the response id is `chatcmpl-<request_id>` (`cmpl-` for completions); an
    /// `X-Request-Id` header wins over it.
    pub request_id: Option<String>,
    /// vLLM's: a stable id shared by a conversation's requests. With data parallelism the
    /// frontend keeps a session on one engine worker, where its prefix is cached.
    pub session_id: Option<String>,
    /// OpenAI's end-user tag: accepted, with no effect (as in OpenAI's API and vLLM).
    #[allow(dead_code)]
    pub user: Option<String>,
    /// vLLM's scheduling priority: lower runs first (`--scheduling-policy priority`; else 0).
    pub priority: Option<i64>,
}

/// Validated parameters; `max_tokens` is finalised once the prompt length is known.
#[derive(Debug, Clone)]
pub struct GenParams {
    pub sampling: SamplingParams,
    pub n: u32,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub include_stop: bool,
    pub decode: DecodeOpts,
    /// Top-k logprobs per generated token (Some(0): only the sampled token's).
    pub logprobs: Option<u32>,
    /// A beam search (`use_beam_search`): its parameters; `sampling` then goes unused.
    pub beam: Option<BeamSearchParams>,
    /// `truncate_prompt_tokens`, resolved (`GenParams::truncate`).
    pub truncate: Option<usize>,
    /// `return_tokens_as_token_ids`.
    pub tokens_as_ids: bool,
    /// `return_token_ids`.
    pub token_ids: bool,
    /// An output constraint not compiled yet (`compile_constraint`); once compiled, its
    /// grammar is `sampling.grammar`.
    pub constraint: Option<Constraint>,
    /// vLLM's `priority` (0 unless the engine schedules by priority).
    pub priority: i64,
    /// vLLM's `session_id` (None when empty): the data-parallel router's affinity key.
    pub session_id: Option<String>,
}

/// A call whose engine parameters may hold an output constraint still to compile: each shell
/// compiles it where it suits it (milliseconds for a large schema), else `plan` does.
pub trait Constrained {
    fn gen_params(&mut self) -> &mut GenParams;

    fn has_constraint(&mut self) -> bool {
        self.gen_params().constraint.is_some()
    }

    fn compile_constraint(&mut self, ctx: &ApiContext) -> Result<(), ApiError> {
        self.gen_params().compile_constraint(ctx)
    }
}

impl GenParams {
    /// What chat and completions check alike once the parameters are valid: the operator's
    /// max_tokens limit, prompt logprobs with a stream, the output constraint (read, not yet
    /// compiled) and the prompt's truncation.
    pub fn apply_request(
        &mut self,
        ctx: &ApiContext,
        req: &SamplingRequest,
        constraints: &ConstraintFields,
        stream: bool,
    ) -> Result<(), ApiError> {
        req.check_max_tokens_limit(ctx.max_tokens_limit)?;
        req.check_stream(stream)?;
        self.constrain(constraints.constraint()?)?;
        self.truncate = truncation_limit(req.truncate_prompt_tokens, ctx.max_model_len as usize)?;
        self.priority = priority(req.priority, ctx.priority_scheduling)?;
        Ok(())
    }

    /// A prompt's ids cut to their last `truncate_prompt_tokens` (as vLLM: from the left).
    pub fn truncate(&self, mut ids: Vec<u32>) -> Vec<u32> {
        if let Some(k) = self.truncate {
            if ids.len() > k {
                ids.drain(..ids.len() - k);
            }
        }
        ids
    }

    /// Sets the request's constraint (refused with a beam search, naming both).
    pub fn constrain(&mut self, c: Option<Constraint>) -> Result<(), ApiError> {
        if let (Some(c), Some(_)) = (&c, &self.beam) {
            return Err(ApiError::bad_param(
                &c.param,
                format!(
                    "use_beam_search cannot be combined with structured outputs ({}).",
                    c.param
                ),
            ));
        }
        self.constraint = c;
        Ok(())
    }

    /// A request's tools on its parameters. A forced call's grammar is the output's constraint,
    /// refused beside another (named by `other`, else by its own field); the grammar of `auto` with
    /// `strict` tools gives way to an output constraint the request asks for (such an output
    /// is no call). The tags of a format may be special tokens, so they are kept unless asked.
    pub fn apply_tools(
        &mut self,
        plan: &mut ToolPlan,
        other: Option<&str>,
        skip_special_tokens: Option<bool>,
    ) -> Result<(), ApiError> {
        if let Some(c) = plan.constraint.take() {
            match (&self.constraint, plan.forced) {
                (Some(own), true) => {
                    let other = other.unwrap_or(&own.param);
                    return Err(ApiError::bad_param(
                        "tool_choice",
                        format!(
                            "tool_choice cannot force a call together with {other}: both \
                             constrain the output."
                        ),
                    ));
                }
                (Some(_), false) => {}
                (None, _) => self.constrain(Some(c))?,
            }
        }
        if skip_special_tokens.is_none() {
            self.decode.skip_special_tokens = false;
        }
        Ok(())
    }

    /// Compiles the constraint, if one is pending, into `sampling.grammar` (milliseconds for a
    /// large schema: each shell calls it where it suits it, else `plan` does).
    pub fn compile_constraint(&mut self, ctx: &ApiContext) -> Result<(), ApiError> {
        let Some(c) = self.constraint.take() else {
            return Ok(());
        };
        let compiler = ctx.grammars.as_ref().map_err(|why| {
            ApiError::bad_param(
                &c.param,
                format!("{} is not served for this model: {why}.", c.param),
            )
        })?;
        self.sampling.grammar = Some(compiler.compile(&c)?);
        Ok(())
    }
}

/// One engine request: a prompt's ids and what to generate from them.
pub struct GenRequest {
    pub request_id: String,
    pub prompt_ids: Vec<u32>,
    pub params: GenParams,
    /// Final: what the request asked for, or what is left of the context window.
    pub max_tokens: u32,
}

/// vLLM's `priority`: any 64-bit integer when the engine schedules by priority, else only 0
/// (vLLM's message).
pub fn priority(value: Option<i64>, enabled: bool) -> Result<i64, ApiError> {
    let p = value.unwrap_or(0);
    if p != 0 && !enabled {
        return Err(ApiError::bad_param(
            "priority",
            format!(
                "Got priority {p} but Priority scheduling is not enabled (start the server \
                 with --scheduling-policy priority)."
            ),
        ));
    }
    Ok(p)
}

/// vLLM's `truncate_prompt_tokens`: keep a prompt's last `t` tokens (-1: the context window).
pub fn truncation_limit(value: Option<i64>, max_len: usize) -> Result<Option<usize>, ApiError> {
    let bad = |m: String| ApiError::bad_param("truncate_prompt_tokens", m);
    match value {
        None => Ok(None),
        Some(-1) => Ok(Some(max_len)),
        Some(t) if t < 1 => Err(bad(format!(
            "truncate_prompt_tokens must be -1 (the model's limit) or at least 1, got {t}."
        ))),
        Some(t) if t as u64 > max_len as u64 => Err(bad(format!(
            "truncate_prompt_tokens ({t}) is larger than the model's maximum input length of \
             {max_len} tokens."
        ))),
        Some(t) => Ok(Some(t as usize)),
    }
}

/// /v1/completions without max_tokens generates this many tokens (OpenAI's and vLLM's default).
pub const DEFAULT_COMPLETION_MAX_TOKENS: u32 = 16;

fn range_f(name: &str, v: Option<f64>, b: Bound) -> Result<Option<f32>, ApiError> {
    let Some(x) = v else { return Ok(None) };
    if !b.contains(x) {
        let l = if b.lo_open { "(" } else { "[" };
        return Err(ApiError::bad_param(
            name,
            format!("{name} must be in {l}{}, {}], got {x}.", b.lo, b.hi),
        ));
    }
    Ok(Some(x as f32))
}

/// An integer field within a closed bound, refused as `{name} must be in [lo, hi], got x.`
pub fn range_i(name: &str, x: i64, b: Bound) -> Result<(), ApiError> {
    if b.contains_int(x) {
        return Ok(());
    }
    Err(ApiError::bad_param(
        name,
        format!("{name} must be in [{}, {}], got {x}.", b.lo, b.hi),
    ))
}

fn stop_list(v: &Option<Json>) -> Result<Vec<String>, ApiError> {
    match v {
        None | Some(Json::Null) => Ok(vec![]),
        Some(Json::String(s)) => Ok(vec![s.clone()]),
        Some(Json::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::bad_param("stop", "stop must be a string or a list of strings.")
                })
            })
            .collect(),
        Some(_) => Err(ApiError::bad_param(
            "stop",
            "stop must be a string or a list of strings.",
        )),
    }
}

impl SamplingRequest {
    /// `logprobs`: the already-parsed top-k for generated tokens (format differs per endpoint).
    pub fn validate(
        &self,
        logprobs: Option<i64>,
        vocab_size: usize,
    ) -> Result<GenParams, ApiError> {
        let n = self.n.unwrap_or(1);
        range_i("n", n, N)?;
        if let Some(b) = self.best_of {
            if b != n {
                return Err(ApiError::bad_param(
                    "best_of",
                    "best_of is not supported (it must equal n).",
                ));
            }
        }
        let temperature = range_f("temperature", self.temperature, TEMPERATURE)?;
        let top_p = range_f("top_p", self.top_p, TOP_P)?;
        let min_p = range_f("min_p", self.min_p, MIN_P)?;
        let presence_penalty = range_f("presence_penalty", self.presence_penalty, PENALTY)?;
        let frequency_penalty = range_f("frequency_penalty", self.frequency_penalty, PENALTY)?;
        let repetition_penalty = range_f(
            "repetition_penalty",
            self.repetition_penalty,
            REPETITION_PENALTY,
        )?;
        if let Some(k) = self.top_k {
            if !TOP_K.contains_int(k) {
                return Err(ApiError::bad_param(
                    "top_k",
                    format!("top_k must be -1 (disable), or at least 1, got {k}."),
                ));
            }
        }
        let max_tokens = match (self.max_tokens, self.max_completion_tokens) {
            (_, Some(m)) | (Some(m), None) => {
                if !MAX_TOKENS.contains_int(m) {
                    let field = if self.max_completion_tokens.is_some() {
                        "max_completion_tokens"
                    } else {
                        "max_tokens"
                    };
                    return Err(ApiError::bad_param(
                        field,
                        format!("{field} must be at least 1, got {m}."),
                    ));
                }
                Some(m as u32)
            }
            (None, None) => None,
        };
        let min_tokens = self.min_tokens.unwrap_or(0);
        // Without max_tokens the bound is the wire type's (u32), never a silent wrap.
        let most = max_tokens.map_or(MIN_TOKENS.hi, |m| m as f64);
        if !(Bound {
            hi: most,
            ..MIN_TOKENS
        })
        .contains_int(min_tokens)
        {
            return Err(ApiError::bad_param(
                "min_tokens",
                format!("min_tokens must be in [0, max_tokens], got {min_tokens}."),
            ));
        }
        if let Some(lp) = logprobs {
            range_i("logprobs", lp, LOGPROBS)?;
        }
        let prompt_logprobs = self.prompt_logprobs;
        if let Some(lp) = prompt_logprobs {
            range_i("prompt_logprobs", lp, LOGPROBS)?;
        }
        let mut logit_bias = HashMap::new();
        for (k, v) in self.logit_bias.iter().flatten() {
            let id: u32 = k.parse().map_err(|_| {
                ApiError::bad_param(
                    "logit_bias",
                    format!("logit_bias key {k:?} is not a token id."),
                )
            })?;
            if id as usize >= vocab_size {
                return Err(ApiError::bad_param(
                    "logit_bias",
                    format!(
                        "token_id {id} in logit_bias is out of vocabulary (size {vocab_size})."
                    ),
                ));
            }
            if !LOGIT_BIAS.contains(*v) {
                return Err(ApiError::bad_param(
                    "logit_bias",
                    format!(
                        "logit_bias values must be in [{}, {}], got {v}.",
                        LOGIT_BIAS.lo, LOGIT_BIAS.hi
                    ),
                ));
            }
            logit_bias.insert(id, *v as f32);
        }
        for id in self.stop_token_ids.iter().flatten() {
            if *id as usize >= vocab_size {
                return Err(ApiError::bad_param(
                    "stop_token_ids",
                    format!("stop token id {id} is out of vocabulary (size {vocab_size})."),
                ));
            }
        }
        let allowed_token_ids = match &self.allowed_token_ids {
            None => vec![],
            Some(ids) if ids.is_empty() => {
                return Err(ApiError::bad_param(
                    "allowed_token_ids",
                    "allowed_token_ids must name at least one token id.",
                ))
            }
            Some(ids) => ids
                .iter()
                .map(|&id| match u32::try_from(id) {
                    Ok(t) if (t as usize) < vocab_size => Ok(t),
                    _ => Err(ApiError::bad_param(
                        "allowed_token_ids",
                        format!("allowed_token_ids: token id {id} is out of vocabulary (size {vocab_size})."),
                    )),
                })
                .collect::<Result<Vec<u32>, ApiError>>()?,
        };
        if self.cache_salt.as_deref() == Some("") {
            return Err(ApiError::bad_param(
                "cache_salt",
                "cache_salt must be a non-empty string.",
            ));
        }
        let sampling = SamplingParams {
            n: Some(n as u32),
            temperature,
            top_p,
            top_k: self.top_k.map(|k| k as i32),
            min_p,
            presence_penalty,
            frequency_penalty,
            repetition_penalty,
            seed: self.seed,
            max_tokens: None,
            min_tokens: self.min_tokens.map(|m| m as u32),
            stop_token_ids: self.stop_token_ids.clone().unwrap_or_default(),
            ignore_eos: self.ignore_eos,
            logprobs: logprobs.map(|l| l as u32),
            prompt_logprobs: prompt_logprobs.map(|l| l as u32),
            logit_bias,
            grammar: None,
            cache_salt: self.cache_salt.clone(),
            allowed_token_ids,
            bad_words: self.bad_words.clone().unwrap_or_default(),
        };
        Ok(GenParams {
            sampling,
            n: n as u32,
            max_tokens,
            stop: stop_list(&self.stop)?,
            include_stop: self.include_stop_str_in_output.unwrap_or(false),
            decode: DecodeOpts {
                skip_special_tokens: self.skip_special_tokens.unwrap_or(true),
                spaces_between_special_tokens: self.spaces_between_special_tokens.unwrap_or(true),
            },
            logprobs: logprobs.map(|l| l as u32),
            beam: None,
            truncate: None,
            tokens_as_ids: self.return_tokens_as_token_ids.unwrap_or(false),
            token_ids: self.return_token_ids.unwrap_or(false),
            constraint: None,
            priority: 0,
            session_id: self.session_id.clone().filter(|s| !s.is_empty()),
        })
    }
}

impl SamplingRequest {
    /// As vLLM: a streamed response has no place for the prompt's logprobs.
    pub fn check_stream(&self, stream: bool) -> Result<(), ApiError> {
        match self.prompt_logprobs {
            Some(lp) if stream && lp != 0 => Err(ApiError::bad_param(
                "prompt_logprobs",
                "prompt_logprobs are not available when stream=true.",
            )),
            _ => Ok(()),
        }
    }

    /// The operator's `--max-tokens-limit`: a request asking for more is refused, naming the
    /// field and the limit (requests that ask for nothing are clamped by `fit_max_tokens`).
    pub fn check_max_tokens_limit(&self, limit: Option<u32>) -> Result<(), ApiError> {
        let (field, asked) = match (self.max_tokens, self.max_completion_tokens) {
            (_, Some(m)) => ("max_completion_tokens", m),
            (Some(m), None) => ("max_tokens", m),
            (None, None) => return Ok(()),
        };
        match limit {
            Some(l) if asked > l as i64 => Err(ApiError::bad_param(
                field,
                format!(
                    "{field} must be at most {l} (the server's --max-tokens-limit), got {asked}."
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// The most tokens a request that sets no max_tokens may generate besides the context window:
/// the endpoint's default (16 on /v1/completions) and the operator's limit, the smaller.
pub fn unset_max_tokens(default: Option<u32>, limit: Option<u32>) -> Option<u32> {
    default.into_iter().chain(limit).min()
}

/// Checks prompt + completion against the context window; returns the max_tokens to send
/// (unset: what is left of the context, at most `unset_cap`).
pub fn fit_max_tokens(
    prompt_len: usize,
    max_tokens: Option<u32>,
    max_model_len: u32,
    unset_cap: Option<u32>,
) -> Result<u32, ApiError> {
    let limit = max_model_len as usize;
    match max_tokens {
        Some(m) if prompt_len + m as usize > limit => Err(ApiError::bad(format!(
            "This model's maximum context length is {limit} tokens. However, you requested {} tokens \
             ({prompt_len} in the messages, {m} in the completion). Please reduce the length of the \
             messages or completion.",
            prompt_len + m as usize
        ))),
        Some(m) => Ok(m),
        None if prompt_len >= limit => Err(ApiError::bad(format!(
            "This model's maximum context length is {limit} tokens. However, you requested \
             {prompt_len} tokens in the messages, Please reduce the length of the messages."
        ))),
        None => Ok(unset_cap.map_or((limit - prompt_len) as u32, |c| {
            c.min((limit - prompt_len) as u32)
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(j: Json) -> SamplingRequest {
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn ranges() {
        let e = req(serde_json::json!({"temperature": 3.0}))
            .validate(None, 100)
            .unwrap_err();
        assert_eq!(e.to_string(), "temperature must be in [0, 2], got 3.");
        // The messages state each `Bound` as it was written before it was one.
        for (body, says) in [
            (
                serde_json::json!({"top_p": 0.0}),
                "top_p must be in (0, 1], got 0.",
            ),
            (
                serde_json::json!({"n": 129}),
                "n must be in [1, 128], got 129.",
            ),
            (
                serde_json::json!({"repetition_penalty": 2.5}),
                "repetition_penalty must be in (0, 2], got 2.5.",
            ),
            (
                serde_json::json!({"prompt_logprobs": 21}),
                "prompt_logprobs must be in [0, 20], got 21.",
            ),
            (
                serde_json::json!({"logit_bias": {"5": -100.5}}),
                "logit_bias values must be in [-100, 100], got -100.5.",
            ),
            (
                serde_json::json!({"top_k": -2}),
                "top_k must be -1 (disable), or at least 1, got -2.",
            ),
            (
                serde_json::json!({"max_tokens": 4294967296i64}),
                "max_tokens must be at least 1, got 4294967296.",
            ),
        ] {
            let e = req(body).validate(None, 100).unwrap_err();
            assert_eq!(e.to_string(), says);
        }
        let e = req(serde_json::json!({}))
            .validate(Some(21), 100)
            .unwrap_err();
        assert_eq!(e.to_string(), "logprobs must be in [0, 20], got 21.");
        assert!(req(serde_json::json!({"n": 0}))
            .validate(None, 100)
            .is_err());
        assert!(req(serde_json::json!({"max_tokens": 0}))
            .validate(None, 100)
            .is_err());
        let e = req(serde_json::json!({"min_tokens": 11257324413i64}))
            .validate(None, 100)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "min_tokens must be in [0, max_tokens], got 11257324413."
        );
        assert!(req(serde_json::json!({})).validate(Some(21), 100).is_err());
        assert!(req(serde_json::json!({"logit_bias": {"100": 1.0}}))
            .validate(None, 100)
            .is_err());
        let p = req(serde_json::json!({"stop": "x", "temperature": 0, "max_tokens": 5, "seed": 1}))
            .validate(Some(2), 100)
            .unwrap();
        assert_eq!(p.stop, vec!["x"]);
        assert_eq!(p.sampling.temperature, Some(0.0));
        assert_eq!(p.max_tokens, Some(5));
        assert_eq!(p.logprobs, Some(2));
    }

    #[test]
    fn context_window() {
        assert_eq!(fit_max_tokens(10, None, 100, None).unwrap(), 90);
        assert_eq!(fit_max_tokens(10, None, 100, Some(16)).unwrap(), 16);
        assert_eq!(fit_max_tokens(95, None, 100, Some(16)).unwrap(), 5);
        assert_eq!(unset_max_tokens(Some(16), Some(8)), Some(8));
        assert_eq!(unset_max_tokens(None, Some(8)), Some(8));
        assert_eq!(unset_max_tokens(None, None), None);
        let e = fit_max_tokens(10, Some(95), 100, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "This model's maximum context length is 100 tokens. However, you requested 105 tokens (10 in the messages, 95 in the completion). Please reduce the length of the messages or completion."
        );
        assert!(fit_max_tokens(100, None, 100, Some(16)).is_err());
        let r = req(serde_json::json!({"max_completion_tokens": 9, "max_tokens": 1}));
        let e = r.check_max_tokens_limit(Some(8)).unwrap_err();
        assert_eq!(
            e.body()["error"]["param"],
            serde_json::json!("max_completion_tokens")
        );
        assert!(r.check_max_tokens_limit(Some(9)).is_ok());
        assert!(r.check_max_tokens_limit(None).is_ok());
    }

    #[test]
    fn priority_needs_the_priority_policy() {
        assert_eq!(priority(None, false).unwrap(), 0);
        assert_eq!(priority(Some(0), false).unwrap(), 0);
        assert_eq!(priority(Some(-7), true).unwrap(), -7);
        let e = priority(Some(3), false).unwrap_err();
        assert_eq!(e.body()["error"]["param"], "priority");
        assert_eq!(
            e.to_string(),
            "Got priority 3 but Priority scheduling is not enabled (start the server with \
             --scheduling-policy priority)."
        );
        assert_eq!(priority(Some(i64::MIN), true).unwrap(), i64::MIN);
    }
}
