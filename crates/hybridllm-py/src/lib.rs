//! `hybridllm._api`: the API core for the Python side of hybridllm (the fallback frontend and
//! the offline `LLM`), so that its rules (chat prompts, detokenization, stop strings, finish
//! reasons, errors) are the Rust frontend's own code, not a copy. Only conversion lives here.
use hybridllm_api::aggregate::Collector;
use hybridllm_api::auth::Auth as CoreAuth;
use hybridllm_api::chat::{ChatCall as CoreChatCall, ChatRequest, ChatResponse};
use hybridllm_api::chat_batch::{ChatBatchCall as CoreChatBatchCall, ChatBatchResponse};
use hybridllm_api::completions::{
    CompletionCall as CoreCompletionCall, CompletionRequest, CompletionResponse, Prompt,
};
use hybridllm_api::context::{ApiContext, ApiOptions, ModelFacts};
use hybridllm_api::cors::{Answer as CoreAnswer, Cors as CoreCors};
use hybridllm_api::embeddings::{
    EmbeddingCall as CoreEmbeddingCall, EmbeddingRequest,
    EmbeddingResponse as CoreEmbeddingResponse,
};
use hybridllm_api::engine_io::{
    EngineError, EngineStep, PositionLogprobs, PromptInfo, SequenceDelta, TokenLogprob,
};
use hybridllm_api::errors::ApiError as CoreError;
use hybridllm_api::metrics::{EngineLoad, Metrics as CoreMetrics};
use hybridllm_api::request::parse_body;
use hybridllm_api::response_store::ResponseStore as CoreStore;
use hybridllm_api::responses::input::ResponsesRequest;
use hybridllm_api::responses::{
    self as core_responses, ResponsesCall as CoreResponsesCall,
    ResponsesResponse as CoreResponsesResponse,
};
use hybridllm_api::sequence_text::{EngineFinish, SequenceText as CoreSequenceText};
use hybridllm_api::structured::{GrammarCompiler, StructuredOptions, StructuredOutputs};
use hybridllm_api::text::chat_template::ChatTemplate as CoreTemplate;
use hybridllm_api::text::tokenizer::{DecodeOpts, Tokenizer as CoreTokenizer};
use hybridllm_api::text_deltas::{EngineEvents as CoreEngineEvents, GenEvent};
use hybridllm_api::tokenize::{DetokenizeRequest, TokenizeCall, TokenizeRequest};
use hybridllm_api::validation::{Constrained, GenRequest};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString};
use serde_json::Value;
use std::sync::Arc;

create_exception!(
    _api,
    ApiError,
    PyException,
    "A refusal of the API: args are (status, body, headers): the HTTP status, the JSON error \
     body and the headers that kind of refusal carries, as the Rust frontend answers it."
);

fn api_error(e: CoreError) -> PyErr {
    let headers: Vec<(&str, &str)> = e.header().into_iter().collect();
    ApiError::new_err((e.status().as_u16(), e.body().to_string(), headers))
}

fn parse_json(what: &str, text: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

/// The model's tokenizer.json with the decode rules of the API (special tokens, spacing).
#[pyclass(frozen, module = "hybridllm._api")]
struct Tokenizer {
    inner: Arc<CoreTokenizer>,
}

#[pymethods]
impl Tokenizer {
    #[staticmethod]
    fn from_file(path: &str) -> PyResult<Self> {
        let inner = CoreTokenizer::from_file(std::path::Path::new(path))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Tokenizer {
            inner: Arc::new(inner),
        })
    }

    /// From tokenizer.json's text (e.g. `tokenizers.Tokenizer.to_str()`).
    #[staticmethod]
    fn from_str(json: &str) -> PyResult<Self> {
        let inner: tokenizers::Tokenizer = json
            .parse()
            .map_err(|e| PyValueError::new_err(format!("invalid tokenizer.json: {e}")))?;
        Ok(Tokenizer {
            inner: Arc::new(CoreTokenizer::new(inner)),
        })
    }

    #[pyo3(signature = (text, add_special_tokens))]
    fn encode(&self, py: Python<'_>, text: &str, add_special_tokens: bool) -> PyResult<Vec<u32>> {
        py.detach(|| self.inner.encode(text, add_special_tokens))
            .map_err(PyValueError::new_err)
    }

    #[pyo3(signature = (ids, skip_special_tokens=true, spaces_between_special_tokens=true))]
    fn decode(
        &self,
        ids: Vec<u32>,
        skip_special_tokens: bool,
        spaces_between_special_tokens: bool,
    ) -> PyResult<String> {
        let o = DecodeOpts {
            skip_special_tokens,
            spaces_between_special_tokens,
        };
        self.inner.decode(&ids, o).map_err(PyValueError::new_err)
    }

    /// One token's own text (special tokens included), as logprobs report it.
    fn token_text(&self, id: u32) -> String {
        self.inner.token_text(id)
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
}

/// A compiled chat template (minijinja, set up as transformers sets up Jinja2).
#[pyclass(frozen, module = "hybridllm._api")]
struct ChatTemplate {
    inner: CoreTemplate,
}

#[pymethods]
impl ChatTemplate {
    /// Raises ValueError naming the line when the template does not compile.
    #[new]
    fn new(source: &str) -> PyResult<Self> {
        CoreTemplate::compile(source)
            .map(|inner| ChatTemplate { inner })
            .map_err(PyValueError::new_err)
    }

    /// The text it was compiled from.
    #[getter]
    fn source(&self) -> &str {
        self.inner.source()
    }

    /// Renders prepared messages as they are (no request rules): `input` is the JSON text of
    /// {messages, tools, documents, add_generation_prompt, continue_final_message, bos_token,
    /// eos_token, kwargs}. Raises ValueError with the template's own error.
    fn render(&self, py: Python<'_>, input: &str) -> PyResult<String> {
        let input = serde_json::from_value(parse_json("input", input)?)
            .map_err(|e| PyValueError::new_err(format!("input: {e}")))?;
        py.detach(|| self.inner.render(&input))
            .map_err(PyValueError::new_err)
    }
}

/// The prompt of a chat request: `messages` and `args` (the request's `tools`, `documents`,
/// `add_generation_prompt`, `continue_final_message`, `chat_template`,
/// `chat_template_kwargs`) as JSON text; `template` the server's (None: the model has none).
/// Raises ApiError as the Rust frontend answers.
/// A model's whole output read by a tool-call parser (`hermes`, `llama3_json`, `pythonic`,
/// `mistral`): its content and its calls as (name, arguments JSON text) pairs, as the chat
/// endpoint reads them. Raises ValueError for an unknown parser.
#[pyfunction]
fn parse_tool_calls(parser: &str, text: &str) -> PyResult<(String, Vec<(String, String)>)> {
    let format = hybridllm_api::tools::parsers::ToolFormat::from_name(parser)
        .ok_or_else(|| PyValueError::new_err(format!("unknown tool-call parser {parser:?}")))?;
    let out = hybridllm_api::tools::parsers::parse_whole(format, text);
    Ok((out.content, out.calls))
}

#[pyfunction]
#[pyo3(signature = (template, messages, args, add_generation_prompt, bos_token, eos_token))]
fn render_chat(
    py: Python<'_>,
    template: Option<&ChatTemplate>,
    messages: &str,
    args: &str,
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> PyResult<String> {
    let messages = match parse_json("messages", messages)? {
        Value::Array(m) => m,
        _ => return Err(PyValueError::new_err("messages: a JSON list is expected")),
    };
    let args = serde_json::from_value(parse_json("args", args)?)
        .map_err(|e| PyValueError::new_err(format!("args: {e}")))?;
    py.detach(|| {
        hybridllm_api::prompt::render_chat(
            template.map(|t| &t.inner),
            &messages,
            &args,
            add_generation_prompt,
            bos_token,
            eos_token,
        )
    })
    .map_err(api_error)
}

/// One sequence's text: incremental detokenization, stop strings, finish reason.
#[pyclass(module = "hybridllm._api")]
struct SequenceText {
    inner: CoreSequenceText,
}

#[pymethods]
impl SequenceText {
    #[new]
    #[pyo3(signature = (prompt_ids, stop, include_stop_str_in_output, skip_special_tokens=true, spaces_between_special_tokens=true))]
    fn new(
        prompt_ids: Vec<u32>,
        stop: Vec<String>,
        include_stop_str_in_output: bool,
        skip_special_tokens: bool,
        spaces_between_special_tokens: bool,
    ) -> Self {
        let decode = DecodeOpts {
            skip_special_tokens,
            spaces_between_special_tokens,
        };
        SequenceText {
            inner: CoreSequenceText::new(&prompt_ids, decode, stop, include_stop_str_in_output),
        }
    }

    #[getter]
    fn finished(&self) -> bool {
        self.inner.finished()
    }

    /// The text `ids` add, the finish reason (None while running) and vLLM's `stop_reason`
    /// (the matched stop string, a stop token id, or None). `engine_finish`: the engine's
    /// word on the sequence after these ids: None (running), "stop", "length" or "abort".
    #[pyo3(signature = (tokenizer, ids, engine_finish=None, stop_token_id=None, eos_token_ids=vec![]))]
    fn push<'py>(
        &mut self,
        py: Python<'py>,
        tokenizer: &Tokenizer,
        ids: Vec<u32>,
        engine_finish: Option<&str>,
        stop_token_id: Option<u32>,
        eos_token_ids: Vec<u32>,
    ) -> PyResult<(String, Option<&'static str>, Py<PyAny>)> {
        let engine = match engine_finish {
            None => EngineFinish::Running,
            Some("stop") => EngineFinish::Stop,
            Some("length") => EngineFinish::Length,
            Some("abort") => EngineFinish::Abort,
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "engine_finish must be None, 'stop', 'length' or 'abort', got {other:?}"
                )))
            }
        };
        let (text, finish) = self
            .inner
            .push(
                &tokenizer.inner,
                &ids,
                engine,
                stop_token_id,
                &eos_token_ids,
            )
            .map_err(PyValueError::new_err)?;
        let Some(f) = finish else {
            return Ok((text, None, py.None()));
        };
        let stop_reason = match &f.stop_reason {
            Value::String(s) => PyString::new(py, s).into_any().unbind(),
            Value::Number(n) => PyInt::new(py, n.as_u64().unwrap_or_default())
                .into_any()
                .unbind(),
            _ => py.None(),
        };
        Ok((text, Some(f.reason), stop_reason))
    }
}

