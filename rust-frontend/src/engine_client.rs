//! The gRPC client of the engine worker, over a unix socket or TCP, and the one place where
//! the core's engine types (`hybridllm_api::engine_io`, `sampling`) become protobuf and the
//! worker's messages and statuses become them.
use hybridllm_api::engine_io::{
    EmbedRequest, EngineError, EngineFinish, EngineStep, GenerateRequest, PositionLogprobs,
    PromptInfo, SequenceDelta, TokenLogprob,
};
use hybridllm_api::sampling::{BeamSearchParams, SamplingParams};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

pub mod pb {
    tonic::include_proto!("hybridllm.engine.v1");
}

pub type EngineClient = pb::engine_client::EngineClient<Channel>;

/// Connects lazily (the channel reconnects by itself if the worker restarts).
pub fn connect(address: &str) -> anyhow::Result<EngineClient> {
    let channel = if let Some(path) = address.strip_prefix("unix://") {
        let path = path.to_string();
        // The URI is a placeholder: the connector ignores it and dials the socket path.
        Endpoint::from_static("http://engine.local")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
    } else {
        let uri = if address.contains("://") {
            address.to_string()
        } else {
            format!("http://{address}")
        };
        Endpoint::from_shared(uri)?
            .connect_timeout(Duration::from_secs(5))
            .connect_lazy()
    };
    // Prompts of 128k+ token ids exceed tonic's 4 MiB default.
    Ok(pb::engine_client::EngineClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX))
}

/// GetModelInfo, retried while the worker is still starting.
pub async fn model_info(client: &EngineClient, timeout: Duration) -> anyhow::Result<pb::ModelInfo> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match client.clone().get_model_info(pb::ModelInfoRequest {}).await {
            Ok(r) => return Ok(r.into_inner()),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::debug!("engine not ready yet: {}", e.message());
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => anyhow::bail!("cannot reach the engine: {} ({:?})", e.message(), e.code()),
        }
    }
}

/// Whether the worker answers Health with SERVING within `timeout`.
pub async fn serving(client: &EngineClient, timeout: Duration) -> bool {
    let mut client = client.clone();
    let call = client.health(pb::HealthRequest {});
    matches!(tokio::time::timeout(timeout, call).await,
        Ok(Ok(r)) if r.get_ref().status == pb::health_response::Status::Serving as i32)
}

impl From<GenerateRequest> for pb::GenerateRequest {
    fn from(r: GenerateRequest) -> Self {
        pb::GenerateRequest {
            request_id: r.request_id,
            prompt_token_ids: r.prompt_ids,
            sampling_params: Some(r.sampling.into()),
            beam_search: r.beam.map(Into::into),
            priority: r.priority,
        }
    }
}

impl From<EmbedRequest> for pb::EmbedRequest {
    fn from(r: EmbedRequest) -> Self {
        pb::EmbedRequest {
            request_id: r.request_id,
            inputs: r
                .inputs
                .into_iter()
                .map(|token_ids| pb::EmbedInput { token_ids })
                .collect(),
            normalize: r.normalize,
        }
    }
}

impl From<SamplingParams> for pb::SamplingParams {
    fn from(p: SamplingParams) -> Self {
        pb::SamplingParams {
            n: p.n,
            temperature: p.temperature,
            top_p: p.top_p,
            top_k: p.top_k,
            min_p: p.min_p,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            repetition_penalty: p.repetition_penalty,
            seed: p.seed,
            max_tokens: p.max_tokens,
            min_tokens: p.min_tokens,
            stop_token_ids: p.stop_token_ids,
            ignore_eos: p.ignore_eos,
            logprobs: p.logprobs,
            prompt_logprobs: p.prompt_logprobs,
            logit_bias: p.logit_bias,
            grammar: p.grammar.unwrap_or_default(),
            cache_salt: p.cache_salt.unwrap_or_default(),
            allowed_token_ids: p.allowed_token_ids,
            bad_words: p.bad_words,
        }
    }
}

impl From<BeamSearchParams> for pb::BeamSearchParams {
    fn from(p: BeamSearchParams) -> Self {
        pb::BeamSearchParams {
            beam_width: p.beam_width,
            max_tokens: p.max_tokens,
            ignore_eos: p.ignore_eos,
            length_penalty: p.length_penalty,
            include_stop_str_in_output: p.include_stop_str_in_output,
        }
    }
}

// What the worker reports, into the core's types.
impl From<pb::TokenLogprob> for TokenLogprob {
    fn from(t: pb::TokenLogprob) -> Self {
        TokenLogprob {
            token_id: t.token_id,
            logprob: t.logprob,
            rank: t.rank,
        }
    }
}

