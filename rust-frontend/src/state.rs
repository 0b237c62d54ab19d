//! What every request handler shares: the configuration, the engine, the text pipeline and
//! the metrics. Built once at start-up (server.rs), then read-only.
use crate::config::ServeConfig;
use crate::engine::Engine;
use crate::engine_client::{pb, EngineClient};
use crate::metrics::Metrics;
use hybridllm_api::response_store::ResponseStore;
use hybridllm_api::text::chat_template::ChatTemplate;
use hybridllm_api::text::tokenizer::Tokenizer;
use std::sync::Arc;

pub struct AppState {
    pub config: ServeConfig,
    /// Generate requests (in production `EngineRouter`: one GenerateStream call per worker).
    pub engine: Arc<dyn Engine>,
    /// Health and GetLoad of each engine worker, for /health and /metrics.
    pub engine_clients: Vec<EngineClient>,
    /// `--keep-alive`: /health is 200 while any worker answers, not only while all do.
    pub keep_alive: bool,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub model_info: pb::ModelInfo,
    /// `model_info.eos_token_ids`, shared with every request's text state.
    pub eos_token_ids: Arc<[u32]>,
    pub served_names: Vec<String>,
    pub max_model_len: u32,
    pub vocab_size: usize,
    pub metrics: Metrics,
    /// `/v1/responses` objects created with `store: true`.
    pub responses: ResponseStore,
    pub created: i64,
}