/// The server facts the API's rules need (`hybridllm_api::context::ApiContext`).
#[pyclass(frozen, module = "hybridllm._api")]
struct Context {
    inner: Arc<ApiContext>,
}

#[pymethods]
impl Context {
    #[new]
    #[pyo3(signature = (*, tokenizer, template, served_names, max_model_len, vocab_size,
                        max_tokens_limit, max_beam_width, embed, bos_token, eos_token,
                        eos_token_ids, max_num_seqs, hidden_size, lowercase_inputs,
                        priority_scheduling=false, chunked_processing=false,
                        max_embed_len=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        tokenizer: &Tokenizer,
        template: Option<&ChatTemplate>,
        served_names: Vec<String>,
        max_model_len: u32,
        vocab_size: usize,
        max_tokens_limit: Option<u32>,
        max_beam_width: u32,
        embed: bool,
        bos_token: String,
        eos_token: String,
        eos_token_ids: Vec<u32>,
        max_num_seqs: u32,
        hidden_size: u32,
        lowercase_inputs: bool,
        priority_scheduling: bool,
        chunked_processing: bool,
        max_embed_len: Option<usize>,
    ) -> PyResult<Self> {
        if served_names.is_empty() {
            return Err(PyValueError::new_err("served_names must not be empty"));
        }
        let template = match template {
            Some(t) => {
                Some(CoreTemplate::compile(t.inner.source()).map_err(PyValueError::new_err)?)
            }
            None => None,
        };
        let grammars = match embed {
            true => Err("an embedding model generates no text".to_string()),
            false => GrammarCompiler::for_tokenizer(
                &tokenizer.inner,
                vocab_size,
                &eos_token_ids,
                StructuredOptions::default(),
            )
            .map(Arc::new)
            .map_err(|e| e.to_string()),
        };
        Ok(Context {
            inner: Arc::new(ApiContext {
                grammars,
                tokenizer: tokenizer.inner.clone(),
                template,
                served_names,
                max_model_len,
                vocab_size,
                max_tokens_limit,
                max_beam_width,
                embed,
                bos_token,
                eos_token,
                eos_token_ids: eos_token_ids.into(),
                max_num_seqs,
                priority_scheduling,
                hidden_size,
                lowercase_inputs,
                chunked_processing,
                max_embed_len,
                tools: Default::default(),
                reasoning: None,
                force_include_usage: false,
                prompt_tokens_details: false,
                warnings: vec![],
            }),
        })
    }

    /// The context for the worker's model (its ModelInfo, read by attribute) under the serve
    /// options, as the Rust frontend builds it; raises ValueError saying what failed.
    #[staticmethod]
    #[pyo3(signature = (model_info, *, served_model_name, max_model_len, tokenizer_path,
                        chat_template, max_tokens_limit, max_beam_width,
                        structured_outputs_config=None, tool_call_parser=None,
                        enable_auto_tool_choice=false, reasoning_parser=None,
                        enable_force_include_usage=false,
                        enable_prompt_tokens_details=false))]
    #[allow(clippy::too_many_arguments)]
    fn from_model(
        model_info: &Bound<'_, PyAny>,
        served_model_name: Vec<String>,
        max_model_len: Option<u32>,
        tokenizer_path: Option<String>,
        chat_template: Option<String>,
        max_tokens_limit: Option<u32>,
        max_beam_width: u32,
        structured_outputs_config: Option<String>,
        tool_call_parser: Option<String>,
        enable_auto_tool_choice: bool,
        reasoning_parser: Option<String>,
        enable_force_include_usage: bool,
        enable_prompt_tokens_details: bool,
    ) -> PyResult<Self> {
        let err = |e: anyhow::Error| PyValueError::new_err(format!("{e:#}"));
        let structured =
            StructuredOptions::parse(structured_outputs_config.as_deref().unwrap_or(""))
                .map_err(err)?;
        let o = ApiOptions {
            structured,
            served_model_name,
            max_model_len,
            tokenizer_path,
            chat_template,
            max_tokens_limit,
            max_beam_width,
            tool_call_parser,
            enable_auto_tool_choice,
            reasoning_parser,
            enable_force_include_usage,
            enable_prompt_tokens_details,
        };
        let m = model_info;
        macro_rules! read {
            ($($f:ident),*) => {
                ModelFacts {
                    $($f: m.getattr(stringify!($f))?.extract()?,)*
                    // The proto's ModelInfo.Kind: EMBED = 2.
                    embed: m.getattr("kind")?.extract::<i32>()? == 2,
                }
            };
        }
        let facts = read!(
            served_model_name,
            model_path,
            max_model_len,
            vocab_size,
            eos_token_ids,
            tokenizer_path,
            chat_template,
            bos_token,
            eos_token,
            hidden_size,
            lowercase_inputs,
            max_num_seqs,
            priority_scheduling,
            chunked_processing,
            max_embed_len
        );
        let template = o.override_template().map_err(err)?;
        let inner = ApiContext::build(&facts, &o, template).map_err(err)?;
        Ok(Context {
            inner: Arc::new(inner),
        })
    }

    #[getter]
    fn tokenizer(&self) -> Tokenizer {
        Tokenizer {
            inner: self.inner.tokenizer.clone(),
        }
    }

    /// The served name responses report.
    #[getter]
    fn model_name(&self) -> &str {
        self.inner.model_name()
    }

    #[getter]
    fn max_model_len(&self) -> u32 {
        self.inner.max_model_len
    }

    /// What to log once at start-up.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings.clone()
    }
}

