//! What every request handler shares: the configuration, the engine, the text pipeline and
//! the metrics. Built once at start-up (server.rs), then read-only.
use crate::config::ServeConfig;
use crate::engine::Engine;
use crate::engine_client::EngineClient;
use crate::metrics::Metrics;
use hybridllm_api::context::ApiContext;
use hybridllm_api::response_store::ResponseStore;
use std::sync::Arc;

pub struct AppState {
    pub config: ServeConfig,
    /// Generate requests (in production `EngineRouter`: one GenerateStream call per worker).
    pub engine: Arc<dyn Engine>,
    /// Health and GetLoad of each engine worker, for /health and /metrics.
    pub engine_clients: Vec<EngineClient>,
    /// `--keep-alive`: /health is 200 while any worker answers, not only while all do.
    pub keep_alive: bool,
    /// What the API's rules need (the core's): tokenizer, chat template, served names,
    /// context window and vocabulary, limits, the model's special tokens.
    pub api: ApiContext,
    /// The model folder the worker loaded (`root` in /v1/models).
    pub model_path: String,
    /// The worker's tokenizer.json (/tokenizer_info reads it when --tokenizer is not given).
    pub tokenizer_path: String,
    pub metrics: Metrics,
    /// `/v1/responses` objects created with `store: true`.
    pub responses: ResponseStore,
    pub created: i64,
}
