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
