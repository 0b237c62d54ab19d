//! Routing on the shared call without a gRPC server: `Call` is driven directly, as the
//! call's task would drive it with the worker's messages.
use super::*;
use futures_util::FutureExt;
use tonic::Code;

fn resp(id: &str, token: u32, finished: bool) -> pb::GenerateResponse {
    pb::GenerateResponse {
        request_id: id.into(),
        sequences: vec![pb::SequenceDelta {
            token_ids: vec![token],
            ..Default::default()
        }],
        finished,
        ..Default::default()
    }
}

fn batch(responses: Vec<pb::GenerateResponse>) -> pb::GenerateStreamResponse {
    pb::GenerateStreamResponse { responses }
}

/// What the stream has delivered so far, without waiting: tokens, "error <the engine error>",
/// "end", or nothing more if it would wait.
fn drain(stream: &mut RequestStream) -> Vec<String> {
    let mut out = vec![];
    while let Some(item) = stream.next().now_or_never() {
        match item {
            Some(Ok(r)) => out.push(format!("token {}", r.sequences[0].token_ids[0])),
            Some(Err(e)) => out.push(format!("error {e:?}")),
            None => {
                out.push("end".into());
                break;
            }
        }
    }
    out
}

fn generate_req(id: &str) -> pb::GenerateRequest {
    pb::GenerateRequest {
        request_id: id.into(),
        prompt_token_ids: vec![1, 2],
        sampling_params: None,
        beam_search: None,
        priority: 0,
    }
}

#[test]
fn interleaved_responses_reach_their_own_request() {
    let (call, mut inbox) = Call::new();
    let mut a = call.route("a").unwrap();
    let mut b = call.route("b").unwrap();
    call.dispatch(batch(vec![
        resp("a", 10, false),
        resp("b", 20, false),
        resp("gone", 99, false), // aborted earlier here: dropped silently
        resp("a", 11, true),
    ]));
    assert_eq!(drain(&mut a), ["token 10", "token 11", "end"]);
    assert_eq!(drain(&mut b), ["token 20"]);
    call.dispatch(batch(vec![resp("b", 21, true)]));
    assert_eq!(drain(&mut b), ["token 21", "end"]);
    // Finished requests are not aborted when dropped.
    drop((a, b));
    assert!(inbox.try_recv().is_err());
    assert!(call.routes.lock().unwrap().as_ref().unwrap().is_empty());
}

#[test]
fn dropping_a_running_request_aborts_it_once() {
    let (call, mut inbox) = Call::new();
    let mut a = call.route("a").unwrap();
    call.dispatch(batch(vec![resp("a", 10, false)]));
    assert_eq!(drain(&mut a), ["token 10"]);
    drop(a);
    assert_eq!(inbox.try_recv().unwrap(), Outgoing::Abort("a".into()));
    assert!(inbox.try_recv().is_err());
    // What the worker had already produced for it goes nowhere.
    call.dispatch(batch(vec![resp("a", 11, true)]));
    assert!(call.routes.lock().unwrap().as_ref().unwrap().is_empty());
}

#[test]
fn a_refused_request_is_an_error_with_the_workers_status() {
    let (call, _inbox) = Call::new();
    let mut a = call.route("a").unwrap();
    let mut b = call.route("b").unwrap();
    let refusal = |id: &str, param: &str| pb::GenerateResponse {
        request_id: id.into(),
        rejected: Some(pb::RequestError {
            code: Code::InvalidArgument as i32,
            message: "prompt too long".into(),
            param: param.into(),
        }),
        finished: true,
        ..Default::default()
    };
    call.dispatch(batch(vec![refusal("a", ""), refusal("b", "min_tokens")]));
    assert_eq!(
        drain(&mut a),
        [
            r#"error Invalid { message: "prompt too long", param: None }"#,
            "end"
        ]
    );
    assert_eq!(
        drain(&mut b),
        [
            r#"error Invalid { message: "prompt too long", param: Some("min_tokens") }"#,
            "end"
        ]
    );
}

