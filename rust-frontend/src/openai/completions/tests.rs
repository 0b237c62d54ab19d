//! /v1/completions: through the router against a scripted fake engine the
//! exact bytes a client receives.
use crate::fake_engine::{
    self, delta, first_response, id, last_delta, response, FakeEngine, Script,
};
use axum::http::StatusCode;
use hybridllm_api::engine_io::{
    EngineFinish::*, EngineStep, PositionLogprobs, PromptInfo, SequenceDelta, TokenLogprob,
};
use serde_json::json;

const PATH: &str = "/v1/completions";

fn token_lp(word: &str, logprob: f32, rank: u32) -> TokenLogprob {
    TokenLogprob {
        token_id: id(word),
        logprob,
        rank,
    }
}

fn with_logprobs(mut d: SequenceDelta, token: &str, lp: f32, top: &[(&str, f32)]) -> SequenceDelta {
    d.logprobs = vec![PositionLogprobs {
        token: Some(token_lp(token, lp, 1)),
        top: top.iter().map(|(w, l)| token_lp(w, *l, 1)).collect(),
    }];
    d
}

/// The SSE body of these chunks (each the JSON after `"model"`), ended by `[DONE]`.
fn sse(chunks: &[&str]) -> String {
    let mut out = String::new();
    for c in chunks {
        out += r#"data: {"id":"ID","object":"text_completion","created":0,"model":"test-model","#;
        out += c;
        out += "}\n\n";
    }
    out + "data: [DONE]\n\n"
}

#[tokio::test]
async fn streamed_logprobs_continue_their_text_offsets() {
    let engine = FakeEngine::new(vec![Script::new(vec![
        first_response(
            1,
            0,
            vec![with_logprobs(
                delta(0, &["foo"]),
                "foo",
                -0.5,
                &[("foo", -0.5), ("bar", -1.25)],
            )],
            false,
        ),
        response(
            vec![with_logprobs(
                last_delta(0, &["bar"], Length, None),
                "bar",
                -1.0,
                &[("baz", -0.25)],
            )],
            true,
        ),
    ])]);
    let body = json!({"prompt": "Hello", "logprobs": 1, "stream": true,
        "stream_options": {"include_usage": true}});
    let (status, text) =
        fake_engine::post_text(fake_engine::state(engine.clone()), PATH, body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        text,
        sse(&[
            r#""choices":[{"index":0,"text":" foo","logprobs":{"text_offset":[0],"token_logprobs":[-0.5],"tokens":["foo"],"top_logprobs":[{"foo":-0.5}]},"finish_reason":null,"stop_reason":null}],"usage":null"#,
            r#""choices":[{"index":0,"text":" bar","logprobs":{"text_offset":[3],"token_logprobs":[-1.0],"tokens":["bar"],"top_logprobs":[{"baz":-0.25,"bar":-1.0}]},"finish_reason":"length","stop_reason":null}],"usage":null"#,
            r#""choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":null}"#,
        ])
    );
    let sent = engine.requests.lock().unwrap()[0].clone();
    assert!(sent.request_id.starts_with("cmpl-") && sent.request_id.ends_with("-0"));
    assert_eq!(sent.prompt_ids, [id("Hello")]);
}

#[tokio::test]
async fn streamed_echo_comes_first_for_every_choice() {
    let engine = FakeEngine::new(vec![Script::new(vec![first_response(
        2,
        0,
        vec![
            last_delta(1, &["bar"], Length, None),
            last_delta(0, &["foo", "<eos>"], Stop, Some(fake_engine::EOS)),
        ],
        true,
    )])]);
    let body = json!({"prompt": [id("Hello"), id("world")], "echo": true, "n": 2, "stream": true});
    let (_, text) = fake_engine::post_text(fake_engine::state(engine), PATH, body).await;
    assert_eq!(
        text,
        sse(&[
            r#""choices":[{"index":0,"text":"Hello world","logprobs":null,"finish_reason":null,"stop_reason":null}]"#,
            r#""choices":[{"index":1,"text":"Hello world","logprobs":null,"finish_reason":null,"stop_reason":null}]"#,
            r#""choices":[{"index":1,"text":" bar","logprobs":null,"finish_reason":"length","stop_reason":null}]"#,
            r#""choices":[{"index":0,"text":" foo","logprobs":null,"finish_reason":"stop","stop_reason":null}]"#,
        ])
    );
}

