//! Test support: a scripted fake engine, a word-level tokenizer built in code and an
//! `AppState` around them, so the HTTP side runs in `cargo test` without a worker.
use crate::config::ServeConfig;
use crate::engine::{EmbedResult, Engine, StepStream};
use crate::metrics::Metrics;
use crate::openai::text_deltas::GenEvent;
use crate::state::AppState;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures_util::future::BoxFuture;
use futures_util::Stream;
use hybridllm_api::context::ApiContext;
use hybridllm_api::engine_io::{
    EmbedRequest, EngineError, EngineFinish, EngineStep, GenerateRequest, PromptInfo, SequenceDelta,
};
use hybridllm_api::text::chat_template::ChatTemplate;
use hybridllm_api::text::tokenizer::Tokenizer;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower::ServiceExt;

/// Words of the test vocabulary, id = position. `<eos>` and `<stop>` are special tokens.
pub const VOCAB: &[&str] = &[
    "<eos>",
    "<stop>",
    "[UNK]",
    "user:",
    "assistant:",
    "Hello",
    "world",
    "foo",
    "bar",
    "baz",
];
pub const EOS: u32 = 0;
pub const STOP_TOKEN: u32 = 1;

pub fn id(word: &str) -> u32 {
    VOCAB.iter().position(|w| *w == word).expect("a test word") as u32
}

/// Words split on whitespace, decoded joined by spaces: "foo" after "Hello" reads " foo".
pub fn tokenizer() -> Tokenizer {
    let vocab: serde_json::Map<String, serde_json::Value> = VOCAB
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), i.into()))
        .collect();
    let special = |id: u32| {
        serde_json::json!({"id": id, "content": VOCAB[id as usize], "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true})
    };
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(EOS), special(STOP_TOKEN)],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    });
    let inner: tokenizers::Tokenizer = json.to_string().parse().expect("a valid tokenizer");
    Tokenizer::new(inner)
}

/// "user: Hello assistant:" for one user message "Hello".
pub const TEMPLATE: &str = "{% for m in messages %}{{ m.role }}: {{ m.content }} {% endfor %}\
                            {% if add_generation_prompt %}assistant:{% endif %}";

/// What the fake engine answers to one request: these steps, then (if `hang`) nothing more
/// while the request keeps running, as a slow engine would.
pub struct Script {
    pub responses: Vec<Result<EngineStep, EngineError>>,
    pub hang: bool,
}

impl Script {
    pub fn new(responses: Vec<EngineStep>) -> Self {
        Script {
            responses: responses.into_iter().map(Ok).collect(),
            hang: false,
        }
    }

    pub fn then_hang(mut self) -> Self {
        self.hang = true;
        self
    }
}

/// Answers each request with the next script, records the requests, and records a request
/// as aborted when its stream is dropped before its last response.
#[derive(Default)]
pub struct FakeEngine {
    scripts: Mutex<VecDeque<Script>>,
    pub requests: Mutex<Vec<GenerateRequest>>,
    pub embeds: Mutex<Vec<EmbedRequest>>,
    aborted: Arc<Mutex<Vec<String>>>,
}

impl FakeEngine {
    pub fn new(scripts: Vec<Script>) -> Arc<Self> {
        Arc::new(FakeEngine {
            scripts: Mutex::new(scripts.into()),
            ..Default::default()
        })
    }

    pub fn aborted(&self) -> Vec<String> {
        self.aborted.lock().unwrap().clone()
    }

    pub fn request_ids(&self) -> Vec<String> {
        let requests = self.requests.lock().unwrap();
        requests.iter().map(|r| r.request_id.clone()).collect()
    }
}

impl Engine for FakeEngine {
    fn generate(&self, req: GenerateRequest) -> StepStream {
        let script = self.scripts.lock().unwrap().pop_front();
        let script = script.expect("a script for every request");
        let stream = FakeStream {
            request_id: req.request_id.clone(),
            responses: script.responses.into(),
            hang: script.hang,
            finished: false,
            aborted: self.aborted.clone(),
        };
        self.requests.lock().unwrap().push(req);
        Box::pin(stream)
    }

    /// Each input's vector is [its length, its first id, 0.5].
    fn embed(&self, req: EmbedRequest) -> BoxFuture<'static, EmbedResult> {
        let embeddings = (req.inputs.iter())
            .map(|ids| vec![ids.len() as f32, ids[0] as f32, 0.5])
            .collect();
        self.embeds.lock().unwrap().push(req);
        Box::pin(async move { Ok(embeddings) })
    }
}

struct FakeStream {
    request_id: String,
    responses: VecDeque<Result<EngineStep, EngineError>>,
    hang: bool,
    finished: bool,
    aborted: Arc<Mutex<Vec<String>>>,
}

impl Stream for FakeStream {
    type Item = Result<EngineStep, EngineError>;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.responses.pop_front() {
            Some(item) => {
                self.finished = item.as_ref().map_or(true, |r| r.finished);
                Poll::Ready(Some(item))
            }
            // Never woken: the test drops the stream (or the body holding it) instead.
            None if self.hang => Poll::Pending,
            None => Poll::Ready(None),
        }
    }
}

impl Drop for FakeStream {
    fn drop(&mut self) {
        if !self.finished {
            let id = std::mem::take(&mut self.request_id);
            self.aborted.lock().unwrap().push(id);
        }
    }
}

/// One step's output for one sequence.
pub fn delta(index: u32, words: &[&str]) -> SequenceDelta {
    SequenceDelta {
        index,
        token_ids: words.iter().map(|w| id(w)).collect(),
        logprobs: vec![],
        finish: EngineFinish::Running,
        stop_token_id: None,
    }
}

