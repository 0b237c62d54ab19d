//! What the API's rules need to know about the server and its model: built once at start-up
//! by `ApiContext::build` from the serve options and the worker's model facts (both shells
//! alike), then read-only.
use crate::errors::ApiError;
use crate::prompt::{render_chat, TemplateArgs};
use crate::reasoning::ReasoningFormat;
use crate::structured::{GrammarCompiler, StructuredOptions};
use crate::text::chat_template::ChatTemplate;
use crate::text::tokenizer::Tokenizer;
use crate::tools::ToolOptions;
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
    /// The engine runs `--scheduling-policy priority` (else a non-zero `priority` is refused).
    pub priority_scheduling: bool,
    /// An embedding model's vector size (`dimensions` must equal it).
    pub hidden_size: u32,
    /// The embedding model's tokenizer expects lowercased text (BERT uncased).
    pub lowercase_inputs: bool,
    /// vLLM's `--pooler-config` `enable_chunked_processing`: an embedding input longer than
    /// `max_model_len` is pooled in chunks of `max_model_len` tokens, the chunks averaged.
    pub chunked_processing: bool,
    /// `--pooler-config` `max_embed_len`: the longest embedding input (None: no limit
    /// beyond `max_model_len` without chunked processing).
    pub max_embed_len: Option<usize>,
    /// Structured outputs' compiler, or why this model has none (an embedding model, a
    /// tokenizer whose vocabulary llguidance cannot read as bytes).
    pub grammars: Result<Arc<GrammarCompiler>, String>,
    /// `--tool-call-parser` and `--enable-auto-tool-choice`.
    pub tools: ToolOptions,
    /// `--reasoning-parser`.
    pub reasoning: Option<ReasoningFormat>,
    /// `--enable-force-include-usage`: every stream ends with its usage, asked or not.
    pub force_include_usage: bool,
    /// `--enable-prompt-tokens-details`: usage shows the prefix cache's hits.
    pub prompt_tokens_details: bool,
    /// What the shell logs once at start-up (e.g. a template that ignores tools).
    pub warnings: Vec<String>,
}

/// What the engine worker says of its model (GetModelInfo), in the API's own types.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelFacts {
    pub served_model_name: String,
    /// The Hugging Face folder the worker loaded.
    pub model_path: String,
    pub max_model_len: u32,
    pub vocab_size: u32,
    pub eos_token_ids: Vec<u32>,
    pub tokenizer_path: String,
    /// The template's text ("" if the model has none).
    pub chat_template: String,
    pub embed: bool,
    pub bos_token: String,
    pub eos_token: String,
    pub hidden_size: u32,
    pub lowercase_inputs: bool,
    pub max_num_seqs: u32,
    pub priority_scheduling: bool,
    pub chunked_processing: bool,
    /// 0: no limit.
    pub max_embed_len: u32,
}

/// The serve options that shape the API (vLLM's flags).
#[derive(Debug, Clone, Default)]
pub struct ApiOptions {
    pub served_model_name: Vec<String>,
    pub max_model_len: Option<u32>,
    pub tokenizer_path: Option<String>,
    /// `--chat-template`: a file.
    pub chat_template: Option<String>,
    pub max_tokens_limit: Option<u32>,
    pub max_beam_width: u32,
    /// `--structured-outputs-config`.
    pub structured: StructuredOptions,
    /// `--tool-call-parser`.
    pub tool_call_parser: Option<String>,
    /// `--enable-auto-tool-choice`.
    pub enable_auto_tool_choice: bool,
    /// `--reasoning-parser`.
    pub reasoning_parser: Option<String>,
    /// `--enable-force-include-usage`.
    pub enable_force_include_usage: bool,
    /// `--enable-prompt-tokens-details`.
    pub enable_prompt_tokens_details: bool,
}

