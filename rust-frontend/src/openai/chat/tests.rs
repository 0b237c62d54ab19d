//! /v1/chat/completions through the router against a scripted fake engine: the exact bytes
//! a client receives, streamed and not.
use crate::fake_engine::{
    self, delta, first_response, id, last_delta, response, FakeEngine, Script,
};
use axum::http::StatusCode;
use http_body_util::BodyExt;
use hybridllm_api::engine_io::{
    EngineError, EngineFinish::*, EngineStep, PositionLogprobs, SequenceDelta, TokenLogprob,
};
use serde_json::json;

const PATH: &str = "/v1/chat/completions";

fn hello(extra: serde_json::Value) -> serde_json::Value {
    let mut body =
        json!({"model": "test-model", "messages": [{"role": "user", "content": "Hello"}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// The SSE body of these chunks (each the JSON after `"model"`), ended by `[DONE]`.
fn sse(chunks: &[&str]) -> String {
    let mut out = String::new();
    for c in chunks {
        out += r#"data: {"id":"ID","object":"chat.completion.chunk","created":0,"model":"test-model","#;
        out += c;
        out += "}\n\n";
    }
    out + "data: [DONE]\n\n"
}

#[tokio::test]
async fn streamed_chunks_with_usage() {
    let engine = FakeEngine::new(vec![Script::new(vec![
        first_response(3, 1, vec![delta(0, &["foo"])], false),
        response(
            vec![last_delta(
                0,
                &["bar", "<eos>"],
                Stop,
                Some(fake_engine::EOS),
            )],
            true,
        ),
    ])]);
    let body = hello(json!({"stream": true, "stream_options": {"include_usage": true}}));
    let (status, text) =
        fake_engine::post_text(fake_engine::state(engine.clone()), PATH, body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        text,
        sse(&[
            r#""choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null"#,
            r#""choices":[{"index":0,"delta":{"content":" foo"},"logprobs":null,"finish_reason":null}],"usage":null"#,
            r#""choices":[{"index":0,"delta":{"content":" bar"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":null"#,
            r#""choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6,"prompt_tokens_details":null}"#,
        ])
    );
    // The rendered prompt "user: Hello assistant:", as token ids.
    let sent = engine.requests.lock().unwrap()[0].clone();
    assert_eq!(
        sent.prompt_ids,
        [id("user:"), id("Hello"), id("assistant:")]
    );
    assert!(sent.request_id.starts_with("chatcmpl-"));
    assert_eq!(sent.sampling.max_tokens, Some(64 - 3));
}

#[tokio::test]
async fn a_stop_string_ends_the_choice_and_aborts_the_engine() {
    let engine = FakeEngine::new(vec![Script::new(vec![
        first_response(3, 0, vec![delta(0, &["foo"])], false),
        response(vec![delta(0, &["bar"])], false),
        response(vec![delta(0, &["baz"])], false),
    ])
    .then_hang()]);
    let body = hello(json!({"stream": true, "stop": "r b"}));
    let (_, text) = fake_engine::post_text(fake_engine::state(engine.clone()), PATH, body).await;
    assert_eq!(
        text,
        sse(&[
            r#""choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]"#,
            r#""choices":[{"index":0,"delta":{"content":" foo"},"logprobs":null,"finish_reason":null}]"#,
            r#""choices":[{"index":0,"delta":{"content":" ba"},"logprobs":null,"finish_reason":null}]"#,
            r#""choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":"r b"}]"#,
        ])
    );
    assert_eq!(engine.aborted(), engine.request_ids());
}

#[tokio::test]
async fn two_choices_stream_interleaved() {
    let engine = FakeEngine::new(vec![Script::new(vec![
        first_response(3, 0, vec![delta(1, &["bar"]), delta(0, &["foo"])], false),
        response(
            vec![
                last_delta(1, &["<stop>"], Stop, Some(fake_engine::STOP_TOKEN)),
                last_delta(0, &["baz"], Length, None),
            ],
            true,
        ),
    ])]);
    let body = hello(json!({"stream": true, "n": 2}));
    let (_, text) = fake_engine::post_text(fake_engine::state(engine), PATH, body).await;
    assert_eq!(
        text,
        sse(&[
            r#""choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]"#,
            r#""choices":[{"index":1,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]"#,
            r#""choices":[{"index":1,"delta":{"content":" bar"},"logprobs":null,"finish_reason":null}]"#,
            r#""choices":[{"index":0,"delta":{"content":" foo"},"logprobs":null,"finish_reason":null}]"#,
            r#""choices":[{"index":1,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":1}]"#,
            r#""choices":[{"index":0,"delta":{"content":" baz"},"logprobs":null,"finish_reason":"length","stop_reason":null}]"#,
        ])
    );
}

#[tokio::test]
async fn an_engine_error_mid_stream_is_an_error_event() {
    let engine = FakeEngine::new(vec![Script::new(vec![
        first_response(3, 0, vec![delta(0, &["foo"])], false),
        EngineStep {
            error: Some("CUDA out of memory".into()),
            ..response(vec![last_delta(0, &[], Error, None)], true)
        },
    ])]);
    let (_, text) = fake_engine::post_text(
        fake_engine::state(engine),
        PATH,
        hello(json!({"stream": true})),
    )
    .await;
    let role = sse(&[
        r#""choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]"#,
        r#""choices":[{"index":0,"delta":{"content":" foo"},"logprobs":null,"finish_reason":null}]"#,
    ]);
    let chunks = role.strip_suffix("data: [DONE]\n\n").unwrap();
    assert_eq!(
        text,
        format!(
            "{chunks}data: {{\"error\":{{\"message\":\"CUDA out of memory\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}}}\n\ndata: [DONE]\n\n"
        )
    );
}

#[tokio::test]
async fn non_streamed_response_with_logprobs() {
    let lp = |word: &str, logprob: f32| TokenLogprob {
        token_id: id(word),
        logprob,
        rank: 1,
    };
    let with_lps = |mut d: SequenceDelta, lps: Vec<PositionLogprobs>| {
        d.logprobs = lps;
        d
    };
    let engine = FakeEngine::new(vec![Script::new(vec![
        first_response(
            3,
            0,
            vec![with_lps(
                delta(0, &["foo"]),
                vec![PositionLogprobs {
                    token: Some(lp("foo", -0.5)),
                    top: vec![lp("foo", -0.5), lp("bar", -1.25)],
                }],
            )],
            false,
        ),
        response(vec![last_delta(0, &[], Abort, None)], true),
    ])]);
    let body = hello(json!({"logprobs": true, "top_logprobs": 1}));
    let (status, text) = fake_engine::post_text(fake_engine::state(engine), PATH, body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        text,
        concat!(
            r#"{"id":"ID","object":"chat.completion","created":0,"model":"test-model","choices":[{"index":0,"#,
            r#""message":{"role":"assistant","content":" foo","tool_calls":[]},"#,
            r#""logprobs":{"content":[{"token":"foo","logprob":-0.5,"bytes":[102,111,111],"top_logprobs":[{"token":"foo","logprob":-0.5,"bytes":[102,111,111]}]}]},"#,
            r#""finish_reason":"abort","stop_reason":null}],"#,
            r#""usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":null},"prompt_logprobs":null}"#,
        )
    );
}

#[tokio::test]
async fn a_refused_request_is_an_http_error() {
    let engine = FakeEngine::new(vec![Script {
        responses: vec![Err(EngineError::Invalid {
            message: "prompt too long".into(),
            param: None,
        })],
        hang: false,
    }]);
    let (status, text) = fake_engine::post_text(
        fake_engine::state(engine),
        PATH,
        hello(json!({"stream": true})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        text,
        r#"{"error":{"message":"prompt too long","type":"BadRequestError","param":null,"code":400}}"#
    );
}

/// A field the API lets through but the engine refuses (min_tokens beyond what is left of
/// the context window): the engine's refusal names it, and so does the error body.
#[tokio::test]
async fn the_engines_refusal_names_the_field() {
    let message = "min_tokens must be in [0, max_tokens], got 100.";
    let engine = FakeEngine::new(vec![Script {
        responses: vec![Err(EngineError::Invalid {
            message: message.into(),
            param: Some("min_tokens".into()),
        })],
        hang: false,
    }]);
    let (status, text) = fake_engine::post_text(
        fake_engine::state(engine),
        PATH,
        hello(json!({"min_tokens": 100})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let body: serde_json::Value = serde_json::from_str(&text).unwrap();
    let expected = json!({"error": {"message": message, "type": "BadRequestError",
        "param": "min_tokens", "code": 400}});
    assert_eq!(body, expected);
}

#[tokio::test]
async fn a_client_that_goes_away_aborts_the_engine_request() {
    let engine = FakeEngine::new(vec![Script::new(vec![first_response(
        3,
        0,
        vec![delta(0, &["foo"])],
        false,
    )])
    .then_hang()]);
    let state = fake_engine::state(engine.clone());
    let resp = fake_engine::post(state.clone(), PATH, hello(json!({"stream": true}))).await;
    let mut body = resp.into_body();
    let mut received = String::new();
    while !received.contains(" foo") {
        let frame = body.frame().await.unwrap().unwrap();
        received += std::str::from_utf8(frame.data_ref().unwrap()).unwrap();
    }
    assert!(engine.aborted().is_empty());
    drop(body);
    assert_eq!(engine.aborted(), engine.request_ids());
    assert_eq!(state.metrics.in_flight.get(), 0);
}