/// One engine request as the shell sends it: the prompt's ids, and the sampling (or beam
/// search) parameters as the keyword arguments of the worker's messages.
#[pyclass(frozen, module = "hybridllm._api")]
struct EngineRequest {
    #[pyo3(get)]
    request_id: String,
    #[pyo3(get)]
    prompt_ids: Vec<u32>,
    #[pyo3(get)]
    max_tokens: u32,
    #[pyo3(get)]
    n: u32,
    #[pyo3(get)]
    stop: Vec<String>,
    #[pyo3(get)]
    include_stop_str_in_output: bool,
    #[pyo3(get)]
    skip_special_tokens: bool,
    #[pyo3(get)]
    spaces_between_special_tokens: bool,
    /// vLLM's scheduling priority (GenerateRequest.priority).
    #[pyo3(get)]
    priority: i64,
    gen: GenRequest,
}

impl EngineRequest {
    fn new(gen: GenRequest) -> Self {
        let p = &gen.params;
        EngineRequest {
            request_id: gen.request_id.clone(),
            prompt_ids: gen.prompt_ids.clone(),
            max_tokens: gen.max_tokens,
            n: p.n,
            stop: p.stop.clone(),
            include_stop_str_in_output: p.include_stop,
            skip_special_tokens: p.decode.skip_special_tokens,
            spaces_between_special_tokens: p.decode.spaces_between_special_tokens,
            priority: p.priority,
            gen,
        }
    }
}

#[pymethods]
impl EngineRequest {
    /// The set fields of SamplingParams (max_tokens included), by their message names.
    fn sampling<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.gen.params.sampling;
        let d = PyDict::new(py);
        macro_rules! set {
            ($($f:ident),*) => {$(if let Some(v) = s.$f { d.set_item(stringify!($f), v)?; })*};
        }
        set!(
            n,
            temperature,
            top_p,
            top_k,
            min_p,
            presence_penalty,
            frequency_penalty,
            repetition_penalty,
            seed,
            min_tokens,
            ignore_eos,
            logprobs,
            prompt_logprobs
        );
        d.set_item("max_tokens", self.gen.max_tokens)?;
        if !s.stop_token_ids.is_empty() {
            d.set_item("stop_token_ids", s.stop_token_ids.clone())?;
        }
        if !s.logit_bias.is_empty() {
            d.set_item("logit_bias", s.logit_bias.clone())?;
        }
        if let Some(g) = &s.grammar {
            d.set_item("grammar", g)?;
        }
        if let Some(salt) = &s.cache_salt {
            d.set_item("cache_salt", salt)?;
        }
        if !s.allowed_token_ids.is_empty() {
            d.set_item("allowed_token_ids", s.allowed_token_ids.clone())?;
        }
        if !s.bad_words.is_empty() {
            d.set_item("bad_words", s.bad_words.clone())?;
        }
        Ok(d)
    }

    /// BeamSearchParams' fields (max_tokens included), or None: not a beam search.
    fn beam<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(b) = &self.gen.params.beam else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("beam_width", b.beam_width)?;
        d.set_item("max_tokens", self.gen.max_tokens)?;
        d.set_item("ignore_eos", b.ignore_eos)?;
        d.set_item("length_penalty", b.length_penalty)?;
        d.set_item("include_stop_str_in_output", b.include_stop_str_in_output)?;
        Ok(Some(d))
    }
}

/// A worker message's logprobs (protobuf objects, read by attribute) in the core's types.
fn token_logprob(t: &Bound<'_, PyAny>) -> PyResult<TokenLogprob> {
    Ok(TokenLogprob {
        token_id: t.getattr("token_id")?.extract()?,
        logprob: t.getattr("logprob")?.extract()?,
        rank: t.getattr("rank")?.extract()?,
    })
}

fn positions(lps: &Bound<'_, PyAny>) -> PyResult<Vec<PositionLogprobs>> {
    let mut out = vec![];
    for p in lps.try_iter()? {
        let p = p?;
        let has_token: bool = p.call_method1("HasField", ("token",))?.extract()?;
        let token = match has_token {
            true => Some(token_logprob(&p.getattr("token")?)?),
            false => None,
        };
        let mut top = vec![];
        for t in p.getattr("top")?.try_iter()? {
            top.push(token_logprob(&t?)?);
        }
        out.push(PositionLogprobs { token, top });
    }
    Ok(out)
}

enum Kind {
    Chat(ChatResponse),
    Completion(CompletionResponse),
    /// Never streamed.
    ChatBatch(ChatBatchResponse),
}

/// The response of one request, fed with its engine events as the shell receives them:
/// streamed, each event gives its SSE frames; not streamed, `body()` at the end.
#[pyclass(module = "hybridllm._api")]
struct Response {
    kind: Kind,
    tokenizer: Arc<hybridllm_api::text::tokenizer::Tokenizer>,
    /// Not streamed: the events collected.
    collector: Option<Collector>,
    #[pyo3(get)]
    stream: bool,
    #[pyo3(get)]
    n: usize,
}

impl Response {
    fn new(ctx: &ApiContext, kind: Kind, prompt_lens: Vec<usize>) -> Self {
        let (stream, n) = match &kind {
            Kind::Chat(r) => (r.stream, r.n as usize),
            Kind::Completion(r) => (r.stream, r.n),
            Kind::ChatBatch(_) => (false, 1),
        };
        Response {
            kind,
            tokenizer: ctx.tokenizer.clone(),
            collector: (!stream).then(|| Collector::new(n, prompt_lens)),
            stream,
            n,
        }
    }

    fn feed<'py>(&mut self, py: Python<'py>, p: usize, ev: GenEvent) -> Vec<Bound<'py, PyBytes>> {
        if let Some(c) = &mut self.collector {
            c.push(&self.tokenizer, p, ev);
            return vec![];
        }
        let frames = match &mut self.kind {
            Kind::Chat(r) => r.event(&self.tokenizer, p, &ev).into_iter().collect(),
            Kind::Completion(r) => r.event(&self.tokenizer, p, &ev),
            Kind::ChatBatch(_) => vec![],
        };
        frames.iter().map(|f| PyBytes::new(py, f)).collect()
    }
}