#[test]
fn the_end_of_the_call_fails_every_running_request() {
    let (call, mut inbox) = Call::new();
    let mut a = call.route("a").unwrap();
    let mut b = call.route("b").unwrap();
    call.fail(Status::unavailable("worker restarted"));
    let failed = [r#"error Unavailable("worker restarted")"#, "end"];
    assert_eq!(drain(&mut a), failed);
    assert_eq!(drain(&mut b), failed);
    // An ended call takes no new requests and sends no aborts.
    assert!(call.route("c").is_none());
    drop((a, b));
    assert!(inbox.try_recv().is_err());
}

#[tokio::test]
async fn queued_requests_and_aborts_go_out_in_one_message() {
    let (call, mut inbox) = Call::new();
    call.outbox
        .send(Outgoing::Generate(Box::new(generate_req("a"))))
        .unwrap();
    call.outbox.send(Outgoing::Abort("x".into())).unwrap();
    call.outbox
        .send(Outgoing::Generate(Box::new(generate_req("b"))))
        .unwrap();
    let msg = next_message(&mut inbox).await.unwrap();
    assert_eq!(msg.generate, [generate_req("a"), generate_req("b")]);
    assert_eq!(msg.abort, ["x"]);
    call.outbox.send(Outgoing::Abort("y".into())).unwrap();
    let msg = next_message(&mut inbox).await.unwrap();
    assert!(msg.generate.is_empty());
    assert_eq!(msg.abort, ["y"]);
    // The mux is gone: the request stream of the call ends.
    drop(call);
    assert!(next_message(&mut inbox).await.is_none());
}

#[tokio::test]
async fn without_a_worker_a_request_fails_unavailable() {
    // Nothing listens on port 1: the call fails to open and fails its requests.
    let client = crate::engine_client::connect("http://127.0.0.1:1").unwrap();
    let mux = EngineMux::new(client);
    let mut stream = mux.submit(generate_req("a"));
    let err = stream.next().await.unwrap().unwrap_err();
    assert!(matches!(err, EngineError::Unavailable(_)), "{err:?}");
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn embed_is_answered_by_one_response_and_dropping_it_early_aborts() {
    let mux = EngineMux::new(crate::engine_client::connect("http://127.0.0.1:1").unwrap());
    let (call, mut inbox) = Call::new();
    *mux.call.lock().unwrap() = Some(call.clone());
    let req = EmbedRequest {
        request_id: "e".into(),
        inputs: vec![vec![1, 2]],
        normalize: None,
    };
    let answer = mux.embed(req.clone());
    let msg = next_message(&mut inbox).await.unwrap();
    let sent = pb::EmbedRequest {
        request_id: "e".into(),
        inputs: vec![pb::EmbedInput {
            token_ids: vec![1, 2],
        }],
        normalize: None,
    };
    assert_eq!(msg.embed, [sent]);
    let vector = pb::Embedding {
        values: vec![0.5, 1.0],
    };
    call.dispatch(batch(vec![pb::GenerateResponse {
        request_id: "e".into(),
        finished: true,
        embeddings: vec![vector],
        ..Default::default()
    }]));
    assert_eq!(answer.await.unwrap(), [vec![0.5, 1.0]]);
    // Answered: nothing to abort. Dropped before its answer: aborted once.
    assert!(inbox.try_recv().is_err());
    drop(mux.embed(EmbedRequest {
        request_id: "f".into(),
        ..req
    }));
    let msg = next_message(&mut inbox).await.unwrap();
    assert_eq!((msg.embed.len(), msg.abort), (1, vec!["f".to_string()]));
    assert!(call.routes.lock().unwrap().as_ref().unwrap().is_empty());
}

#[test]
fn an_unread_stream_is_aborted_after_its_buffer() {
    let (call, mut inbox) = Call::new();
    let mut a = call.route("a").unwrap();
    let mut b = call.route("b").unwrap();
    let steps = STREAM_BUFFER as u32 + 5;
    for t in 0..steps {
        // b is read every step, a never.
        call.dispatch(batch(vec![resp("a", t, false), resp("b", t, false)]));
        assert_eq!(drain(&mut b), [format!("token {t}")]);
    }
    // a: aborted in the worker once, when its buffer was full; nothing buffered beyond it.
    assert_eq!(inbox.try_recv().unwrap(), Outgoing::Abort("a".into()));
    assert!(inbox.try_recv().is_err());
    let got = drain(&mut a);
    assert_eq!(got.len(), STREAM_BUFFER + 2);
    assert_eq!(
        got[STREAM_BUFFER - 1],
        format!("token {}", STREAM_BUFFER - 1)
    );
    assert_eq!(
        got[STREAM_BUFFER..],
        [
            format!(
                "error Cancelled(\"request aborted: its client read none of its last \
                 {STREAM_BUFFER} responses\")"
            ),
            "end".to_string()
        ]
    );
    drop(a); // already aborted: no second abort
    assert!(inbox.try_recv().is_err());
    // b carries on, and its final response still fits after a full buffer.
    for t in 0..STREAM_BUFFER as u32 {
        call.dispatch(batch(vec![resp("b", t, false)]));
    }
    call.dispatch(batch(vec![resp("b", 7, true)]));
    let got = drain(&mut b);
    assert_eq!(got.len(), STREAM_BUFFER + 2);
    assert_eq!(got[STREAM_BUFFER..], ["token 7", "end"]);
}
