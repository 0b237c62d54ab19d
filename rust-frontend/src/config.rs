//! Serve options passed by the Python launcher as `--args-json`.
//!
//! Schema (every key optional):
//! ```json
//! {
//!   "served_model_name": ["name", "alias"],   // first is reported; default: ModelInfo's name
//!   "max_model_len": 2048,                    // default: ModelInfo.max_model_len
//!   "api_keys": ["sk-..."],                   // empty: no auth (prefer the environment)
//!   "metrics_no_auth": false,                 // /metrics open even with api_keys
//!   "allowed_origins": ["*"], "allowed_methods": ["*"], "allowed_headers": ["*"],
//!   "allow_credentials": false,
//!   "max_request_body_bytes": 33554432,       // larger bodies get 413
//!   "chat_template": "/path/template.jinja",  // overrides the model's template
//!   "tokenizer_path": "/path/tokenizer.json", // default: ModelInfo.tokenizer_path
//!   "max_log_len": 0,                         // prompt token ids logged per request (0: none)
//!   "engine_connect_timeout_s": 60,           // how long to retry GetModelInfo at start-up
//!   "disable_log_requests": false,
//!   "shutdown_timeout_s": 30,                 // drain time for in-flight requests on SIGTERM
//!   "header_read_timeout_s": 10,              // a request head (or a keep-alive's next) in time
//!   "send_timeout_s": 60,                     // a write to the client stalled longer: closed
//!   "max_tokens_limit": null,                 // operator cap on max_tokens (400 above it)
//!   "responses_store_size": 1000,             // /v1/responses objects kept (LRU; 0: none)
//!   "disable_playground": false,              // no page at GET /
//!   "max_beam_width": 16,                     // largest n of a use_beam_search request
//!   "ssl_certfile": null, "ssl_keyfile": null, // PEM files: serve HTTPS (rustls)
//!   "structured_outputs_config": null,        // --structured-outputs-config's JSON object
//!   "tool_call_parser": null,                 // --tool-call-parser: hermes, llama3_json, ...
//!   "enable_auto_tool_choice": false,         // --enable-auto-tool-choice
//!   "reasoning_parser": null,                 // --reasoning-parser: deepseek_r1, qwen3
//!   "enable_force_include_usage": false,      // every stream ends with its usage
//!   "enable_prompt_tokens_details": false,    // usage shows prefix-cache hits
//!   "enable_server_load_tracking": false,     // GET /load counts requests in flight
//!   "root_path": null,                        // --root-path: served under this prefix too
//!   "metrics_prefix": "hybridllm",            // --metrics-prefix: /metrics names' prefix
//!   "enable_request_id_headers": false        // every response carries X-Request-Id
//! }
//! ```
//! Unknown keys are rejected so that a typo in the launcher fails loudly at start-up.
//!
//! API keys also come from the environment, never the command line (any local user can read
//! /proc/PID/cmdline; the environment only the owner): `HYBRIDLLM_FRONTEND_API_KEYS`, a JSON
//! list (what the launcher passes), and `HYBRIDLLM_API_KEY`, comma-separated (as an operator
//! sets it for `serve`, like vLLM's `VLLM_API_KEY`).
use hybridllm_api::structured::StructuredOptions;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    #[serde(deserialize_with = "string_or_list")]
    pub served_model_name: Vec<String>,
    pub max_model_len: Option<u32>,
    pub api_keys: Vec<String>,
    pub metrics_no_auth: bool,
    pub allowed_origins: Vec<String>,
    pub allowed_methods: Vec<String>,
    pub allowed_headers: Vec<String>,
    pub allow_credentials: bool,
    pub max_request_body_bytes: usize,
    pub chat_template: Option<String>,
    pub tokenizer_path: Option<String>,
    pub max_log_len: usize,
    pub engine_connect_timeout_s: f64,
    pub disable_log_requests: bool,
    pub shutdown_timeout_s: f64,
    /// 0 disables it.
    pub header_read_timeout_s: f64,
    /// 0 disables it.
    pub send_timeout_s: f64,
    pub max_tokens_limit: Option<u32>,
    pub responses_store_size: usize,
    pub disable_playground: bool,
    pub max_beam_width: u32,
    pub ssl_certfile: Option<String>,
    pub ssl_keyfile: Option<String>,
    /// vLLM's `--structured-outputs-config` (the core's `StructuredOptions`).
    pub structured_outputs_config: Option<StructuredOptions>,
    pub tool_call_parser: Option<String>,
    pub enable_auto_tool_choice: bool,
    pub reasoning_parser: Option<String>,
    /// vLLM's `--enable-force-include-usage`: every stream ends with its usage.
    pub enable_force_include_usage: bool,
    /// vLLM's `--enable-prompt-tokens-details`: usage's `prompt_tokens_details.cached_tokens`.
    pub enable_prompt_tokens_details: bool,
    /// vLLM's `--enable-server-load-tracking`: GET /load counts the requests in flight.
    pub enable_server_load_tracking: bool,
    /// `--root-path`: behind a proxy under this prefix (stripped or not by the proxy).
    pub root_path: Option<String>,
    /// `--metrics-prefix`: the families are `<prefix>:…` (`vllm` for vLLM's names).
    pub metrics_prefix: String,
    /// vLLM's `--enable-request-id-headers`: every response carries `X-Request-Id` (the
    /// request's, or a new one).
    pub enable_request_id_headers: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            served_model_name: vec![],
            max_model_len: None,
            api_keys: vec![],
            metrics_no_auth: false,
            allowed_origins: vec!["*".into()],
            allowed_methods: vec!["*".into()],
            allowed_headers: vec!["*".into()],
            allow_credentials: false,
            max_request_body_bytes: 32 << 20,
            chat_template: None,
            tokenizer_path: None,
            max_log_len: 0,
            engine_connect_timeout_s: 60.0,
            disable_log_requests: false,
            shutdown_timeout_s: 30.0,
            header_read_timeout_s: 10.0,
            send_timeout_s: 60.0,
            max_tokens_limit: None,
            responses_store_size: 1000,
            disable_playground: false,
            max_beam_width: 16,
            ssl_certfile: None,
            ssl_keyfile: None,
            structured_outputs_config: None,
            tool_call_parser: None,
            enable_auto_tool_choice: false,
            reasoning_parser: None,
            enable_force_include_usage: false,
            enable_prompt_tokens_details: false,
            enable_server_load_tracking: false,
            root_path: None,
            metrics_prefix: hybridllm_api::metrics::DEFAULT_PREFIX.into(),
            enable_request_id_headers: false,
        }
    }
}