#[pymethods]
impl Response {
    /// The frames before any event (streamed only).
    fn opening<'py>(&mut self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        if !self.stream {
            return vec![];
        }
        let frames = match &mut self.kind {
            Kind::Chat(r) => r.opening(),
            Kind::Completion(r) => r.opening(),
            Kind::ChatBatch(_) => vec![],
        };
        frames.iter().map(|f| PyBytes::new(py, f)).collect()
    }

    /// One engine step's events of prompt `p` (`EngineEvents.process`): their frames when
    /// streamed, else nothing (collected for `body()`).
    fn feed_step<'py>(
        &mut self,
        py: Python<'py>,
        p: usize,
        mut step: PyRefMut<'_, Step>,
    ) -> Vec<Bound<'py, PyBytes>> {
        let mut frames = vec![];
        for ev in std::mem::take(&mut step.events) {
            frames.extend(self.feed(py, p, ev));
        }
        frames
    }

    /// The last frame (the usage, when asked for).
    fn closing<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let f = match &self.kind {
            Kind::Chat(r) => r.closing(),
            Kind::Completion(r) => r.closing(),
            Kind::ChatBatch(_) => None,
        };
        f.map(|f| PyBytes::new(py, &f))
    }

    /// The whole response body (JSON) of a request that is not streamed.
    fn body<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let c = self
            .collector
            .take()
            .ok_or_else(|| PyValueError::new_err("body() is for a response not streamed, once"))?
            .finish();
        let v = match &self.kind {
            Kind::Chat(r) => r.body(&self.tokenizer, c),
            Kind::Completion(r) => r.body(&self.tokenizer, c),
            Kind::ChatBatch(r) => r.body(&self.tokenizer, c),
        };
        Ok(PyBytes::new(
            py,
            &serde_json::to_vec(&v).unwrap_or_default(),
        ))
    }
}

/// POST /v1/chat/completions's body, valid and its prompt rendered (raises ApiError).
#[pyclass(module = "hybridllm._api")]
struct ChatCall {
    ctx: Arc<ApiContext>,
    call: Option<CoreChatCall>,
    #[pyo3(get)]
    prompt: String,
    #[pyo3(get)]
    add_special_tokens: bool,
}

#[pymethods]
impl ChatCall {
    /// `request_id_header`: the request's `X-Request-Id`, if it has one.
    #[new]
    #[pyo3(signature = (ctx, body, request_id_header=None))]
    fn new(
        py: Python<'_>,
        ctx: &Context,
        body: &[u8],
        request_id_header: Option<String>,
    ) -> PyResult<Self> {
        let inner = ctx.inner.clone();
        let call = py
            .detach(|| {
                let mut call = CoreChatCall::new(&inner, parse_body::<ChatRequest>(body)?)?;
                call.set_request_id_header(request_id_header);
                call.compile_constraint(&inner)?;
                Ok(call)
            })
            .map_err(api_error)?;
        Ok(ChatCall {
            prompt: call.prompt.clone(),
            add_special_tokens: call.add_special_tokens,
            ctx: inner,
            call: Some(call),
        })
    }

    /// The engine request for the prompt's ids, and its response.
    fn plan(&mut self, ids: Vec<u32>) -> PyResult<(EngineRequest, Response)> {
        let call = self
            .call
            .take()
            .ok_or_else(|| PyValueError::new_err("plan() once"))?;
        let (gen, resp) = call.plan(&self.ctx, ids).map_err(api_error)?;
        let lens = vec![gen.prompt_ids.len()];
        Ok((
            EngineRequest::new(gen),
            Response::new(&self.ctx, Kind::Chat(resp), lens),
        ))
    }
}

/// POST /v1/chat/completions/batch's body, valid and each conversation's prompt rendered
/// (raises ApiError).
#[pyclass(module = "hybridllm._api")]
struct ChatBatchCall {
    ctx: Arc<ApiContext>,
    call: Option<CoreChatBatchCall>,
    #[pyo3(get)]
    prompts: Vec<String>,
    #[pyo3(get)]
    add_special_tokens: bool,
}

#[pymethods]
impl ChatBatchCall {
    #[new]
    #[pyo3(signature = (ctx, body, request_id_header=None))]
    fn new(
        py: Python<'_>,
        ctx: &Context,
        body: &[u8],
        request_id_header: Option<String>,
    ) -> PyResult<Self> {
        let inner = ctx.inner.clone();
        let mut call = py
            .detach(|| CoreChatBatchCall::new(&inner, body, request_id_header))
            .map_err(api_error)?;
        Ok(ChatBatchCall {
            prompts: std::mem::take(&mut call.prompts),
            add_special_tokens: call.add_special_tokens,
            ctx: inner,
            call: Some(call),
        })
    }

    /// One engine request per conversation from its prompt's ids, and the response.
    fn plan(
        &mut self,
        py: Python<'_>,
        ids: Vec<Vec<u32>>,
    ) -> PyResult<(Vec<EngineRequest>, Response)> {
        let call = self
            .call
            .take()
            .ok_or_else(|| PyValueError::new_err("plan() once"))?;
        let ctx = self.ctx.clone();
        let (gens, resp) = py.detach(|| call.plan(&ctx, ids)).map_err(api_error)?;
        let lens = gens.iter().map(|g| g.prompt_ids.len()).collect();
        let resp = Response::new(&self.ctx, Kind::ChatBatch(resp), lens);
        Ok((gens.into_iter().map(EngineRequest::new).collect(), resp))
    }
}

/// POST /v1/completions's body, valid (raises ApiError); `prompts` are strings to tokenize
/// (with `add_special_tokens`) or token id lists.
#[pyclass(module = "hybridllm._api")]
struct CompletionCall {
    ctx: Arc<ApiContext>,
    call: Option<CoreCompletionCall>,
    #[pyo3(get)]
    add_special_tokens: bool,
}

#[pymethods]
impl CompletionCall {
    /// `request_id_header`: the request's `X-Request-Id`, if it has one.
    /// `tokens`: the body is `/inference/v1/generate`'s (vLLM's tokens in, tokens out).
    #[new]
    #[pyo3(signature = (ctx, body, request_id_header=None, tokens=false))]
    fn new(
        py: Python<'_>,
        ctx: &Context,
        body: &[u8],
        request_id_header: Option<String>,
        tokens: bool,
    ) -> PyResult<Self> {
        let inner = ctx.inner.clone();
        let call = py
            .detach(|| {
                let mut call = match tokens {
                    true => CoreCompletionCall::tokens(&inner, body)?,
                    false => {
                        CoreCompletionCall::new(&inner, parse_body::<CompletionRequest>(body)?)?
                    }
                };
                call.set_request_id_header(request_id_header);
                call.compile_constraint(&inner)?;
                Ok(call)
            })
            .map_err(api_error)?;
        Ok(CompletionCall {
            add_special_tokens: call.add_special_tokens,
            ctx: inner,
            call: Some(call),
        })
    }

