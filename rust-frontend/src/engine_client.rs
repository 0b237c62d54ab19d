//! The gRPC client of the engine worker, over a unix socket or TCP.
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

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

// The core's validated parameters on the wire: the one place they become protobuf.
impl From<hybridllm_api::sampling::SamplingParams> for pb::SamplingParams {
    fn from(p: hybridllm_api::sampling::SamplingParams) -> Self {
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
        }
    }
}

impl From<hybridllm_api::sampling::BeamSearchParams> for pb::BeamSearchParams {
    fn from(p: hybridllm_api::sampling::BeamSearchParams) -> Self {
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
impl From<pb::TokenLogprob> for hybridllm_api::engine_io::TokenLogprob {
    fn from(t: pb::TokenLogprob) -> Self {
        hybridllm_api::engine_io::TokenLogprob {
            token_id: t.token_id,
            logprob: t.logprob,
            rank: t.rank,
        }
    }
}

impl From<pb::PositionLogprobs> for hybridllm_api::engine_io::PositionLogprobs {
    fn from(p: pb::PositionLogprobs) -> Self {
        hybridllm_api::engine_io::PositionLogprobs {
            token: p.token.map(Into::into),
            top: p.top.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<pb::PromptInfo> for hybridllm_api::engine_io::PromptInfo {
    fn from(p: pb::PromptInfo) -> Self {
        hybridllm_api::engine_io::PromptInfo {
            prompt_tokens: p.prompt_tokens,
            cached_tokens: p.cached_tokens,
            prompt_logprobs: p.prompt_logprobs.into_iter().map(Into::into).collect(),
            queue_time_s: p.queue_time_s,
        }
    }
}

impl From<pb::SequenceDelta> for hybridllm_api::engine_io::SequenceDelta {
    fn from(d: pb::SequenceDelta) -> Self {
        use hybridllm_api::engine_io::EngineFinish;
        let finish = match pb::FinishReason::try_from(d.finish_reason) {
            Ok(pb::FinishReason::Unspecified) | Err(_) => EngineFinish::Running,
            Ok(pb::FinishReason::Length) => EngineFinish::Length,
            Ok(pb::FinishReason::Abort) => EngineFinish::Abort,
            Ok(pb::FinishReason::Stop) => EngineFinish::Stop,
            Ok(pb::FinishReason::Error) => EngineFinish::Error,
        };
        hybridllm_api::engine_io::SequenceDelta {
            index: d.index,
            token_ids: d.token_ids,
            logprobs: d.logprobs.into_iter().map(Into::into).collect(),
            finish,
            stop_token_id: d.stop_token_id,
        }
    }
}

impl From<pb::GenerateResponse> for hybridllm_api::engine_io::EngineStep {
    fn from(r: pb::GenerateResponse) -> Self {
        hybridllm_api::engine_io::EngineStep {
            prompt: r.prompt.map(Into::into),
            sequences: r.sequences.into_iter().map(Into::into).collect(),
            error: r.error,
        }
    }
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
        }
    }
}
