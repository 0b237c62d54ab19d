//! The request's life against a scripted fake engine: what is sent, how its end or failure
//! reaches the consumer, and the abort when the consumer stops reading early.
use super::*;
use crate::fake_engine::{self, delta, first_response, last_delta, response, show_event};
use crate::fake_engine::{FakeEngine, Script};
use hybridllm_api::engine_io::{EngineError, EngineFinish::Length};

fn request(params: serde_json::Value) -> GenRequest {
    GenRequest {
        request_id: "req-1".into(),
        prompt_ids: fake_engine::prompt_ids(),
        params: fake_engine::params(params),
        max_tokens: 16,
    }
}

/// Runs the request to its end: every event, `error <message>` for an error.
async fn run(engine: &Arc<FakeEngine>, req: GenRequest) -> Vec<String> {
    let state = fake_engine::state(engine.clone());
    let events = match generate(state, req).await {
        Ok(events) => events,
        Err(e) => return vec![format!("start error {e}")],
    };
    let lines = events.map(|ev| match ev {
        Ok(ev) => show_event(&ev),
        Err(e) => format!("error {e}"),
    });
    lines.collect().await
}

#[tokio::test]
async fn the_engine_gets_the_prompt_and_its_responses_become_events() {
    let engine = FakeEngine::new(vec![Script::new(vec![
        first_response(3, 2, vec![delta(0, &["foo"])], false),
        response(vec![last_delta(0, &["bar"], Length, None)], true),
    ])]);
    let out = run(&engine, request(serde_json::json!({"temperature": 0}))).await;
    let expected = ["prompt 3 2", r#"0 " foo" 1"#, r#"0 " bar" 1 length null"#];
    assert_eq!(out, expected);
    // The prompt ids and the sampling, with max_tokens filled in.
    let sent = engine.requests.lock().unwrap()[0].clone();
    assert_eq!(sent.request_id, "req-1");
    assert_eq!(sent.prompt_ids, fake_engine::prompt_ids());
    let sampling = sent.sampling;
    assert_eq!(sampling.max_tokens, Some(16));
    assert_eq!(sampling.temperature, Some(0.0));
    assert!(engine.aborted().is_empty());
}

#[tokio::test]
async fn a_stop_string_match_aborts_the_engine_request() {
    let engine = FakeEngine::new(vec![Script::new(vec![
        first_response(3, 0, vec![delta(0, &["foo", "bar"])], false),
        response(vec![delta(0, &["baz"])], false),
        response(vec![last_delta(0, &["foo"], Length, None)], true),
    ])]);
    let out = run(&engine, request(serde_json::json!({"stop": "r b"}))).await;
    let expected = ["prompt 3 0", r#"0 " foo ba" 2"#, r#"0 "" 1 stop "r b""#];
    assert_eq!(out, expected);
    // The engine was still generating: dropping its stream aborted the request.
    assert_eq!(engine.aborted(), ["req-1"]);
}

#[tokio::test]
async fn a_refused_request_fails_before_the_stream_starts() {
    let engine = FakeEngine::new(vec![Script {
        responses: vec![Err(EngineError::Invalid {
            message: "prompt too long".into(),
            param: None,
        })],
        hang: false,
    }]);
    let state = fake_engine::state(engine.clone());
    let err = generate(state, request(serde_json::json!({}))).await.err();
    let err = err.expect("an error");
    assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST);
    assert_eq!(err.to_string(), "prompt too long");
}

#[tokio::test]
async fn an_engine_stream_that_ends_early_is_an_error() {
    let engine = FakeEngine::new(vec![Script::new(vec![first_response(
        3,
        0,
        vec![delta(0, &["foo"])],
        false,
    )])]);
    let out = run(&engine, request(serde_json::json!({}))).await;
    let expected = [
        "prompt 3 0",
        r#"0 " foo" 1"#,
        "error the engine stream ended early",
    ];
    assert_eq!(out, expected);
}

#[tokio::test]
async fn an_engine_failure_mid_request_is_an_error() {
    let engine = FakeEngine::new(vec![Script {
        responses: vec![
            Ok(first_response(3, 0, vec![delta(0, &["foo"])], false)),
            Err(EngineError::Unavailable("worker restarted".into())),
        ],
        hang: false,
    }]);
    let out = run(&engine, request(serde_json::json!({}))).await;
    let expected = [
        "prompt 3 0",
        r#"0 " foo" 1"#,
        "error The engine is unavailable: worker restarted",
    ];
    assert_eq!(out, expected);
}

#[tokio::test]
async fn dropping_the_events_aborts_the_engine_request() {
    let first = first_response(3, 0, vec![delta(0, &["foo"])], false);
    let engine = FakeEngine::new(vec![Script::new(vec![first]).then_hang()]);
    let state = fake_engine::state(engine.clone());
    let events = generate(state.clone(), request(serde_json::json!({})));
    let mut events = Box::pin(events.await.unwrap());
    assert_eq!(state.metrics.in_flight.get(), 1);
    let mut next = async || show_event(&events.next().await.unwrap().unwrap());
    assert_eq!(next().await, "prompt 3 0");
    assert_eq!(next().await, r#"0 " foo" 1"#);
    assert!(engine.aborted().is_empty());
    drop(events);
    assert_eq!(engine.aborted(), ["req-1"]);
    assert_eq!(state.metrics.in_flight.get(), 0);
    assert_eq!(state.metrics.e2e.get_sample_count(), 1);
}

#[tokio::test]
async fn generate_many_tags_events_with_their_prompt() {
    let running = first_response(3, 0, vec![delta(0, &["foo"])], false);
    let done = first_response(3, 1, vec![last_delta(0, &["bar"], Length, None)], true);
    let engine = FakeEngine::new(vec![
        Script::new(vec![running]).then_hang(),
        Script::new(vec![done]),
    ]);
    let state = fake_engine::state(engine.clone());
    let mut reqs = vec![
        request(serde_json::json!({})),
        request(serde_json::json!({})),
    ];
    reqs[1].request_id = "req-2".into();
    let mut events = Box::pin(generate_many(state, reqs).await.unwrap());
    let mut out = vec![];
    for _ in 0..4 {
        let (p, ev) = events.next().await.unwrap().unwrap();
        out.push(format!("{p}: {}", show_event(&ev)));
    }
    // Prompts interleave in no fixed order; each prompt's own events stay in order.
    out.sort_by_key(|line| line.starts_with('1'));
    let expected = [
        "0: prompt 3 0",
        r#"0: 0 " foo" 1"#,
        "1: prompt 3 1",
        r#"1: 0 " bar" 1 length null"#,
    ];
    assert_eq!(out, expected);
    assert_eq!(engine.request_ids(), ["req-1", "req-2"]);
    // Prompt 0 still runs: dropping the merged stream aborts it, not the finished one.
    drop(events);
    assert_eq!(engine.aborted(), ["req-1"]);
}
