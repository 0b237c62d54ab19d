//! The validated parameters of one engine request: what the engine is asked to do, in the
//! API's own types. Unset (None) means the engine's default. The shells turn them into their
//! wire form (the Rust frontend's engine client into protobuf, the Python extension into the
//! keyword arguments of the same message).
use std::collections::HashMap;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplingParams {
    pub n: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub seed: Option<i64>,
    pub max_tokens: Option<u32>,
    pub min_tokens: Option<u32>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: Option<bool>,
    /// Top logprobs per generated token (0: only the sampled token's).
    pub logprobs: Option<u32>,
    /// Top logprobs per prompt token.
    pub prompt_logprobs: Option<u32>,
    pub logit_bias: HashMap<u32, f32>,
    /// The output constraint as llguidance's serialized grammar (`structured::GrammarCompiler`).
    pub grammar: Option<String>,
    /// vLLM's `cache_salt`: prefix-cache hits only between requests with the same salt.
    pub cache_salt: Option<String>,
    /// vLLM's `allowed_token_ids`: sampling only among these (empty: all tokens).
    pub allowed_token_ids: Vec<u32>,
    /// vLLM's `bad_words`: words never generated (the engine tokenizes them).
    pub bad_words: Vec<String>,
}

/// A beam search: the engine returns `beam_width` sequences, best score first.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BeamSearchParams {
    pub beam_width: u32,
    /// 0: what fits in the context window.
    pub max_tokens: u32,
    pub ignore_eos: bool,
    pub length_penalty: f32,
    pub include_stop_str_in_output: bool,
}
