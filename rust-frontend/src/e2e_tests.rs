//! End-to-end tests of the HTTP layer against a scripted in-process fake engine (tonic server
//! on a unix socket): SSE framing, stop strings, EOS handling, error mapping, cancellation.
//! They need the default model's tokenizer.json and skip (loudly) without it.
use crate::cli::ServeArgs;
use crate::engine_client::pb::{self, engine_server};
use crate::server::{build_state, router};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request as GReq, Response as GResp, Status};
use tower::ServiceExt;

const EOS: u32 = 2;

#[derive(Default)]
struct Fake {
    script: Vec<u32>,
    tokenizer_path: String,
    cancelled: Arc<AtomicUsize>,
    aborted: Arc<Mutex<Vec<String>>>,
    last_request: Arc<Mutex<Option<pb::GenerateRequest>>>,
}

#[tonic::async_trait]
impl engine_server::Engine for Fake {
    type GenerateStream = ReceiverStream<Result<pb::GenerateResponse, Status>>;

    async fn generate(
        &self,
        req: GReq<pb::GenerateRequest>,
    ) -> Result<GResp<Self::GenerateStream>, Status> {
        let req = req.into_inner();
        *self.last_request.lock().unwrap() = Some(req.clone());
        let sp = req.sampling_params.clone().unwrap_or_default();
        if sp.seed == Some(-42) {
            return Err(Status::invalid_argument("seed -42 is cursed"));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let (script, cancelled) = (self.script.clone(), self.cancelled.clone());
        let (n, max) = (
            sp.n.unwrap_or(1),
            sp.max_tokens.unwrap_or(u32::MAX) as usize,
        );
        tokio::spawn(async move {
            for step in 0..=script.len() {
                let mut seqs = vec![];
                for index in 0..n {
                    let (ids, fr, stop) = if step == script.len() {
                        (vec![EOS], pb::FinishReason::Stop, Some(EOS))
                    } else if step + 1 >= max {
                        (vec![script[step]], pb::FinishReason::Length, None)
                    } else {
                        (vec![script[step]], pb::FinishReason::Unspecified, None)
                    };
                    seqs.push(pb::SequenceDelta {
                        index,
                        token_ids: ids,
                        finish_reason: fr as i32,
                        stop_token_id: stop,
                        ..Default::default()
                    });
                }
                let done = seqs[0].finish_reason != 0;
                let prompt = (step == 0).then(|| pb::PromptInfo {
                    prompt_tokens: req.prompt_token_ids.len() as u32,
                    cached_tokens: 3,
                    prompt_logprobs: vec![],
                });
                let msg = pb::GenerateResponse {
                    request_id: req.request_id.clone(),
                    prompt,
                    sequences: seqs,
                    error: String::new(),
                };
                if tx.send(Ok(msg)).await.is_err() {
                    cancelled.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                if done {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        Ok(GResp::new(ReceiverStream::new(rx)))
    }

    async fn abort(&self, req: GReq<pb::AbortRequest>) -> Result<GResp<pb::AbortResponse>, Status> {
        self.aborted
            .lock()
            .unwrap()
            .extend(req.into_inner().request_ids);
        Ok(GResp::new(pb::AbortResponse {}))
    }

    async fn health(
        &self,
        _: GReq<pb::HealthRequest>,
    ) -> Result<GResp<pb::HealthResponse>, Status> {
        Ok(GResp::new(pb::HealthResponse {
            status: pb::health_response::Status::Serving as i32,
        }))
    }

    async fn get_model_info(
        &self,
        _: GReq<pb::ModelInfoRequest>,
    ) -> Result<GResp<pb::ModelInfo>, Status> {
        Ok(GResp::new(pb::ModelInfo {
            served_model_name: "fake".into(),
            model_path: "/models/fake".into(),
            max_model_len: 128,
            vocab_size: 49152,
            eos_token_ids: vec![EOS],
            tokenizer_path: self.tokenizer_path.clone(),
            chat_template: "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}".into(),
            bos_token: "<|im_start|>".into(),
            eos_token: "<|im_end|>".into(),
            ..Default::default()
        }))
    }

    async fn get_load(&self, _: GReq<pb::LoadRequest>) -> Result<GResp<pb::LoadResponse>, Status> {
        Ok(GResp::new(pb::LoadResponse {
            num_running: 3,
            kv_cache_usage: 0.5,
            prompt_tokens_total: 42,
            ..Default::default()
        }))
    }
}

fn tokenizer_path() -> Option<PathBuf> {
    let p = std::env::var("HYBRIDLLM_TEST_TOKENIZER")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/hybridllm/models/SmolLM2-135M-Instruct/tokenizer.json")
        });
    p.exists().then_some(p)
}

struct Harness {
    app: axum::Router,
    fake_cancelled: Arc<AtomicUsize>,
    aborted: Arc<Mutex<Vec<String>>>,
    last_request: Arc<Mutex<Option<pb::GenerateRequest>>>,
    _dir: TempDir,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn harness(script_text: &str, args_json: &str) -> Option<Harness> {
    let Some(tok_path) = tokenizer_path() else {
        eprintln!("SKIPPED: tokenizer.json of the default model not found");
        return None;
    };
    let tok = crate::text::tokenizer::Tokenizer::from_file(&tok_path).unwrap();
    let dir = std::env::temp_dir().join(format!("hl-e2e-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("engine.sock");
    let fake = Fake {
        script: tok.encode(script_text, false).unwrap(),
        tokenizer_path: tok_path.display().to_string(),
        ..Default::default()
    };
    let (fake_cancelled, aborted, last_request) = (
        fake.cancelled.clone(),
        fake.aborted.clone(),
        fake.last_request.clone(),
    );
    let uds = tokio::net::UnixListener::bind(&sock).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(engine_server::EngineServer::new(fake))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(uds)),
    );
    let args = ServeArgs {
        listen_fd: None,
        host: "127.0.0.1".into(),
        port: 0,
        engine_address: format!("unix://{}", sock.display()),
        args_json: args_json.into(),
    };
    let state = build_state(&args).await.unwrap();
    Some(Harness {
        app: router(state),
        fake_cancelled,
        aborted,
        last_request,
        _dir: TempDir(dir),
    })
}

async fn post(app: &axum::Router, path: &str, body: Value) -> (StatusCode, String) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

fn sse_chunks(body: &str) -> Vec<Value> {
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    body.split("\n\n")
        .filter(|s| !s.is_empty() && *s != "data: [DONE]")
        .map(|s| serde_json::from_str(s.strip_prefix("data: ").expect("data: prefix")).unwrap())
        .collect()
}

#[tokio::test]
async fn chat_stream_framing_and_usage() {
    let Some(h) = harness("Hello there, friend!", "{}").await else {
        return;
    };
    let body = json!({"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": true, "n": 2,
                      "stream_options": {"include_usage": true}});
    let (status, text) = post(&h.app, "/v1/chat/completions", body).await;
    assert_eq!(status, StatusCode::OK);
    let chunks = sse_chunks(&text);
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-") && id.len() == 9 + 32);
    assert!(chunks
        .iter()
        .all(|c| c["id"] == id && c["object"] == "chat.completion.chunk" && c["model"] == "fake"));
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    for i in 0..2 {
        let mine: Vec<&Value> = chunks
            .iter()
            .flat_map(|c| c["choices"].as_array().unwrap())
            .filter(|c| c["index"] == i)
            .collect();
        let text: String = mine
            .iter()
            .filter_map(|c| c["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "Hello there, friend!");
        let finishes: Vec<&&Value> = mine
            .iter()
            .filter(|c| !c["finish_reason"].is_null())
            .collect();
        assert_eq!(finishes.len(), 1);
        assert_eq!(finishes[0]["finish_reason"], "stop");
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    let prompt_tokens = last["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        last["usage"]["total_tokens"].as_u64().unwrap(),
        prompt_tokens + last["usage"]["completion_tokens"].as_u64().unwrap()
    );
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["usage"].is_null()));
}

#[tokio::test]
async fn completion_stop_string_aborts() {
    let Some(h) = harness(
        "one two three four five six seven eight",
        r#"{"served_model_name": ["a", "b"]}"#,
    )
    .await
    else {
        return;
    };
    let (status, text) = post(
        &h.app,
        "/v1/completions",
        json!({"model": "b", "prompt": "count:", "stop": [" four"], "max_tokens": 50}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["model"], "a");
    assert_eq!(v["choices"][0]["text"], "one two three");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["stop_reason"], " four");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.aborted.lock().unwrap().len(), 1);
    let sent = h.last_request.lock().unwrap().clone().unwrap();
    assert_eq!(sent.sampling_params.unwrap().max_tokens, Some(50));
}

#[tokio::test]
async fn length_default_max_tokens_and_errors() {
    let Some(h) = harness("a b c d e f g", "{}").await else {
        return;
    };
    let (_, text) = post(
        &h.app,
        "/v1/completions",
        json!({"prompt": "x", "max_tokens": 3}),
    )
    .await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    let _ = post(&h.app, "/v1/completions", json!({"prompt": "x"})).await;
    let sent = h.last_request.lock().unwrap().clone().unwrap();
    assert_eq!(
        sent.sampling_params.unwrap().max_tokens,
        Some(128 - sent.prompt_token_ids.len() as u32)
    );
    let (status, text) = post(
        &h.app,
        "/v1/completions",
        json!({"prompt": "x", "seed": -42}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("seed -42 is cursed"), "{text}");
    let (status, text) = post(
        &h.app,
        "/v1/completions",
        json!({"model": "nope", "prompt": "x"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(text.contains("The model `nope` does not exist."));
    let (status, text) = post(
        &h.app,
        "/v1/completions",
        json!({"prompt": "x", "max_tokens": "a"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["param"], "max_tokens");
    assert_eq!(v["error"]["type"], "BadRequestError");
    let (status, _) = post(&h.app, "/v1/chat/completions", json!({"messages": "x"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let req = Request::post("/v1/completions")
        .body(Body::from("{not json"))
        .unwrap();
    let resp = h.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn disconnect_cancels_engine_call() {
    let Some(h) = harness(&"word ".repeat(100), "{}").await else {
        return;
    };
    let body = json!({"prompt": "x", "stream": true, "max_tokens": 100});
    let req = Request::post("/v1/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = h.app.clone().oneshot(req).await.unwrap();
    let mut stream = resp.into_body().into_data_stream();
    let _ = stream.next().await;
    drop(stream); // the client goes away
    for _ in 0..100 {
        if h.fake_cancelled.load(Ordering::SeqCst) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the engine call was not cancelled after the client disconnected");
}

#[tokio::test]
async fn auth_metrics_and_misc_routes() {
    let Some(h) = harness("ok", r#"{"api_keys": ["sk-1"]}"#).await else {
        return;
    };
    let get = |path: &str, key: Option<&str>| {
        let mut r = Request::get(path);
        if let Some(k) = key {
            r = r.header("authorization", format!("Bearer {k}"));
        }
        h.app.clone().oneshot(r.body(Body::empty()).unwrap())
    };
    assert_eq!(
        get("/v1/models", None).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get("/v1/models", Some("bad")).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get("/v1/models", Some("sk-1")).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(get("/health", None).await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        get("/version", None).await.unwrap().status(),
        StatusCode::OK
    );
    let m = get("/metrics", Some("sk-1")).await.unwrap();
    let text = String::from_utf8(
        axum::body::to_bytes(m.into_body(), 1 << 20)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(text.contains("hybridllm:num_requests_running 3"), "{text}");
    assert!(text.contains("hybridllm:kv_cache_usage_perc 0.5"));
    assert!(text.contains("hybridllm:prompt_tokens_total 42"));
}