    #[getter]
    fn prompts<'py>(&self, py: Python<'py>) -> PyResult<Vec<Py<PyAny>>> {
        let call = self
            .call
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("planned already"))?;
        call.prompts
            .iter()
            .map(|p| match p {
                Prompt::Text(t) => Ok(PyString::new(py, t).into_any().unbind()),
                Prompt::Ids(ids) => Ok(ids.clone().into_pyobject(py)?.into_any().unbind()),
            })
            .collect()
    }

    /// One engine request per prompt from the prompts' ids, and the response.
    fn plan(&mut self, ids: Vec<Vec<u32>>) -> PyResult<(Vec<EngineRequest>, Response)> {
        let call = self
            .call
            .take()
            .ok_or_else(|| PyValueError::new_err("plan() once"))?;
        let (gens, resp) = call.plan(&self.ctx, ids).map_err(api_error)?;
        let lens = resp.prompt_lens.clone();
        let resp = Response::new(&self.ctx, Kind::Completion(resp), lens);
        Ok((gens.into_iter().map(EngineRequest::new).collect(), resp))
    }
}

/// StructuredOutputsParams' fields (a JSON object) as llguidance's serialized grammar, by the
/// core's rules, as a served request's (raises ValueError with the core's message).
#[pyfunction]
fn structured_grammar(fields: &str) -> PyResult<String> {
    let so: StructuredOutputs = serde_json::from_str(fields).map_err(|e| {
        // serde's position is in JSON the caller never wrote.
        let e = e.to_string();
        let e = e.split(" at line ").next().unwrap_or_default().to_string();
        PyValueError::new_err(format!("structured_outputs: {e}."))
    })?;
    so.serialized_grammar()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The error body (JSON) and headers of a refusal the shell makes itself (its HTTP limits, an
/// engine error it mapped), as the core writes every refusal.
#[pyfunction]
#[pyo3(signature = (status, message, param=None))]
fn error_response(
    status: u16,
    message: String,
    param: Option<String>,
) -> (u16, String, Vec<(&'static str, &'static str)>) {
    let e = CoreError::with_status(status, message, param);
    (
        e.status().as_u16(),
        e.body().to_string(),
        e.header().into_iter().collect(),
    )
}

/// The stored `/v1/responses` objects (`store: true`), an LRU of `capacity`.
#[pyclass(frozen, module = "hybridllm._api")]
struct ResponseStore {
    inner: Arc<CoreStore>,
}

#[pymethods]
impl ResponseStore {
    #[new]
    fn new(capacity: usize) -> Self {
        ResponseStore {
            inner: Arc::new(CoreStore::new(capacity)),
        }
    }

    /// GET /v1/responses/{id}'s body; raises ApiError.
    #[pyo3(signature = (id, owner))]
    fn retrieve(&self, id: &str, owner: Option<&str>) -> PyResult<String> {
        core_responses::retrieve(&self.inner, id, owner).map_err(api_error)
    }

    /// DELETE /v1/responses/{id}'s body; raises ApiError.
    #[pyo3(signature = (id, owner))]
    fn delete(&self, id: &str, owner: Option<&str>) -> PyResult<String> {
        core_responses::delete(&self.inner, id, owner)
            .map(|v| v.to_string())
            .map_err(api_error)
    }

    /// POST /v1/responses/{id}/cancel's body (the background response, cancelled); raises
    /// ApiError.
    #[pyo3(signature = (id, owner))]
    fn cancel(&self, id: &str, owner: Option<&str>) -> PyResult<String> {
        core_responses::cancel(&self.inner, id, owner).map_err(api_error)
    }

    /// GET /v1/responses/{id}'s query (`stream`); raises ApiError.
    #[staticmethod]
    #[pyo3(signature = (stream))]
    fn check_retrieve_query(stream: Option<&str>) -> PyResult<()> {
        core_responses::check_retrieve_query(stream).map_err(api_error)
    }

    /// GET /v1/responses/{id}/input_items's body, from the query's values; raises ApiError.
    #[pyo3(signature = (id, owner, order, limit, after))]
    fn input_items(
        &self,
        id: &str,
        owner: Option<&str>,
        order: Option<&str>,
        limit: Option<&str>,
        after: Option<&str>,
    ) -> PyResult<String> {
        core_responses::input_items(&self.inner, id, owner, order, limit, after)
            .map(|v| v.to_string())
            .map_err(api_error)
    }
}

impl ResponsesCall {
    fn call(&self) -> PyResult<&CoreResponsesCall> {
        self.call
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("planned already"))
    }
}

/// POST /v1/responses's body, valid and its conversation assembled (raises ApiError).
#[pyclass(module = "hybridllm._api")]
struct ResponsesCall {
    ctx: Arc<ApiContext>,
    store: Arc<CoreStore>,
    call: Option<CoreResponsesCall>,
}

#[pymethods]
impl ResponsesCall {
    #[new]
    #[pyo3(signature = (ctx, body, store, owner))]
    fn new(
        py: Python<'_>,
        ctx: &Context,
        body: &[u8],
        store: &ResponseStore,
        owner: Option<String>,
    ) -> PyResult<Self> {
        let call = py
            .detach(|| {
                let req = parse_body::<ResponsesRequest>(body)?;
                let mut call = CoreResponsesCall::new(&ctx.inner, req, &store.inner, owner)?;
                call.compile_constraint(&ctx.inner)?;
                Ok(call)
            })
            .map_err(api_error)?;
        Ok(ResponsesCall {
            ctx: ctx.inner.clone(),
            store: store.inner.clone(),
            call: Some(call),
        })
    }

    /// `background: true`: answer with `queued()` and run it as a request not streamed.
    #[getter]
    fn background(&self) -> PyResult<bool> {
        Ok(self.call()?.background())
    }

    /// The prompt without the conversation's `first` oldest turns.
    fn prompt(&self, first: usize) -> PyResult<String> {
        self.call()?.prompt(&self.ctx, first).map_err(api_error)
    }

    /// max_tokens when that prompt fits; None: try `first + 1` (auto truncation).
    fn fit(&self, first: usize, prompt_len: usize) -> PyResult<Option<u32>> {
        self.call()?
            .fit(&self.ctx, first, prompt_len)
            .map_err(api_error)
    }

    fn plan(
        &mut self,
        ids: Vec<u32>,
        max_tokens: u32,
    ) -> PyResult<(EngineRequest, ResponsesResponse)> {
        let call = self
            .call
            .take()
            .ok_or_else(|| PyValueError::new_err("plan() once"))?;
        let (gen, resp) = call.plan(&self.ctx, ids, max_tokens).map_err(api_error)?;
        let collector = (!resp.stream).then(|| Collector::new(1, vec![gen.prompt_ids.len()]));
        Ok((
            EngineRequest::new(gen),
            ResponsesResponse {
                stream: resp.stream,
                inner: resp,
                collector,
                tokenizer: self.ctx.tokenizer.clone(),
                store: self.store.clone(),
            },
        ))
    }
}

/// A Responses request's response, fed with its engine events: streamed, named events to
/// `take` (`opening` first, `closing` last); not streamed, `body()` at the end.
#[pyclass(module = "hybridllm._api")]
struct ResponsesResponse {
    inner: CoreResponsesResponse,
    collector: Option<Collector>,
    tokenizer: Arc<hybridllm_api::text::tokenizer::Tokenizer>,
    store: Arc<CoreStore>,
    #[pyo3(get)]
    stream: bool,
}

impl ResponsesResponse {
    fn feed(&mut self, p: usize, ev: GenEvent) {
        match &mut self.collector {
            Some(c) => c.push(&self.tokenizer, p, ev),
            None => self.inner.event(p, &ev),
        }
    }
}

#[pymethods]
impl ResponsesResponse {
    fn opening(&mut self) {
        self.inner.opening();
    }

    /// One engine step's events of prompt `p` (`EngineEvents.process`).
    fn feed_step(&mut self, p: usize, mut step: PyRefMut<'_, Step>) {
        for ev in std::mem::take(&mut step.events) {
            self.feed(p, ev);
        }
    }

    /// The events written since the last take (None: none).
    fn take<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.inner.take().map(|b| PyBytes::new(py, &b))
    }

    /// The stream's end when generation failed: an `error` event for the refusal (an
    /// ApiError) the shell met.
    fn error<'py>(
        &mut self,
        py: Python<'py>,
        e: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (status, body, _): (u16, String, Py<PyAny>) = e.getattr("args")?.extract()?;
        let body = parse_json("error body", &body)?;
        let field = |k: &str| body["error"][k].as_str().map(str::to_string);
        let e =
            CoreError::with_status(status, field("message").unwrap_or_default(), field("param"));
        Ok(PyBytes::new(py, &self.inner.error(&e)))
    }

    fn closing<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.closing(&self.store))
    }

    /// The response's id.
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_string()
    }

    /// A background response's answer (`queued`), stored at once.
    fn queued(&mut self) -> String {
        self.inner.queued(&self.store)
    }

    /// A background response's engine request has started: `in_progress`.
    fn started(&self) {
        self.inner.started(&self.store);
    }

    /// A background response's engine request failed with this ApiError: `failed`.
    fn failed(&self, e: &Bound<'_, PyAny>) -> PyResult<()> {
        let (status, body, _): (u16, String, Py<PyAny>) = e.getattr("args")?.extract()?;
        let body = parse_json("error body", &body)?;
        let field = |k: &str| body["error"][k].as_str().map(str::to_string);
        let e =
            CoreError::with_status(status, field("message").unwrap_or_default(), field("param"));
        self.inner.failed(&self.store, &e);
        Ok(())
    }

    fn body(&mut self) -> PyResult<String> {
        let c = self
            .collector
            .take()
            .ok_or_else(|| PyValueError::new_err("body() is for a response not streamed, once"))?
            .finish();
        Ok(self.inner.body(c, &self.store))
    }
}