/// A sequence's last step: `words`, ended by the engine for `reason`.
pub fn last_delta(
    index: u32,
    words: &[&str],
    reason: EngineFinish,
    stop_token_id: Option<u32>,
) -> SequenceDelta {
    SequenceDelta {
        finish: reason,
        stop_token_id,
        ..delta(index, words)
    }
}

/// A step carrying these deltas; `finished` when every sequence has ended.
pub fn response(sequences: Vec<SequenceDelta>, finished: bool) -> EngineStep {
    EngineStep {
        sequences,
        finished,
        ..Default::default()
    }
}

/// The first step of a request: the prompt facts and the first deltas (`finished` if they
/// end every sequence).
pub fn first_response(
    prompt_tokens: u32,
    cached_tokens: u32,
    sequences: Vec<SequenceDelta>,
    finished: bool,
) -> EngineStep {
    EngineStep {
        prompt: Some(PromptInfo {
            prompt_tokens,
            cached_tokens,
            prompt_logprobs: vec![],
            queue_time_s: 0.0,
        }),
        ..response(sequences, finished)
    }
}

/// An event as one line: `prompt <tokens> <cached>` or
/// `<index> <text as JSON> <num_tokens> [<finish_reason> <stop_reason>]`.
pub fn show_event(ev: &GenEvent) -> String {
    match ev {
        GenEvent::Prompt(p) => format!("prompt {} {}", p.prompt_tokens, p.cached_tokens),
        GenEvent::Output(o) => {
            let text = serde_json::to_string(&o.text).unwrap();
            let mut line = format!("{} {text} {}", o.index, o.num_tokens);
            if let Some(f) = &o.finish {
                line += &format!(" {} {}", f.reason, f.stop_reason);
            }
            line
        }
    }
}

/// "user: Hello assistant:" as token ids.
pub fn prompt_ids() -> Vec<u32> {
    vec![id("user:"), id("Hello"), id("assistant:")]
}

/// Validated sampling parameters from request JSON.
pub fn params(json: serde_json::Value) -> hybridllm_api::validation::GenParams {
    let sampling: hybridllm_api::validation::SamplingRequest =
        serde_json::from_value(json).unwrap();
    sampling.validate(None, VOCAB.len()).unwrap()
}

pub fn state(engine: Arc<FakeEngine>) -> Arc<AppState> {
    let config = ServeConfig {
        served_model_name: vec!["test-model".into()],
        disable_log_requests: true,
        ..Default::default()
    };
    let tokenizer = tokenizer();
    let vocab_size = tokenizer.vocab_size();
    let (max_tokens_limit, max_beam_width) = (config.max_tokens_limit, config.max_beam_width);
    Arc::new(AppState {
        auth: crate::state::auth(&config),
        cors: crate::state::cors(&config),
        config,
        engine,
        // Never called by these tests; lazy, so nothing connects.
        engine_clients: vec![crate::engine_client::connect("http://127.0.0.1:1").unwrap()],
        keep_alive: false,
        api: ApiContext {
            tokenizer: Arc::new(tokenizer),
            template: Some(ChatTemplate::compile(TEMPLATE).unwrap()),
            served_names: vec!["test-model".into()],
            max_model_len: 64,
            vocab_size,
            max_tokens_limit,
            max_beam_width,
            embed: false,
            bos_token: String::new(),
            eos_token: String::new(),
            eos_token_ids: vec![EOS].into(),
            max_num_seqs: 0,
            priority_scheduling: false,
            hidden_size: 0,
            lowercase_inputs: false,
            chunked_processing: false,
            max_embed_len: None,
            grammars: Err("the test tokenizer has no byte-level vocabulary".into()),
            tools: Default::default(),
            reasoning: None,
            force_include_usage: false,
            prompt_tokens_details: false,
            warnings: vec![],
        },
        model_path: String::new(),
        tokenizer_path: String::new(),
        metrics: Arc::new(Metrics::new()),
        responses: hybridllm_api::response_store::ResponseStore::new(8),
        background: Default::default(),
        created: 0,
    })
}

/// `state` for an embedding model whose vectors have 3 dimensions (FakeEngine::embed's).
pub fn embed_state(engine: Arc<FakeEngine>) -> Arc<AppState> {
    let mut st = Arc::try_unwrap(state(engine)).ok().expect("a fresh state");
    st.api.embed = true;
    st.api.hidden_size = 3;
    Arc::new(st)
}

/// POSTs `body` to the router; the response as it would go out.
pub async fn post(
    state: Arc<AppState>,
    path: &str,
    body: serde_json::Value,
) -> axum::response::Response {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    crate::server::router(state).oneshot(req).await.unwrap()
}

/// The status and the whole body, with the response id replaced by `ID` and `created` by 0
/// (both differ per run).
pub async fn post_text(
    state: Arc<AppState>,
    path: &str,
    body: serde_json::Value,
) -> (StatusCode, String) {
    let resp = post(state, path, body).await;
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, redact(std::str::from_utf8(&bytes).unwrap()))
}

/// The response id becomes `ID` and `created` 0.
pub fn redact(text: &str) -> String {
    let text = replace_values(text, "\"id\":\"", |c| c == '"', "ID");
    replace_values(&text, "\"created\":", |c| !c.is_ascii_digit(), "0")
}

/// Replaces what follows each `key`, up to the first char that is `end`, with `with`.
fn replace_values(text: &str, key: &str, end: impl Fn(char) -> bool, with: &str) -> String {
    let mut parts = text.split(key);
    let mut out = parts.next().unwrap_or_default().to_string();
    for part in parts {
        let value_len = part.find(|c: char| end(c)).unwrap_or(part.len());
        out = out + key + with + &part[value_len..];
    }
    out
}
