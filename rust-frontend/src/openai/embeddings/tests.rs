//! /v1/embeddings through the router against the fake engine: the exact body, base64, what
//! reaches the engine (truncated ids), and each refusal.
use crate::fake_engine::{self, id, FakeEngine};
use axum::http::StatusCode;
use base64::Engine as _;
use serde_json::json;
use serde_json::Value;

const PATH: &str = "/v1/embeddings";

#[tokio::test]
async fn float_body_and_what_the_engine_gets() {
    let engine = FakeEngine::new(vec![]);
    let st = fake_engine::embed_state(engine.clone());
    let body = json!({"input": ["Hello world", "foo"], "normalize": false});
    let (status, text) = fake_engine::post_text(st, PATH, body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        text,
        r#"{"id":"ID","object":"list","created":0,"model":"test-model","data":[{"index":0,"object":"embedding","embedding":[2.0,5.0,0.5]},{"index":1,"object":"embedding","embedding":[1.0,7.0,0.5]}],"usage":{"prompt_tokens":3,"total_tokens":3,"completion_tokens":0,"prompt_tokens_details":null}}"#
    );
    let sent = engine.embeds.lock().unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].normalize, Some(false));
    let ids: Vec<Vec<u32>> = sent[0].inputs.clone();
    assert_eq!(ids, vec![vec![id("Hello"), id("world")], vec![id("foo")]]);
}

#[tokio::test]
async fn base64_is_little_endian_f32() {
    let st = fake_engine::embed_state(FakeEngine::new(vec![]));
    let resp = fake_engine::post(
        st,
        PATH,
        json!({"input": [7, 8], "encoding_format": "base64"}),
    )
    .await;
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let b64 = v["data"][0]["embedding"].as_str().unwrap();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let floats: Vec<f32> = raw
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(floats, vec![2.0, 7.0, 0.5]);
}

#[tokio::test]
async fn token_ids_are_truncated_keeping_the_last_special_token() {
    let engine = FakeEngine::new(vec![]);
    let st = fake_engine::embed_state(engine.clone());
    let ids = [5, 6, 7, 8, fake_engine::EOS];
    let body = json!({"input": [ids], "truncate_prompt_tokens": 3});
    let (status, _) = fake_engine::post_text(st, PATH, body).await;
    assert_eq!(status, StatusCode::OK);
    let sent = engine.embeds.lock().unwrap();
    assert_eq!(sent[0].inputs[0], vec![5, 6, fake_engine::EOS]);
}

#[tokio::test]
async fn refusals_name_the_field() {
    let cases = [
        (json!({"input": []}), "input", "input must not be empty."),
        (
            json!({"input": ["a", ""]}),
            "input",
            "input[1] must not be an empty string.",
        ),
        (
            json!({"input": [[1], [99]]}),
            "input",
            "input[1]: token id 99 is out of vocabulary (size 10).",
        ),
        (
            json!({"input": "a", "dimensions": 8}),
            "dimensions",
            "dimensions (8) is not supported: this model's embeddings have 3 dimensions and it \
             cannot shorten them (not a matryoshka model).",
        ),
        (
            json!({"input": "a", "encoding_format": "x"}),
            "encoding_format",
            "encoding_format must be 'float', 'base64', 'bytes' or 'bytes_only', got 'x'.",
        ),
        (
            json!({"input": "a", "truncate_prompt_tokens": 65}),
            "truncate_prompt_tokens",
            "truncate_prompt_tokens (65) is larger than the model's maximum input length of 64 \
             tokens.",
        ),
        (
            json!({"input": "foo ".repeat(65)}),
            "input",
            "input has 65 tokens, more than the model's maximum input length of 64 tokens; pass \
             truncate_prompt_tokens to truncate it.",
        ),
    ];
    for (body, param, message) in cases {
        let st = fake_engine::embed_state(FakeEngine::new(vec![]));
        let resp = fake_engine::post(st, PATH, body.clone()).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["error"]["param"], param, "{body}");
        assert_eq!(v["error"]["message"], message, "{body}");
    }
}

#[tokio::test]
async fn each_endpoint_answers_only_its_task() {
    let st = fake_engine::state(FakeEngine::new(vec![]));
    let (status, text) = fake_engine::post_text(st, PATH, json!({"input": "a"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        text.contains("does not support the Embeddings API: `test-model` is a generative model (task 'generate')."),
        "{text}"
    );
    let st = fake_engine::embed_state(FakeEngine::new(vec![]));
    let body = json!({"messages": [{"role": "user", "content": "Hello"}]});
    let (status, text) = fake_engine::post_text(st, "/v1/chat/completions", body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        text.contains("`test-model` is an embedding model (task 'embed')."),
        "{text}"
    );
}
