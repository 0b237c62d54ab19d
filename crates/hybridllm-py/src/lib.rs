//! `hybridllm._api`: the API core for the Python side of hybridllm (the fallback frontend and
//! the offline `LLM`), so that its rules (chat prompts, detokenization, stop strings, finish
//! reasons, errors) are the Rust frontend's own code, not a copy. Only conversion lives here.
use hybridllm_api::errors::ApiError as CoreError;
use hybridllm_api::sequence_text::{EngineFinish, SequenceText as CoreSequenceText};
use hybridllm_api::text::chat_template::ChatTemplate as CoreTemplate;
use hybridllm_api::text::tokenizer::{DecodeOpts, Tokenizer as CoreTokenizer};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString};
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
    /// The text it was compiled from (what /tokenizer_info reports).
    #[pyo3(get)]
    source: String,
}

#[pymethods]
impl ChatTemplate {
    /// Raises ValueError naming the line when the template does not compile.
    #[new]
    fn new(source: &str) -> PyResult<Self> {
        CoreTemplate::compile(source)
            .map(|inner| ChatTemplate {
                inner,
                source: source.to_string(),
            })
            .map_err(PyValueError::new_err)
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

#[pymodule]
fn _api(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ApiError", m.py().get_type::<ApiError>())?;
    m.add_class::<Tokenizer>()?;
    m.add_class::<ChatTemplate>()?;
    m.add_class::<SequenceText>()?;
    m.add_function(wrap_pyfunction!(render_chat, m)?)?;
    Ok(())
}