impl ApiOptions {
    /// `--chat-template`, compiled: called before the worker is asked anything, so a broken
    /// one fails at once.
    pub fn override_template(&self) -> anyhow::Result<Option<ChatTemplate>> {
        let Some(path) = &self.chat_template else {
            return Ok(None);
        };
        let src = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read chat template {path}: {e}"))?;
        let t = ChatTemplate::compile(&src)
            .map_err(|e| anyhow::anyhow!("chat template {path}: {e}"))?;
        Ok(Some(t))
    }
}

impl ApiContext {
    /// The context for a model: the options' overrides (tokenizer, template, names, context
    /// window), else the model's own. `template`: `ApiOptions::override_template`'s.
    pub fn build(
        model: &ModelFacts,
        o: &ApiOptions,
        template: Option<ChatTemplate>,
    ) -> anyhow::Result<ApiContext> {
        let tools = ToolOptions::new(o.tool_call_parser.as_deref(), o.enable_auto_tool_choice)?;
        let reasoning = o
            .reasoning_parser
            .as_deref()
            .map(ReasoningFormat::from_name)
            .transpose()?;
        let tok_path = o.tokenizer_path.as_deref().unwrap_or(&model.tokenizer_path);
        let tokenizer = Tokenizer::from_file(std::path::Path::new(tok_path))?;
        let template = match template {
            Some(t) => Some(t),
            None if !model.chat_template.is_empty() => Some(
                ChatTemplate::compile(&model.chat_template)
                    .map_err(|e| anyhow::anyhow!("model chat template: {e}"))?,
            ),
            None => None,
        };
        let mut served_names = o.served_model_name.clone();
        if served_names.is_empty() {
            served_names.push(match model.served_model_name.is_empty() {
                true => model.model_path.clone(),
                false => model.served_model_name.clone(),
            });
        }
        let vocab_size = (model.vocab_size as usize).max(tokenizer.vocab_size());
        let grammars = match model.embed {
            true => Err("an embedding model generates no text".to_string()),
            false => GrammarCompiler::for_tokenizer(
                &tokenizer,
                vocab_size,
                &model.eos_token_ids,
                o.structured.clone(),
            )
            .map(Arc::new)
            .map_err(|e| format!("its tokenizer's vocabulary cannot be read as bytes ({e})")),
        };
        let mut warnings = vec![];
        if tools.auto
            && !template
                .as_ref()
                .is_some_and(|t| t.source().contains("tools"))
        {
            warnings.push(
                "--enable-auto-tool-choice is set but the chat template never reads `tools`: \
                 the model is not told which tools it has (pass a tool-aware --chat-template)"
                    .to_string(),
            );
        }
        Ok(ApiContext {
            tools,
            reasoning,
            force_include_usage: o.enable_force_include_usage,
            prompt_tokens_details: o.enable_prompt_tokens_details,
            warnings,
            vocab_size,
            grammars,
            tokenizer: Arc::new(tokenizer),
            template,
            served_names,
            max_model_len: o.max_model_len.unwrap_or(model.max_model_len),
            max_tokens_limit: o.max_tokens_limit,
            max_beam_width: o.max_beam_width,
            embed: model.embed,
            bos_token: model.bos_token.clone(),
            eos_token: model.eos_token.clone(),
            eos_token_ids: model.eos_token_ids.clone().into(),
            max_num_seqs: model.max_num_seqs,
            priority_scheduling: model.priority_scheduling,
            hidden_size: model.hidden_size,
            lowercase_inputs: model.lowercase_inputs,
            chunked_processing: model.chunked_processing,
            max_embed_len: (model.max_embed_len > 0).then_some(model.max_embed_len as usize),
        })
    }

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
        grammars: Err("a test context".into()),
        max_tokens_limit: None,
        max_beam_width: 4,
        embed: false,
        bos_token: String::new(),
        eos_token: "</s>".into(),
        eos_token_ids: vec![4].into(),
        max_num_seqs: 8,
        priority_scheduling: false,
        hidden_size: 0,
        lowercase_inputs: false,
        chunked_processing: false,
        max_embed_len: None,
        tools: ToolOptions::default(),
        reasoning: None,
        force_include_usage: false,
        prompt_tokens_details: false,
        warnings: vec![],
    }
}
