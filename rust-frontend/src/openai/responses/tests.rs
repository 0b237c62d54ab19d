//! /v1/responses through the router against a scripted fake engine: the response object,
//! the named events in order, the store (retrieve, continue, delete) and the refusals.
use crate::fake_engine::{
    self, delta, first_response, id, last_delta, response, FakeEngine, Script,
};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use hybridllm_api::engine_io::EngineFinish::*;
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

const PATH: &str = "/v1/responses";

/// " foo bar" then EOS.
fn foo_bar() -> Script {
    Script::new(vec![
        first_response(3, 0, vec![delta(0, &["foo"])], false),
        response(
            vec![last_delta(
                0,
                &["bar", "<eos>"],
                Stop,
                Some(fake_engine::EOS),
            )],
            true,
        ),
    ])
}

async fn call(
    state: Arc<crate::state::AppState>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let resp = crate::server::router(state).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_response_object_with_one_message() {
    let engine = FakeEngine::new(vec![foo_bar()]);
    let state = fake_engine::state(engine.clone());
    let body = json!({"input": "Hello", "instructions": "Hello world", "metadata": {"k": "v"}});
    let (status, r) = call(state, "POST", PATH, Some(body)).await;
    assert_eq!(status, StatusCode::OK);
    let rid = r["id"].as_str().unwrap();
    assert!(rid.starts_with("resp_") && rid.len() == 37, "{rid}");
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["incomplete_details"], Value::Null);
    assert_eq!(r["instructions"], "Hello world");
    assert_eq!(r["metadata"], json!({"k": "v"}));
    assert_eq!(r["store"], true);
    let msg = &r["output"][0];
    assert!(msg["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(msg["role"], "assistant");
    assert_eq!(
        msg["content"],
        json!([{"type": "output_text", "text": " foo bar", "annotations": []}])
    );
    assert_eq!(
        r["usage"],
        json!({"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": 6})
    );
    // instructions are the system message: "system: Hello world user: Hello assistant:".
    let sent = engine.requests.lock().unwrap()[0].clone();
    let unk = id("[UNK]");
    assert_eq!(
        sent.prompt_ids,
        [
            unk,
            id("Hello"),
            id("world"),
            id("user:"),
            id("Hello"),
            id("assistant:")
        ]
    );
    assert_eq!(sent.request_id, r["id"]);
}

#[tokio::test]
async fn streamed_events_in_order() {
    let engine = FakeEngine::new(vec![foo_bar()]);
    let body = json!({"input": "Hello", "stream": true});
    let resp = fake_engine::post(fake_engine::state(engine), PATH, body).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(!text.contains("[DONE]"));
    let events: Vec<(String, Value)> = text
        .trim_end()
        .split("\n\n")
        .map(|f| {
            let (ev, data) = f.split_once('\n').unwrap();
            let name = ev.strip_prefix("event: ").unwrap().to_string();
            (
                name,
                serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], i);
    }
    assert_eq!(events[0].1["response"]["status"], "in_progress");
    assert_eq!(events[4].1["delta"], " foo");
    assert_eq!(events[5].1["delta"], " bar");
    assert_eq!(events[6].1["text"], " foo bar");
    let done = &events[9].1["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], " foo bar");
    assert_eq!(done["usage"]["output_tokens"], 3);
}

#[tokio::test]
async fn max_output_tokens_makes_it_incomplete() {
    let engine = FakeEngine::new(vec![Script::new(vec![first_response(
        3,
        0,
        vec![last_delta(0, &["foo"], Length, None)],
        true,
    )])]);
    let body = json!({"input": "Hello", "max_output_tokens": 1});
    let (_, r) = call(fake_engine::state(engine.clone()), "POST", PATH, Some(body)).await;
    assert_eq!(r["status"], "incomplete");
    assert_eq!(
        r["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(r["output"][0]["status"], "incomplete");
    let sent = engine.requests.lock().unwrap()[0].clone();
    assert_eq!(sent.sampling.max_tokens, Some(1));
}

#[tokio::test]
async fn stored_responses_continue_and_delete() {
    let engine = FakeEngine::new(vec![foo_bar(), foo_bar()]);
    let state = fake_engine::state(engine.clone());
    let (_, first) = call(
        state.clone(),
        "POST",
        PATH,
        Some(json!({"input": "Hello", "instructions": "baz"})),
    )
    .await;
    let id1 = first["id"].as_str().unwrap().to_string();
    let (status, got) = call(state.clone(), "GET", &format!("{PATH}/{id1}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, first);
    let (_, items) = call(
        state.clone(),
        "GET",
        &format!("{PATH}/{id1}/input_items"),
        None,
    )
    .await;
    assert_eq!(items["object"], "list");
    assert_eq!(items["data"][0]["content"][0]["text"], "Hello");
    assert_eq!(items["has_more"], false);
    // The second turn's prompt holds the first turn but not its instructions.
    let body = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "world"}]}],
                      "previous_response_id": id1});
    let (status, _) = call(state.clone(), "POST", PATH, Some(body)).await;
    assert_eq!(status, StatusCode::OK);
    let sent = engine.requests.lock().unwrap()[1].clone();
    assert_eq!(
        sent.prompt_ids,
        [
            id("user:"),
            id("Hello"),
            id("assistant:"),
            id("foo"),
            id("bar"),
            id("user:"),
            id("world"),
            id("assistant:")
        ]
    );
    let (status, del) = call(state.clone(), "DELETE", &format!("{PATH}/{id1}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        del,
        json!({"id": id1, "object": "response", "deleted": true})
    );
    let (status, err) = call(state.clone(), "GET", &format!("{PATH}/{id1}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        err["error"]["message"],
        format!("Response with id '{id1}' not found.")
    );
    let body = json!({"input": "x", "previous_response_id": id1});
    let (status, _) = call(state, "POST", PATH, Some(body)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn store_false_is_not_kept() {
    let engine = FakeEngine::new(vec![foo_bar()]);
    let state = fake_engine::state(engine);
    let body = json!({"input": "Hello", "store": false});
    let (_, r) = call(state.clone(), "POST", PATH, Some(body)).await;
    assert_eq!(r["store"], false);
    let rid = r["id"].as_str().unwrap();
    let (status, _) = call(state, "GET", &format!("{PATH}/{rid}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn unsupported_fields_are_refused_by_name() {
    let cases = [
        (json!({"background": true, "store": false}), "background"),
        (json!({"background": true, "stream": true}), "stream"),
        (json!({"tools": [{"type": "web_search"}]}), "tools[0].type"),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (json!({"reasoning": {"effort": "low"}}), "reasoning"),
        // A format without its schema (the served forms: tests/conformance/test_structured.py).
        (
            json!({"text": {"format": {"type": "json_schema"}}}),
            "text.format",
        ),
        (
            json!({"include": ["reasoning.encrypted_content"]}),
            "include",
        ),
        (json!({"truncation": "middle"}), "truncation"),
        (json!({"max_output_tokens": 0}), "max_output_tokens"),
        (json!({"temperature": 3}), "temperature"),
        (json!({"input": [{"type": "function_call"}]}), "input"),
        (json!({"input": []}), "input"),
    ];
    for (extra, param) in cases {
        let engine = FakeEngine::new(vec![]);
        let mut body = json!({"input": "Hello"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, err) =
            call(fake_engine::state(engine.clone()), "POST", PATH, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{param}");
        assert_eq!(err["error"]["param"], param, "{err}");
        assert!(engine.requests.lock().unwrap().is_empty());
    }
    // The plain forms are accepted.
    let engine = FakeEngine::new(vec![foo_bar()]);
    let body = json!({"input": "Hello", "tools": [], "tool_choice": "auto", "reasoning": null,
                      "text": {"format": {"type": "text"}}, "include": [], "background": false});
    let (status, _) = call(fake_engine::state(engine), "POST", PATH, Some(body)).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn background_runs_in_its_task_and_cannot_be_cancelled_once_done() {
    let engine = FakeEngine::new(vec![foo_bar()]);
    let state = fake_engine::state(engine);
    let body = json!({"input": "Hello", "background": true});
    let (status, q) = call(state.clone(), "POST", PATH, Some(body)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&q["status"], &q["background"], &q["output"], &q["usage"]),
        (&json!("queued"), &json!(true), &json!([]), &Value::Null)
    );
    let rid = q["id"].as_str().unwrap().to_string();
    let mut done = Value::Null;
    for _ in 0..200 {
        let (_, got) = call(state.clone(), "GET", &format!("{PATH}/{rid}"), None).await;
        if got["status"] == "completed" {
            done = got;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(done["output"][0]["content"][0]["text"], " foo bar");
    assert!(state.background.lock().unwrap().is_empty());
    let (status, err) = call(state.clone(), "POST", &format!("{PATH}/{rid}/cancel"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        err["error"],
        json!({"message": "Cannot cancel a synchronous response.", "type": "BadRequestError",
               "param": "response_id", "code": 400})
    );
    let (status, _) = call(state, "POST", &format!("{PATH}/resp_x/cancel"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