impl From<pb::PositionLogprobs> for PositionLogprobs {
    fn from(p: pb::PositionLogprobs) -> Self {
        PositionLogprobs {
            token: p.token.map(Into::into),
            top: p.top.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<pb::PromptInfo> for PromptInfo {
    fn from(p: pb::PromptInfo) -> Self {
        PromptInfo {
            prompt_tokens: p.prompt_tokens,
            cached_tokens: p.cached_tokens,
            prompt_logprobs: p.prompt_logprobs.into_iter().map(Into::into).collect(),
            queue_time_s: p.queue_time_s,
        }
    }
}

impl From<pb::SequenceDelta> for SequenceDelta {
    fn from(d: pb::SequenceDelta) -> Self {
        let finish = match pb::FinishReason::try_from(d.finish_reason) {
            Ok(pb::FinishReason::Unspecified) | Err(_) => EngineFinish::Running,
            Ok(pb::FinishReason::Length) => EngineFinish::Length,
            Ok(pb::FinishReason::Abort) => EngineFinish::Abort,
            Ok(pb::FinishReason::Stop) => EngineFinish::Stop,
            Ok(pb::FinishReason::Error) => EngineFinish::Error,
        };
        SequenceDelta {
            index: d.index,
            token_ids: d.token_ids,
            logprobs: d.logprobs.into_iter().map(Into::into).collect(),
            finish,
            stop_token_id: d.stop_token_id,
        }
    }
}

/// A response that is not a refusal (the mux turns those into errors first).
impl From<pb::GenerateResponse> for EngineStep {
    fn from(r: pb::GenerateResponse) -> Self {
        EngineStep {
            prompt: r.prompt.map(Into::into),
            sequences: r.sequences.into_iter().map(Into::into).collect(),
            error: (!r.error.is_empty()).then_some(r.error),
            error_param: (!r.error_param.is_empty()).then_some(r.error_param),
            finished: r.finished,
        }
    }
}

/// The worker's refusal of a request (its `rejected`).
impl From<pb::RequestError> for EngineError {
    fn from(e: pb::RequestError) -> Self {
        let param = (!e.param.is_empty()).then_some(e.param);
        engine_error(Code::from(e.code), e.message, param, false)
    }
}

/// A failed call. A status made here from a transport error (the worker's connection dropped
/// mid-stream, as when it is killed) carries its source; one sent by the worker does not.
pub fn from_status(s: tonic::Status) -> EngineError {
    let lost = std::error::Error::source(&s).is_some();
    engine_error(s.code(), s.message().to_string(), None, lost)
}

fn engine_error(code: Code, message: String, param: Option<String>, lost: bool) -> EngineError {
    EngineError::from_grpc_code(code as i32, message, param, lost)
}

impl From<pb::LoadResponse> for hybridllm_api::metrics::EngineLoad {
    fn from(l: pb::LoadResponse) -> Self {
        hybridllm_api::metrics::EngineLoad {
            num_running: l.num_running,
            num_waiting: l.num_waiting,
            kv_cache_usage: l.kv_cache_usage,
            prompt_tokens_total: l.prompt_tokens_total,
            generation_tokens_total: l.generation_tokens_total,
            prefix_cache_queries_total: l.prefix_cache_queries_total,
            prefix_cache_hits_total: l.prefix_cache_hits_total,
            num_preemptions_total: l.num_preemptions_total,
            spec_decode_num_drafts_total: l.spec_decode_num_drafts_total,
            spec_decode_num_draft_tokens_total: l.spec_decode_num_draft_tokens_total,
            spec_decode_num_accepted_tokens_total: l.spec_decode_num_accepted_tokens_total,
            spec_decode_num_accepted_tokens_per_pos: l.spec_decode_num_accepted_tokens_per_pos,
        }
    }
}

impl From<pb::ModelInfo> for hybridllm_api::context::ModelFacts {
    fn from(m: pb::ModelInfo) -> Self {
        hybridllm_api::context::ModelFacts {
            embed: m.kind == pb::model_info::Kind::Embed as i32,
            served_model_name: m.served_model_name,
            model_path: m.model_path,
            max_model_len: m.max_model_len,
            vocab_size: m.vocab_size,
            eos_token_ids: m.eos_token_ids,
            tokenizer_path: m.tokenizer_path,
            chat_template: m.chat_template,
            bos_token: m.bos_token,
            eos_token: m.eos_token,
            hidden_size: m.hidden_size,
            lowercase_inputs: m.lowercase_inputs,
            max_num_seqs: m.max_num_seqs,
            priority_scheduling: m.priority_scheduling,
            chunked_processing: m.chunked_processing,
            max_embed_len: m.max_embed_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use hybridllm_api::errors::{ApiError, RETRY_AFTER_S};

    fn api_error(s: tonic::Status) -> ApiError {
        from_status(s).into()
    }

    #[test]
    fn grpc_statuses() {
        let e = api_error(tonic::Status::invalid_argument("bad ids"));
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            api_error(tonic::Status::unavailable("x")).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let e = api_error(tonic::Status::resource_exhausted("busy"));
        assert_eq!(e.body()["error"]["type"], "RateLimitError");
        let resp = crate::errors::HttpError(e).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["retry-after"], RETRY_AFTER_S);
    }

    #[test]
    fn lost_connection_is_503_worker_error_is_500() {
        let lost = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let e = api_error(tonic::Status::from_error(Box::new(lost)));
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        let e = api_error(tonic::Status::unknown("worker bug"));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn a_refusal_names_the_field_the_worker_names() {
        let refusal = |param: &str| pb::RequestError {
            code: Code::InvalidArgument as i32,
            message: "min_tokens must be in [0, max_tokens], got 9.".into(),
            param: param.into(),
        };
        let e = ApiError::from(EngineError::from(refusal("min_tokens")));
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.body()["error"]["param"], "min_tokens");
        let e = ApiError::from(EngineError::from(refusal("")));
        assert_eq!(e.body()["error"]["param"], serde_json::Value::Null);
    }

    #[test]
    fn an_error_finish_stays_an_error() {
        let step = EngineStep::from(pb::GenerateResponse {
            error: "CUDA out of memory".into(),
            sequences: vec![pb::SequenceDelta {
                finish_reason: pb::FinishReason::Error as i32,
                ..Default::default()
            }],
            finished: true,
            ..Default::default()
        });
        assert_eq!(step.sequences[0].finish, EngineFinish::Error);
        assert_eq!(step.error.as_deref(), Some("CUDA out of memory"));
    }
}
