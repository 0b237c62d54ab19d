//! What every request handler shares: the configuration, the engine, the text pipeline and
//! the metrics. Built once at start-up (server.rs), then read-only.
use crate::config::ServeConfig;
use crate::engine::Engine;
use crate::engine_client::EngineClient;
use crate::metrics::Metrics;
use hybridllm_api::auth::Auth;
use hybridllm_api::context::ApiContext;
use hybridllm_api::cors::Cors;
use hybridllm_api::response_store::ResponseStore;
use std::sync::Arc;

pub struct AppState {
    pub config: ServeConfig,
    /// Who may call what (the core's rule, from `config`'s keys and open paths).
    pub auth: Auth,
    /// The CORS policy (the core's, from `config`'s allowed lists).
    pub cors: Cors,
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
    /// The core's families, shared with each request's `EngineEvents`.
    pub metrics: Arc<Metrics>,
    /// `/v1/responses` objects created with `store: true`.
    pub responses: ResponseStore,
    /// The tasks running background responses, by response id (a cancel aborts its task,
    /// which drops its engine stream and so aborts the engine request).
    pub background: std::sync::Mutex<std::collections::HashMap<String, tokio::task::AbortHandle>>,
    pub created: i64,
}

impl AppState {
    /// A whole (not streamed) generation answer: the JSON body, with vLLM's ORCA load report
    /// when the request asked for one.
    pub async fn answer(
        &self,
        headers: &axum::http::HeaderMap,
        body: serde_json::Value,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let mut response = axum::Json(body).into_response();
        crate::metrics::attach_orca(&self.metrics, &self.engine_clients, headers, &mut response)
            .await;
        response
    }
}

/// The core's auth rule for a configuration.
pub fn auth(config: &ServeConfig) -> Auth {
    Auth::new(
        config.api_keys.clone(),
        config.metrics_no_auth,
        !config.disable_playground,
    )
}

/// The core's CORS policy for a configuration.
pub fn cors(c: &ServeConfig) -> Cors {
    Cors::new(
        &c.allowed_origins,
        &c.allowed_methods,
        &c.allowed_headers,
        c.allow_credentials,
    )
}