/// POST /v1/embeddings's body, valid (raises ApiError); `plan()` tokenizes its inputs
/// (without the GIL: call it off the event loop when `text_bytes` is large).
#[pyclass(module = "hybridllm._api")]
struct EmbeddingCall {
    ctx: Arc<ApiContext>,
    call: Option<CoreEmbeddingCall>,
    #[pyo3(get)]
    text_bytes: usize,
    #[pyo3(get)]
    normalize: Option<bool>,
}

#[pymethods]
impl EmbeddingCall {
    /// `request_id_header`: the request's `X-Request-Id`, if it has one.
    /// `pooling`: vLLM's /pooling (its `task`, its answer).
    #[new]
    #[pyo3(signature = (ctx, body, request_id_header=None, pooling=false))]
    fn new(
        ctx: &Context,
        body: &[u8],
        request_id_header: Option<String>,
        pooling: bool,
    ) -> PyResult<Self> {
        let mut call = match pooling {
            true => CoreEmbeddingCall::pooling(&ctx.inner, body),
            false => parse_body::<EmbeddingRequest>(body)
                .and_then(|req| CoreEmbeddingCall::new(&ctx.inner, req)),
        }
        .map_err(api_error)?;
        call.set_request_id_header(request_id_header);
        Ok(EmbeddingCall {
            ctx: ctx.inner.clone(),
            text_bytes: call.text_bytes(),
            normalize: call.normalize,
            call: Some(call),
        })
    }

    /// The engine's request id, each input's ids as the worker gets them, and the response.
    fn plan(&mut self, py: Python<'_>) -> PyResult<(String, Vec<Vec<u32>>, EmbeddingResponse)> {
        let call = self
            .call
            .take()
            .ok_or_else(|| PyValueError::new_err("plan() once"))?;
        let ctx = self.ctx.clone();
        let (ids, resp) = py.detach(move || call.plan(&ctx)).map_err(api_error)?;
        Ok((
            resp.engine_id.clone(),
            ids,
            EmbeddingResponse { inner: resp },
        ))
    }
}

#[pyclass(frozen, module = "hybridllm._api")]
struct EmbeddingResponse {
    inner: CoreEmbeddingResponse,
}

#[pymethods]
impl EmbeddingResponse {
    /// The body (JSON) of the worker's vectors, one per input in input order.
    fn body<'py>(&self, py: Python<'py>, vectors: Vec<Vec<f32>>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.body(vectors))
    }

    /// With `encoding_format` "bytes" or "bytes_only": (body, content type, the `metadata`
    /// header or None); else None (the answer is `body`'s JSON).
    #[allow(clippy::type_complexity)]
    fn raw<'py>(
        &self,
        py: Python<'py>,
        vectors: Vec<Vec<f32>>,
    ) -> Option<(Bound<'py, PyBytes>, &'static str, Option<String>)> {
        let raw = self.inner.raw(&vectors)?;
        Some((PyBytes::new(py, &raw.body), raw.content_type, raw.metadata))
    }
}

/// POST /tokenize's body, valid: the text to tokenize and whether with special tokens
/// (raises ApiError).
#[pyfunction]
fn tokenize_call(ctx: &Context, body: &[u8]) -> PyResult<(String, bool, bool)> {
    let req = parse_body::<TokenizeRequest>(body).map_err(api_error)?;
    let call = TokenizeCall::new(&ctx.inner, req).map_err(api_error)?;
    Ok((call.text, call.add_special_tokens, call.return_token_strs))
}

/// POST /tokenize's response body (JSON) for the ids.
#[pyfunction]
fn tokenize_body(ctx: &Context, tokens: Vec<u32>, token_strs: bool) -> String {
    TokenizeCall::body(&ctx.inner, &tokens, token_strs).to_string()
}

/// POST /invocations: the API `body` calls ("chat", "completion" or "embedding").
#[pyfunction]
fn invocation(ctx: &Context, body: &[u8]) -> PyResult<&'static str> {
    use hybridllm_api::invocations::Invocation;
    Ok(
        match Invocation::route(&ctx.inner, body).map_err(api_error)? {
            Invocation::Chat => "chat",
            Invocation::Completion => "completion",
            Invocation::Embedding => "embedding",
        },
    )
}

/// `--root-path` as a prefix (None for none); a ValueError when it is not a path.
#[pyfunction]
fn normalise_root_path(root: Option<&str>) -> PyResult<Option<String>> {
    hybridllm_api::root_path::normalise(root).map_err(PyValueError::new_err)
}

/// The path routes see: without the `--root-path` prefix when it has it (None: as it is).
#[pyfunction]
fn route_path(root: &str, path: &str) -> Option<String> {
    hybridllm_api::root_path::route_path(root, path).map(String::from)
}

/// GET /load's body (JSON): `metrics`' requests in flight when `tracking`.
#[pyfunction]
fn load(metrics: &Metrics, tracking: bool) -> String {
    hybridllm_api::tokenize::load(metrics.inner.in_flight.get(), tracking).to_string()
}

