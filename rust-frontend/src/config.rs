//! Serve options passed by the Python launcher as `--args-json`.
//!
//! Schema (every key optional):
//! ```json
//! {
//!   "served_model_name": ["name", "alias"],   // first is reported; default: ModelInfo's name
//!   "max_model_len": 2048,                    // default: ModelInfo.max_model_len
//!   "api_keys": ["sk-..."],                   // empty: no auth
//!   "allowed_origins": ["*"], "allowed_methods": ["*"], "allowed_headers": ["*"],
//!   "allow_credentials": false,
//!   "max_request_body_bytes": 33554432,       // larger bodies get 413
//!   "chat_template": "/path/template.jinja",  // overrides the model's template
//!   "tokenizer_path": "/path/tokenizer.json", // default: ModelInfo.tokenizer_path
//!   "max_log_len": 0,                         // prompt token ids logged per request (0: none)
//!   "engine_connect_timeout_s": 60,           // how long to retry GetModelInfo at start-up
//!   "disable_log_requests": false,
//!   "shutdown_timeout_s": 30                  // drain time for in-flight requests on SIGTERM
//! }
//! ```
//! Unknown keys are rejected so that a typo in the launcher fails loudly at start-up.
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    #[serde(deserialize_with = "string_or_list")]
    pub served_model_name: Vec<String>,
    pub max_model_len: Option<u32>,
    pub api_keys: Vec<String>,
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
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            served_model_name: vec![],
            max_model_len: None,
            api_keys: vec![],
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

impl ServeConfig {
    pub fn parse(json: &str) -> anyhow::Result<Self> {
        serde_json::from_str(json).map_err(|e| anyhow::anyhow!("invalid --args-json: {e}"))
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
}
