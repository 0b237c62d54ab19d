//! What the API's rules need to know about the server and its model: built once by each
//! shell at start-up (the Rust frontend from its flags and the worker's ModelInfo, the Python
//! fallback through `hybridllm._api.Context`), then read-only.
use crate::errors::ApiError;
use crate::prompt::{render_chat, TemplateArgs};
use crate::text::chat_template::ChatTemplate;
use crate::text::tokenizer::Tokenizer;
use serde_json::Value;
use std::sync::Arc;

pub struct ApiContext {
    pub tokenizer: Arc<Tokenizer>,
    /// The chat template: `--chat-template`, else the model's (None: it has none).
    pub template: Option<ChatTemplate>,
    /// `--served-model-name`; the first is the one responses report.
    pub served_names: Vec<String>,
    pub max_model_len: u32,
    /// The larger of the model's and the tokenizer's: ids beyond are refused.
    pub vocab_size: usize,
    /// `--max-tokens-limit`.
    pub max_tokens_limit: Option<u32>,
    /// `--max-beam-width`.
    pub max_beam_width: u32,
    /// An embedding model (the generate APIs refuse it, and it only serves those).
    pub embed: bool,
    pub bos_token: String,
    pub eos_token: String,
    /// The model's EOS ids: a stop on one of them reports no `stop_reason`.
    pub eos_token_ids: Arc<[u32]>,
    /// The engine's `--max-num-seqs` (0: the worker did not say).
    pub max_num_seqs: u32,
    /// An embedding model's vector size (`dimensions` must equal it).
    pub hidden_size: u32,
    /// The embedding model's tokenizer expects lowercased text (BERT uncased).
    pub lowercase_inputs: bool,
}

impl ApiContext {
    pub fn model_name(&self) -> &str {
        &self.served_names[0]
    }

    /// An omitted/null model is allowed; any other name must be one of the served names.
    pub fn check_model(&self, model: &Option<String>) -> Result<(), ApiError> {
        match model {
            Some(m) if !self.served_names.iter().any(|s| s == m) => {
                Err(ApiError::model_not_found(m))
            }
            _ => Ok(()),
        }
    }

    /// An endpoint the model cannot serve: 400 naming the model's task (vLLM's answer).
    pub fn check_task(&self, api: &str, embed: bool) -> Result<(), ApiError> {
        if self.embed == embed {
            return Ok(());
        }
        let (kind, task) = if self.embed {
            ("an embedding", "embed")
        } else {
            ("a generative", "generate")
        };
        Err(ApiError::bad(format!(
            "The model does not support the {api} API: `{}` is {kind} model (task '{task}').",
            self.served_names[0]
        )))
    }

    /// Renders chat messages with the request's template, the --chat-template override or
    /// the model's.
    pub fn render_prompt(
        &self,
        messages: &[Value],
        t: &TemplateArgs,
        default_agp: bool,
    ) -> Result<String, ApiError> {
        render_chat(
            self.template.as_ref(),
            messages,
            t,
            default_agp,
            &self.bos_token,
            &self.eos_token,
        )
    }

    /// Client-given token ids must be in the vocabulary.
    pub fn check_ids(&self, param: &str, ids: &[u32]) -> Result<(), ApiError> {
        match ids.iter().find(|&&t| t as usize >= self.vocab_size) {
            Some(bad) => Err(ApiError::bad_param(
                param,
                format!(
                    "Token id {bad} is out of vocabulary (size {}).",
                    self.vocab_size
                ),
            )),
            None => Ok(()),
        }
    }
}

/// A context for the core's unit tests: a word-level tokenizer (ids 0.. for "[UNK] Hello
/// world foo </s>", decoded joined by spaces), a one-line chat template, a 32-token window.
#[cfg(test)]
pub(crate) fn test_context() -> ApiContext {
    let words = [
        "[UNK]",
        "Hello",
        "world",
        "foo",
        "</s>",
        "user:",
        "assistant:",
    ];
    let vocab: serde_json::Map<String, Value> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), serde_json::json!(i)))
        .collect();
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    });
    let inner: tokenizers::Tokenizer = json.to_string().parse().expect("a valid tokenizer");
    let template = "{% for m in messages %}{{ m.role }}: {{ m.content }} {% endfor %}\
                    {% if add_generation_prompt %}assistant:{% endif %}";
    ApiContext {
        tokenizer: Arc::new(Tokenizer::new(inner)),
        template: Some(ChatTemplate::compile(template).expect("a valid template")),
        served_names: vec!["m".into()],
        max_model_len: 32,
        vocab_size: words.len(),
        max_tokens_limit: None,
        max_beam_width: 4,
        embed: false,
        bos_token: String::new(),
        eos_token: "</s>".into(),
        eos_token_ids: vec![4].into(),
        max_num_seqs: 8,
        hidden_size: 0,
        lowercase_inputs: false,
    }
}