/// `--enable-request-id-headers`: the `X-Request-Id` for a request that came without one.
#[pyfunction]
fn new_request_id() -> String {
    hybridllm_api::usage::new_request_id()
}

/// The OpenAPI document both frontends serve at /openapi.json (JSON).
#[pyfunction]
fn openapi_json() -> &'static str {
    hybridllm_api::openapi::document()
}

/// POST /detokenize's response body (JSON); raises ApiError.
#[pyfunction]
fn detokenize(ctx: &Context, body: &[u8]) -> PyResult<String> {
    let req = parse_body::<DetokenizeRequest>(body).map_err(api_error)?;
    hybridllm_api::tokenize::detokenize(&ctx.inner, req)
        .map(|v| v.to_string())
        .map_err(api_error)
}

/// GET /v1/models' body (JSON): `created` when the server started, `root` the model's folder.
#[pyfunction]
fn models(ctx: &Context, created: i64, root: &str) -> String {
    hybridllm_api::tokenize::models(&ctx.inner, created, root).to_string()
}

/// GET /tokenizer_info's body (JSON): `config` the text of tokenizer_config.json (None: the
/// tokenizer has none), `path` its name for an error; raises ApiError.
#[pyfunction]
#[pyo3(signature = (ctx, path, config))]
fn tokenizer_info(ctx: &Context, path: &str, config: Option<&str>) -> PyResult<String> {
    hybridllm_api::tokenize::tokenizer_info(&ctx.inner, path, config)
        .map(|v| v.to_string())
        .map_err(api_error)
}

/// 431 when a request's header fields are too many or too large (raises ApiError).
#[pyfunction]
fn check_headers(fields: usize, size: usize) -> PyResult<()> {
    hybridllm_api::limits::check_headers(fields, size).map_err(api_error)
}

/// 415 unless the content type is JSON's or absent (raises ApiError).
#[pyfunction]
#[pyo3(signature = (value))]
fn check_json_content_type(value: Option<&[u8]>) -> PyResult<()> {
    hybridllm_api::limits::check_json_content_type(value).map_err(api_error)
}

/// 413 when `size` bytes are over `limit` (raises ApiError).
#[pyfunction]
fn check_body_size(size: usize, limit: usize) -> PyResult<()> {
    hybridllm_api::limits::check_body_size(size, limit).map_err(api_error)
}

/// A worker message (GenerateResponse, read by attribute) in the core's types.
fn engine_step(msg: &Bound<'_, PyAny>) -> PyResult<EngineStep> {
    let has = |o: &Bound<'_, PyAny>, f: &str| -> PyResult<bool> {
        o.call_method1("HasField", (f,))?.extract()
    };
    let prompt = match has(msg, "prompt")? {
        false => None,
        true => {
            let p = msg.getattr("prompt")?;
            Some(PromptInfo {
                prompt_tokens: p.getattr("prompt_tokens")?.extract()?,
                cached_tokens: p.getattr("cached_tokens")?.extract()?,
                prompt_logprobs: positions(&p.getattr("prompt_logprobs")?)?,
                queue_time_s: p.getattr("queue_time_s")?.extract()?,
            })
        }
    };
    let mut sequences = vec![];
    for d in msg.getattr("sequences")?.try_iter()? {
        let d = d?;
        // The proto's FinishReason numbers.
        let finish = match d.getattr("finish_reason")?.extract::<i32>()? {
            1 => EngineFinish::Length,
            2 => EngineFinish::Stop,
            3 => EngineFinish::Abort,
            4 => EngineFinish::Error,
            _ => EngineFinish::Running,
        };
        sequences.push(SequenceDelta {
            index: d.getattr("index")?.extract()?,
            token_ids: d.getattr("token_ids")?.extract()?,
            logprobs: positions(&d.getattr("logprobs")?)?,
            finish,
            stop_token_id: match has(&d, "stop_token_id")? {
                true => Some(d.getattr("stop_token_id")?.extract()?),
                false => None,
            },
        });
    }
    let error: String = msg.getattr("error")?.extract()?;
    let error_param: String = msg.getattr("error_param")?.extract()?;
    Ok(EngineStep {
        prompt,
        sequences,
        error: (!error.is_empty()).then_some(error),
        error_param: (!error_param.is_empty()).then_some(error_param),
        finished: msg.getattr("finished")?.extract()?,
    })
}

/// The core's Prometheus metrics (`hybridllm_api::metrics`), for a shell with one engine
/// worker, labelled "0".
#[pyclass(frozen, module = "hybridllm._api")]
struct Metrics {
    inner: Arc<CoreMetrics>,
}

#[pymethods]
impl Metrics {
    #[new]
    #[pyo3(signature = (prefix=hybridllm_api::metrics::DEFAULT_PREFIX))]
    fn new(prefix: &str) -> PyResult<Self> {
        hybridllm_api::metrics::check_prefix(prefix).map_err(PyValueError::new_err)?;
        let m = CoreMetrics::with_prefix(prefix);
        m.worker_up.with_label_values(&["0"]).set(1); // never taken out of a rotation of one
        m.worker_requests.with_label_values(&["0"]);
        m.worker_outstanding_tokens.with_label_values(&["0"]);
        Ok(Metrics { inner: Arc::new(m) })
    }

    /// A generation request went to the worker; `cost`: its prompt and maximum output tokens.
    fn request_started(&self, cost: i64) {
        self.inner.in_flight.inc();
        self.inner.worker_requests.with_label_values(&["0"]).inc();
        let load = self
            .inner
            .worker_outstanding_tokens
            .with_label_values(&["0"]);
        load.add(cost);
    }

    /// It ended (however), `seconds` after it started.
    fn request_ended(&self, cost: i64, seconds: f64) {
        self.inner.in_flight.dec();
        let load = self
            .inner
            .worker_outstanding_tokens
            .with_label_values(&["0"]);
        load.sub(cost);
        self.inner.e2e.observe(seconds);
    }

    /// vLLM's `endpoint-load-metrics` header value for a requested format (None: no such
    /// format), from the last load applied.
    fn orca_header(&self, format: &str) -> Option<String> {
        self.inner.orca_header(format)
    }

    /// The worker's LoadResponse (read by attribute).
    fn apply_load(&self, load: &Bound<'_, PyAny>) -> PyResult<()> {
        macro_rules! read {
            ($($f:ident),*) => { EngineLoad { $($f: load.getattr(stringify!($f))?.extract()?,)*
                spec_decode_num_accepted_tokens_per_pos: load
                    .getattr("spec_decode_num_accepted_tokens_per_pos")?
                    .try_iter()?
                    .map(|v| v?.extract::<u64>())
                    .collect::<PyResult<Vec<u64>>>()?,
            } };
        }
        self.inner.apply_load(&read!(
            num_running,
            num_waiting,
            kv_cache_usage,
            prompt_tokens_total,
            generation_tokens_total,
            prefix_cache_queries_total,
            prefix_cache_hits_total,
            num_preemptions_total,
            spec_decode_num_drafts_total,
            spec_decode_num_draft_tokens_total,
            spec_decode_num_accepted_tokens_total
        ));
        Ok(())
    }

    /// The exposition text.
    fn render<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.encode().as_bytes())
    }
}