fn string_or_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
        Null(()),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
        OneOrMany::Null(()) => vec![],
    })
}

pub const KEYS_JSON_ENV: &str = "HYBRIDLLM_FRONTEND_API_KEYS";
pub const KEY_ENV: &str = "HYBRIDLLM_API_KEY";

/// Keys from the two environment variables (see the module comment).
fn env_keys(json: Option<String>, list: Option<String>) -> anyhow::Result<Vec<String>> {
    let mut keys: Vec<String> = match json {
        // The error names the variable, never its value.
        Some(j) => serde_json::from_str(&j)
            .map_err(|_| anyhow::anyhow!("{KEYS_JSON_ENV} must be a JSON list of strings"))?,
        None => vec![],
    };
    if let Some(l) = list {
        keys.extend(
            l.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(String::from),
        );
    }
    Ok(keys)
}

impl ServeConfig {
    pub fn parse(json: &str) -> anyhow::Result<Self> {
        let mut c: Self =
            serde_json::from_str(json).map_err(|e| anyhow::anyhow!("invalid --args-json: {e}"))?;
        if let Some(s) = &c.structured_outputs_config {
            s.check()?;
        }
        hybridllm_api::tools::ToolOptions::new(
            c.tool_call_parser.as_deref(),
            c.enable_auto_tool_choice,
        )?;
        if let Some(name) = &c.reasoning_parser {
            hybridllm_api::reasoning::ReasoningFormat::from_name(name)?;
        }
        hybridllm_api::metrics::check_prefix(&c.metrics_prefix).map_err(anyhow::Error::msg)?;
        c.root_path = hybridllm_api::root_path::normalise(c.root_path.as_deref())
            .map_err(anyhow::Error::msg)?;
        Ok(c)
    }

    /// `--args-json` plus the API keys from the environment.
    pub fn load(json: &str) -> anyhow::Result<Self> {
        let mut c = Self::parse(json)?;
        let keys = env_keys(
            std::env::var(KEYS_JSON_ENV).ok(),
            std::env::var(KEY_ENV).ok(),
        )?;
        c.api_keys.extend(keys);
        Ok(c)
    }
}

impl ServeConfig {
    /// The options that shape the API (the core's).
    pub fn api_options(&self) -> hybridllm_api::context::ApiOptions {
        hybridllm_api::context::ApiOptions {
            served_model_name: self.served_model_name.clone(),
            max_model_len: self.max_model_len,
            tokenizer_path: self.tokenizer_path.clone(),
            chat_template: self.chat_template.clone(),
            max_tokens_limit: self.max_tokens_limit,
            max_beam_width: self.max_beam_width,
            structured: self.structured_outputs_config.clone().unwrap_or_default(),
            tool_call_parser: self.tool_call_parser.clone(),
            enable_auto_tool_choice: self.enable_auto_tool_choice,
            reasoning_parser: self.reasoning_parser.clone(),
            enable_force_include_usage: self.enable_force_include_usage,
            enable_prompt_tokens_details: self.enable_prompt_tokens_details,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_defaults() {
        let c = ServeConfig::parse(r#"{"served_model_name": "m", "api_keys": ["k"]}"#).unwrap();
        assert_eq!(c.served_model_name, vec!["m"]);
        assert_eq!(c.allowed_origins, vec!["*"]);
        assert_eq!(c.max_request_body_bytes, 32 << 20);
        assert!(ServeConfig::parse(r#"{"typo": 1}"#).is_err());
    }

    #[test]
    fn keys_from_the_environment() {
        let k = env_keys(Some(r#"["a,b", "c"]"#.into()), Some(" d, ,e ".into())).unwrap();
        assert_eq!(k, vec!["a,b", "c", "d", "e"]);
        let e = env_keys(Some("sk-secret".into()), None)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("sk-secret"), "{e}");
    }
}