#[tokio::test]
async fn non_streamed_choices_of_two_prompts() {
    let prompt_lps = vec![
        PositionLogprobs {
            token: Some(token_lp("world", f32::NAN, 0)),
            top: vec![],
        },
        PositionLogprobs {
            token: Some(token_lp("foo", -2.0, 3)),
            top: vec![token_lp("bar", -0.5, 1)],
        },
    ];
    let second = EngineStep {
        prompt: Some(PromptInfo {
            prompt_tokens: 2,
            cached_tokens: 2,
            prompt_logprobs: prompt_lps,
            queue_time_s: 0.0,
        }),
        ..response(
            vec![
                last_delta(0, &["baz"], Length, None),
                last_delta(1, &[], Abort, None),
            ],
            true,
        )
    };
    let engine = FakeEngine::new(vec![
        Script::new(vec![first_response(
            1,
            0,
            vec![
                last_delta(0, &["foo"], Length, None),
                last_delta(1, &["bar", "<stop>"], Stop, Some(fake_engine::STOP_TOKEN)),
            ],
            true,
        )]),
        Script::new(vec![second]),
    ]);
    let body = json!({"prompt": [[id("Hello")], [id("world"), id("foo")]], "echo": true, "n": 2,
        "prompt_logprobs": 1});
    let (status, text) =
        fake_engine::post_text(fake_engine::state(engine.clone()), PATH, body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        text,
        concat!(
            r#"{"id":"ID","object":"text_completion","created":0,"model":"test-model","choices":["#,
            r#"{"index":0,"text":"Hello foo","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null},"#,
            r#"{"index":1,"text":"Hello bar","logprobs":null,"finish_reason":"stop","stop_reason":1,"prompt_logprobs":null},"#,
            r#"{"index":2,"text":"world foo baz","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":[null,{"7":{"logprob":-2.0,"rank":3,"decoded_token":"foo"},"8":{"logprob":-0.5,"rank":1,"decoded_token":"bar"}}]},"#,
            r#"{"index":3,"text":"world foo","logprobs":null,"finish_reason":"abort","stop_reason":null,"prompt_logprobs":[null,{"7":{"logprob":-2.0,"rank":3,"decoded_token":"foo"},"8":{"logprob":-0.5,"rank":1,"decoded_token":"bar"}}]}],"#,
            r#""usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":null}}"#,
        )
    );
    let ids = engine.request_ids();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0].strip_suffix("-0"), ids[1].strip_suffix("-1"));
}

/// The engine's one response to "Hello world" + 1 token, with the prompt's logprobs.
fn echo_answer() -> EngineStep {
    let mut first = first_response(
        2,
        0,
        vec![with_logprobs(
            last_delta(0, &["foo"], Length, None),
            "foo",
            -0.25,
            &[("foo", -0.25)],
        )],
        true,
    );
    first.prompt.as_mut().unwrap().prompt_logprobs = vec![
        PositionLogprobs {
            token: Some(token_lp("Hello", f32::NAN, 0)),
            top: vec![],
        },
        PositionLogprobs {
            token: Some(token_lp("world", -1.5, 2)),
            top: vec![token_lp("foo", -0.5, 1)],
        },
    ];
    first
}

/// lm-eval's loglikelihood request: echo + logprobs + max_tokens 1 on a token-id prompt. The
/// prompt's tokens come first in the logprobs (the first without one), then the generated.
#[tokio::test]
async fn echo_with_logprobs_lists_the_prompt_tokens_first() {
    let first = echo_answer();
    let engine = FakeEngine::new(vec![Script::new(vec![first])]);
    let body = json!({"prompt": [[id("Hello"), id("world")]], "echo": true, "logprobs": 1,
        "max_tokens": 1, "temperature": 0, "seed": 1234});
    let (status, text) =
        fake_engine::post_text(fake_engine::state(engine.clone()), PATH, body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        text,
        concat!(
            r#"{"id":"ID","object":"text_completion","created":0,"model":"test-model","choices":["#,
            r#"{"index":0,"text":"Hello world foo","logprobs":{"text_offset":[0,5,10],"#,
            r#""token_logprobs":[null,-1.5,-0.25],"tokens":["Hello","world","foo"],"#,
            r#""top_logprobs":[null,{"foo":-0.5,"world":-1.5},{"foo":-0.25}]},"#,
            r#""finish_reason":"length","stop_reason":null,"#,
            r#""prompt_logprobs":[null,{"6":{"logprob":-1.5,"rank":2,"decoded_token":"world"},"7":{"logprob":-0.5,"rank":1,"decoded_token":"foo"}}]}],"#,
            r#""usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3,"prompt_tokens_details":null}}"#,
        )
    );
    // The engine was asked for the prompt's logprobs, as many alternatives as `logprobs`.
    let sent = engine.requests.lock().unwrap()[0].sampling.clone();
    assert_eq!((sent.logprobs, sent.prompt_logprobs), (Some(1), Some(1)));
}

/// Streamed, the echo waits for the prompt's logprobs; the generated tokens' offsets follow.
#[tokio::test]
async fn streamed_echo_with_logprobs_carries_the_prompt_logprobs() {
    let first = echo_answer();
    let engine = FakeEngine::new(vec![Script::new(vec![first])]);
    let body = json!({"prompt": [id("Hello"), id("world")], "echo": true, "logprobs": 1,
        "max_tokens": 1, "stream": true});
    let (status, text) = fake_engine::post_text(fake_engine::state(engine), PATH, body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        text,
        sse(&[
            concat!(
                r#""choices":[{"index":0,"text":"Hello world","logprobs":{"text_offset":[0,5],"#,
                r#""token_logprobs":[null,-1.5],"tokens":["Hello","world"],"#,
                r#""top_logprobs":[null,{"foo":-0.5,"world":-1.5}]},"finish_reason":null,"stop_reason":null}]"#,
            ),
            concat!(
                r#""choices":[{"index":0,"text":" foo","logprobs":{"text_offset":[10],"#,
                r#""token_logprobs":[-0.25],"tokens":["foo"],"top_logprobs":[{"foo":-0.25}]},"#,
                r#""finish_reason":"length","stop_reason":null}]"#,
            ),
        ])
    );
}
