//! Token deltas to text events, response by response, as the worker would send them.
use super::*;
use crate::fake_engine::{
    self, delta, first_response, last_delta, response, show_event, FakeEngine,
};
use hybridllm_api::engine_io::{
    EngineFinish::{Abort, Error, Length, Stop},
    EngineStep,
};

// The tests are async only because the test state's (unused) gRPC client needs a runtime.

/// Feeds the responses in order and lists the events; `all finished` where every sequence
/// has finished (the request ends there), `error <message>` where one fails.
fn run(params: serde_json::Value, responses: Vec<EngineStep>) -> Vec<String> {
    let state = fake_engine::state(FakeEngine::new(vec![]));
    let params = fake_engine::params(params);
    let mut deltas = EngineEvents::new(state, &fake_engine::prompt_ids(), &params, Instant::now());
    let mut out = vec![];
    for resp in responses {
        match deltas.process(resp) {
            Ok(events) => out.extend(events.iter().map(show_event)),
            Err(e) => {
                out.push(format!("error {e}"));
                break;
            }
        }
        if deltas.all_finished() {
            out.push("all finished".into());
            break;
        }
    }
    out
}

#[tokio::test]
async fn token_deltas_become_text_deltas() {
    let out = run(
        serde_json::json!({}),
        vec![
            first_response(3, 2, vec![delta(0, &["foo"])], false),
            response(vec![delta(0, &["bar", "baz"])], false),
            response(vec![last_delta(0, &["foo"], Length, None)], true),
        ],
    );
    let expected = [
        "prompt 3 2",
        r#"0 " foo" 1"#,
        r#"0 " bar baz" 2"#,
        r#"0 " foo" 1 length null"#,
        "all finished",
    ];
    assert_eq!(out, expected);
}

#[tokio::test]
async fn a_stop_string_split_across_deltas_is_held_back_then_cut() {
    let out = run(
        serde_json::json!({"stop": ["r b", "nothing"]}),
        vec![
            first_response(3, 0, vec![delta(0, &["foo"])], false),
            response(vec![delta(0, &["bar"])], false),
            response(vec![delta(0, &["baz", "foo"])], false),
            response(vec![last_delta(0, &["foo"], Length, None)], true),
        ],
    );
    // " bar" ends with "r", which may start "r b": held back until the next delta decides;
    // the match ends the sequence (the engine's later output is never read).
    let expected = [
        "prompt 3 0",
        r#"0 " foo" 1"#,
        r#"0 " ba" 1"#,
        r#"0 "" 2 stop "r b""#,
        "all finished",
    ];
    assert_eq!(out, expected);
}

#[tokio::test]
async fn include_stop_str_in_output_keeps_the_match() {
    let out = run(
        serde_json::json!({"stop": "r b", "include_stop_str_in_output": true}),
        vec![
            first_response(3, 0, vec![delta(0, &["foo", "bar"])], false),
            response(vec![delta(0, &["baz"])], false),
        ],
    );
    let expected = [
        "prompt 3 0",
        r#"0 " foo ba" 2"#,
        r#"0 "r b" 1 stop "r b""#,
        "all finished",
    ];
    assert_eq!(out, expected);
}

#[tokio::test]
async fn held_back_text_is_released_when_the_sequence_ends_otherwise() {
    let out = run(
        serde_json::json!({"stop": "r b"}),
        vec![
            first_response(3, 0, vec![delta(0, &["foo", "bar"])], false),
            response(vec![last_delta(0, &[], Length, None)], true),
        ],
    );
    let expected = [
        "prompt 3 0",
        r#"0 " foo ba" 2"#,
        r#"0 "r" 0 length null"#,
        "all finished",
    ];
    assert_eq!(out, expected);
}

