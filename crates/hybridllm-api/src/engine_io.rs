//! What the engine reports about a request, in the API's own types (the shells convert from
//! their wire form: the Rust frontend's engine client from protobuf, the Python extension from
//! the worker's messages).
pub use crate::sequence_text::EngineFinish;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TokenLogprob {
    pub token_id: u32,
    /// NaN where the engine has none (the first prompt token).
    pub logprob: f32,
    /// 1-based rank among the vocabulary by logprob.
    pub rank: u32,
}

/// One position: the chosen (or prompt) token and the top alternatives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PositionLogprobs {
    pub token: Option<TokenLogprob>,
    pub top: Vec<TokenLogprob>,
}

/// A prompt's facts, the first thing the engine reports for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptInfo {
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub prompt_logprobs: Vec<PositionLogprobs>,
    pub queue_time_s: f32,
}

/// One sequence's new tokens in one engine step.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceDelta {
    pub index: u32,
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<PositionLogprobs>,
    pub finish: EngineFinish,
    /// Which token ended the sequence (EOS or a stop token id), when it did.
    pub stop_token_id: Option<u32>,
}

/// One engine step's report on a request: its prompt facts (the first step only), each
/// sequence's new tokens, and why the engine failed it (empty unless a sequence finished
/// with `EngineFinish::Error`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStep {
    pub prompt: Option<PromptInfo>,
    pub sequences: Vec<SequenceDelta>,
    pub error: String,
}