/// One engine step's events, for a response's `feed_step` (which takes them).
#[pyclass(module = "hybridllm._api")]
struct Step {
    events: Vec<GenEvent>,
}

/// One engine request's worker messages read by the core: text per sequence, finish
/// reasons, the engine's errors and the per-request metrics (`hybridllm_api::text_deltas`).
#[pyclass(module = "hybridllm._api")]
struct EngineEvents {
    inner: CoreEngineEvents,
}

#[pymethods]
impl EngineEvents {
    /// The request starts now (for the time to first token).
    #[new]
    fn new(ctx: &Context, metrics: &Metrics, req: &EngineRequest) -> Self {
        EngineEvents {
            inner: CoreEngineEvents::new(
                metrics.inner.clone(),
                ctx.inner.tokenizer.clone(),
                ctx.inner.eos_token_ids.clone(),
                &req.gen.prompt_ids,
                &req.gen.params,
                std::time::Instant::now(),
            ),
        }
    }

    /// Every sequence has its finish reason: no more events.
    #[getter]
    fn all_finished(&self) -> bool {
        self.inner.all_finished()
    }

    /// The engine has finished every sequence (else closing the call must abort it).
    #[getter]
    fn engine_done(&self) -> bool {
        self.inner.engine_done()
    }

    /// One worker message (GenerateResponse); raises ApiError when the engine failed the
    /// request.
    fn process(&mut self, msg: &Bound<'_, PyAny>) -> PyResult<Step> {
        let events = self.inner.process(engine_step(msg)?).map_err(api_error)?;
        Ok(Step { events })
    }
}

/// The engine's refusal or failure of a request (a gRPC status code number), as the API
/// answers it.
#[pyfunction]
#[pyo3(signature = (code, message, param=None))]
fn engine_error(code: i32, message: String, param: Option<String>) -> PyErr {
    let param = param.filter(|p| !p.is_empty());
    api_error(EngineError::from_grpc_code(code, message, param, false).into())
}

/// A refusal of the shell's own (an unknown path, a bug), as the core writes every refusal.
#[pyfunction]
#[pyo3(signature = (status, message, param=None))]
fn error(status: u16, message: String, param: Option<String>) -> PyErr {
    api_error(CoreError::with_status(status, message, param))
}

/// Who may call what (`hybridllm_api::auth`).
#[pyclass(frozen, module = "hybridllm._api")]
struct Auth {
    inner: CoreAuth,
}

#[pymethods]
impl Auth {
    #[new]
    fn new(keys: Vec<String>, metrics_no_auth: bool, playground: bool) -> Self {
        Auth {
            inner: CoreAuth::new(keys, metrics_no_auth, playground),
        }
    }

    /// Raises ApiError (401) unless the request may go on.
    fn check(&self, method: &str, path: &str, authorization: Option<&str>) -> PyResult<()> {
        self.inner
            .check(method, path, authorization)
            .map_err(api_error)
    }

    /// Who may see a stored response created with this Authorization header.
    fn owner(&self, authorization: Option<&str>) -> Option<String> {
        self.inner.owner(authorization).map(str::to_string)
    }
}

/// The CORS policy (`hybridllm_api::cors`).
#[pyclass(frozen, module = "hybridllm._api")]
struct Cors {
    inner: CoreCors,
}

#[pymethods]
impl Cors {
    #[new]
    fn new(
        origins: Vec<String>,
        methods: Vec<String>,
        headers: Vec<String>,
        credentials: bool,
    ) -> Self {
        Cors {
            inner: CoreCors::new(&origins, &methods, &headers, credentials),
        }
    }

    #[staticmethod]
    #[pyo3(signature = (method, origin, request_method))]
    fn is_preflight(method: &str, origin: Option<&str>, request_method: Option<&str>) -> bool {
        CoreCors::is_preflight(method, origin, request_method)
    }

    /// The whole answer to a preflight: (status, headers, body).
    #[pyo3(signature = (origin, request_method, request_headers, private_network))]
    fn preflight(
        &self,
        origin: &str,
        request_method: &str,
        request_headers: Option<&str>,
        private_network: bool,
    ) -> CoreAnswer {
        self.inner
            .preflight(origin, request_method, request_headers, private_network)
    }

    /// The headers of any other answer to a request from `origin`.
    fn response_headers(&self, origin: &str) -> Vec<(&'static str, String)> {
        self.inner.response_headers(origin)
    }
}

#[pymodule]
fn _api(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Unknown request fields go to the fallback frontend's logger, as the Rust frontend's.
    hybridllm_api::request::log_unknown_fields_with(|schema, field| {
        Python::attach(|py| {
            let msg = hybridllm_api::request::ignored_field_message(field);
            let logged = py
                .import("logging")
                .and_then(|l| l.call_method1("getLogger", ("hybridllm.frontend",)))
                .and_then(|l| l.call_method1("warning", ("%s (%s)", msg, schema)));
            if let Err(e) = logged {
                e.print(py); // a logging failure must not fail the request
            }
        })
    });
    m.add_function(wrap_pyfunction!(structured_grammar, m)?)?;
    m.add_function(wrap_pyfunction!(parse_tool_calls, m)?)?;
    m.add_function(wrap_pyfunction!(check_headers, m)?)?;
    m.add_function(wrap_pyfunction!(check_json_content_type, m)?)?;
    m.add_function(wrap_pyfunction!(check_body_size, m)?)?;
    m.add_function(wrap_pyfunction!(tokenizer_info, m)?)?;
    m.add_function(wrap_pyfunction!(tokenize_call, m)?)?;
    m.add_function(wrap_pyfunction!(tokenize_body, m)?)?;
    m.add_function(wrap_pyfunction!(detokenize, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(invocation, m)?)?;
    m.add_function(wrap_pyfunction!(normalise_root_path, m)?)?;
    m.add_function(wrap_pyfunction!(route_path, m)?)?;
    m.add_function(wrap_pyfunction!(models, m)?)?;
    m.add_function(wrap_pyfunction!(openapi_json, m)?)?;
    m.add_function(wrap_pyfunction!(new_request_id, m)?)?;
    m.add_class::<EmbeddingCall>()?;
    m.add_class::<EmbeddingResponse>()?;
    m.add_class::<ResponseStore>()?;
    m.add_class::<ResponsesCall>()?;
    m.add_class::<ResponsesResponse>()?;
    m.add_function(wrap_pyfunction!(error_response, m)?)?;
    m.add_class::<Context>()?;
    m.add_class::<EngineRequest>()?;
    m.add_class::<Response>()?;
    m.add_class::<Metrics>()?;
    m.add_class::<Step>()?;
    m.add_class::<EngineEvents>()?;
    m.add_class::<Auth>()?;
    m.add_class::<Cors>()?;
    m.add_function(wrap_pyfunction!(engine_error, m)?)?;
    m.add_function(wrap_pyfunction!(error, m)?)?;
    m.add_class::<ChatCall>()?;
    m.add_class::<ChatBatchCall>()?;
    m.add_class::<CompletionCall>()?;
    m.add("ApiError", m.py().get_type::<ApiError>())?;
    m.add_class::<Tokenizer>()?;
    m.add_class::<ChatTemplate>()?;
    m.add_class::<SequenceText>()?;
    m.add_function(wrap_pyfunction!(render_chat, m)?)?;
    Ok(())
}