#[tokio::test]
async fn finish_reasons_from_the_engine_and_their_metrics() {
    // EOS: a stop without stop_reason; a stop token: its id is the stop_reason. Neither token
    // is text, even with special tokens kept.
    let state = fake_engine::state(FakeEngine::new(vec![]));
    let params = fake_engine::params(serde_json::json!({"n": 4, "skip_special_tokens": false}));
    let mut deltas = EngineEvents::new(state.clone(), &[], &params, Instant::now());
    let mut first = first_response(
        3,
        0,
        vec![
            last_delta(0, &["foo", "<eos>"], Stop, Some(fake_engine::EOS)),
            last_delta(1, &["bar", "<stop>"], Stop, Some(fake_engine::STOP_TOKEN)),
            last_delta(2, &["baz"], Abort, None),
            last_delta(3, &["foo", "bar"], Length, None),
        ],
        true,
    );
    first.prompt.as_mut().unwrap().queue_time_s = 0.25;
    let events = deltas.process(first).unwrap();
    let out: Vec<String> = events.iter().map(show_event).collect();
    let expected = [
        "prompt 3 0",
        r#"0 "foo" 2 stop null"#,
        r#"1 "bar" 2 stop 1"#,
        r#"2 "baz" 1 abort null"#,
        r#"3 "foo bar" 2 length null"#,
    ];
    assert_eq!(out, expected);
    assert!(deltas.all_finished());
    let count = |reason: &str| {
        let counter = state.metrics.request_success.with_label_values(&[reason]);
        counter.get()
    };
    let counts = [count("stop"), count("length"), count("abort")];
    assert_eq!(counts, [2, 1, 1]);
    assert_eq!(state.metrics.ttft.get_sample_count(), 1);
    // the engine's queue time, once per request
    let queue = &state.metrics.queue_time;
    assert_eq!(
        (queue.get_sample_count(), queue.get_sample_sum()),
        (1, 0.25)
    );
}

#[tokio::test]
async fn an_engine_error_ends_the_request_with_its_message() {
    let error = EngineStep {
        error: Some("CUDA out of memory".into()),
        ..response(vec![last_delta(0, &[], Error, None)], true)
    };
    let out = run(
        serde_json::json!({}),
        vec![first_response(3, 0, vec![delta(0, &["foo"])], false), error],
    );
    let expected = ["prompt 3 0", r#"0 " foo" 1"#, "error CUDA out of memory"];
    assert_eq!(out, expected);
}

#[tokio::test]
async fn a_grammar_dead_end_is_the_requests_error() {
    let error = EngineStep {
        error: Some("structured_outputs: the output left the grammar".into()),
        error_param: Some("structured_outputs".into()),
        ..response(vec![last_delta(0, &[], Error, None)], true)
    };
    let state = fake_engine::state(FakeEngine::new(vec![]));
    let params = fake_engine::params(serde_json::json!({}));
    let mut deltas = EngineEvents::new(state, &fake_engine::prompt_ids(), &params, Instant::now());
    deltas.process(first_response(3, 0, vec![], false)).unwrap();
    let e = deltas.process(error).unwrap_err();
    assert_eq!(e.body()["error"]["code"], 400);
    assert_eq!(e.body()["error"]["param"], "structured_outputs");
}

#[tokio::test]
async fn n_sequences_interleave_and_each_finishes_on_its_own() {
    let out = run(
        serde_json::json!({"n": 2}),
        vec![
            first_response(3, 0, vec![delta(0, &["foo"]), delta(1, &["bar"])], false),
            response(vec![delta(1, &["baz"])], false),
            response(
                vec![last_delta(0, &["bar"], Length, None), delta(1, &["foo"])],
                false,
            ),
            // Sequence 0 has finished: anything more for it is ignored.
            response(
                vec![delta(0, &["baz"]), last_delta(1, &[], Length, None)],
                true,
            ),
        ],
    );
    let expected = [
        "prompt 3 0",
        r#"0 " foo" 1"#,
        r#"1 " bar" 1"#,
        r#"1 " baz" 1"#,
        r#"0 " bar" 1 length null"#,
        r#"1 " foo" 1"#,
        r#"1 "" 0 length null"#,
        "all finished",
    ];
    assert_eq!(out, expected);
}

#[tokio::test]
async fn an_unknown_sequence_index_is_an_internal_error() {
    let out = run(
        serde_json::json!({}),
        vec![first_response(3, 0, vec![delta(5, &["foo"])], false)],
    );
    // The whole response is refused, its prompt facts included.
    assert_eq!(out, ["error engine sent unknown sequence index 5"]);
}
