//! What the engine is asked and what it reports, in the API's own types: requests, their
//! steps and the engine's errors (the shells convert to and from their wire form: the Rust
//! frontend's engine client from protobuf, the Python extension from the worker's messages).
use crate::errors::ApiError;
use crate::sampling::{BeamSearchParams, SamplingParams};
pub use crate::sequence_text::EngineFinish;
use crate::validation::GenRequest;

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

/// What the engine reports for one request in one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStep {
    /// The prompt facts, on the request's first step only.
    pub prompt: Option<PromptInfo>,
    pub sequences: Vec<SequenceDelta>,
    /// What went wrong, where a sequence finished with `EngineFinish::Error`.
    pub error: Option<String>,
    /// The request field the error comes from (a grammar's dead end: the request's fault,
    /// a 400 naming it); None: the engine's own failure (a 500).
    pub error_param: Option<String>,
    /// The request's last step: every sequence has finished.
    pub finished: bool,
}

/// One generate request as the engine takes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerateRequest {
    pub request_id: String,
    pub prompt_ids: Vec<u32>,
    /// `max_tokens` set to the request's final limit (sent with a beam search too).
    pub sampling: SamplingParams,
    /// Set: a beam search (the sampling parameters are then unused).
    pub beam: Option<BeamSearchParams>,
    /// vLLM's scheduling priority (lower first).
    pub priority: i64,
    /// The frontend's routing key (not sent to the engine): a session stays on one worker.
    pub session_id: Option<String>,
}

impl GenerateRequest {
    /// The engine's request for a validated one: its final max_tokens in the sampling or
    /// beam-search parameters.
    pub fn new(req: &GenRequest) -> Self {
        let mut sampling = req.params.sampling.clone();
        sampling.max_tokens = Some(req.max_tokens);
        GenerateRequest {
            request_id: req.request_id.clone(),
            prompt_ids: req.prompt_ids.clone(),
            sampling,
            beam: req.params.beam.map(|b| BeamSearchParams {
                max_tokens: req.max_tokens,
                ..b
            }),
            priority: req.params.priority,
            session_id: req.params.session_id.clone(),
        }
    }
}

/// An embedding request: final token ids per input (tokenized, truncated and checked).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmbedRequest {
    pub request_id: String,
    pub inputs: Vec<Vec<u32>>,
    /// L2-normalize each vector; None: the model's default.
    pub normalize: Option<bool>,
}

/// Why the engine did not run a request, or stopped running it; mapped to HTTP once
/// (`From<EngineError> for ApiError`). The shells read their wire's status codes into it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// The engine refused the request's input; `param` names the field when it is one.
    #[error("{message}")]
    Invalid {
        message: String,
        param: Option<String>,
    },
    #[error("{0}")]
    NotFound(String),
    /// Admission control: too many requests waiting.
    #[error("{0}")]
    Overloaded(String),
    /// The engine is not serving (stopped, restarting, draining).
    #[error("{0}")]
    Unavailable(String),
    /// The call was cut short (a deadline, or cancelled on either side).
    #[error("{0}")]
    Cancelled(String),
    /// The connection to the engine dropped mid-call (the worker was killed).
    #[error("{0}")]
    ConnectionLost(String),
    /// Anything else: a bug in the engine.
    #[error("{0}")]
    Failed(String),
}

impl EngineError {
    /// A refusal or failure as the worker's gRPC status code (google.rpc.Code) says it: the
    /// one reading of those codes, for both shells' engine clients. `connection_lost`: the
    /// status was made by the client from a dropped connection, not sent by the worker.
    pub fn from_grpc_code(
        code: i32,
        message: String,
        param: Option<String>,
        connection_lost: bool,
    ) -> Self {
        match code {
            3 | 9 | 11 => EngineError::Invalid { message, param }, // INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE
            5 => EngineError::NotFound(message),                   // NOT_FOUND
            8 => EngineError::Overloaded(message),                 // RESOURCE_EXHAUSTED
            14 => EngineError::Unavailable(message),               // UNAVAILABLE
            1 | 4 => EngineError::Cancelled(message),              // CANCELLED, DEADLINE_EXCEEDED
            _ if connection_lost => EngineError::ConnectionLost(message),
            _ => EngineError::Failed(message),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Invalid { message, param } => ApiError::BadRequest { message, param },
            EngineError::NotFound(m) => ApiError::NotFound(m),
            EngineError::Overloaded(m) => ApiError::TooManyRequests(m),
            EngineError::Unavailable(m) | EngineError::Cancelled(m) => {
                ApiError::Unavailable(format!("The engine is unavailable: {m}"))
            }
            EngineError::ConnectionLost(m) => ApiError::Unavailable(format!(
                "The engine is unavailable: the connection to it was lost ({m})"
            )),
            EngineError::Failed(m) => ApiError::Internal(format!("Engine error: {m}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn engine_errors_as_http() {
        let e = ApiError::from(EngineError::Invalid {
            message: "min_tokens must be in [0, max_tokens], got 9.".into(),
            param: Some("min_tokens".into()),
        });
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.body()["error"]["param"], "min_tokens");
        let e = ApiError::from(EngineError::Overloaded("busy".into()));
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        let e = ApiError::from(EngineError::Cancelled("x".into()));
        assert_eq!(e.to_string(), "The engine is unavailable: x");
        let e = ApiError::from(EngineError::Failed("bug".into()));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.to_string(), "Engine error: bug");
    }

    #[test]
    fn the_final_max_tokens_goes_into_the_parameters() {
        let sampling: crate::validation::SamplingRequest =
            serde_json::from_value(serde_json::json!({})).unwrap();
        let mut gen = GenRequest {
            request_id: "r".into(),
            prompt_ids: vec![1, 2],
            params: sampling.validate(None, 10).unwrap(),
            max_tokens: 7,
        };
        let req = GenerateRequest::new(&gen);
        assert_eq!((req.sampling.max_tokens, req.beam), (Some(7), None));
        gen.params.beam = Some(BeamSearchParams {
            beam_width: 3,
            ..Default::default()
        });
        let beam = GenerateRequest::new(&gen).beam.unwrap();
        assert_eq!((beam.beam_width, beam.max_tokens), (3, 7));
    }
}
