//! Server-sent events out over HTTP: the core's frames (`hybridllm_api::sse`) as a streamed
//! body, an error chunk (`data: {"error": {...}}`) if generation fails mid-stream, then
//! `data: [DONE]\n\n`.
use crate::errors::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
pub use hybridllm_api::sse::{frame, DONE};
use std::convert::Infallible;

/// Wraps a stream of framed chunks (see `frame`); the stream (and so the engine call) lives
/// as long as the body. An error (the engine's, or the drain deadline's: generate.rs) ends
/// its request's events; `[DONE]` comes after the last request's.
pub fn sse_response<S>(chunks: S) -> Response
where
    S: Stream<Item = Result<Bytes, ApiError>> + Send + 'static,
{
    let body = async_stream::stream! {
        let mut chunks = std::pin::pin!(chunks);
        while let Some(c) = chunks.next().await {
            match c {
                Ok(b) => yield b,
                Err(e) => {
                    tracing::warn!("stream failed: {e}");
                    yield frame(&e.body());
                }
            }
        }
        yield Bytes::from_static(DONE);
    };
    event_stream(Body::from_stream(body.map(Ok::<_, Infallible>)))
}

/// Framed events as they come, with no `[DONE]` (the Responses API ends with its own event;
/// the stream turns errors into events itself).
pub fn sse_events_response<S>(events: S) -> Response
where
    S: Stream<Item = Bytes> + Send + 'static,
{
    event_stream(Body::from_stream(events.map(Ok::<_, Infallible>)))
}

fn event_stream(body: Body) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn framing() {
        let s = futures_util::stream::iter(vec![
            Ok(frame(&serde_json::json!({"a": 1}))),
            Err(ApiError::Internal("boom".into())),
        ]);
        let resp = sse_response(s);
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "text/event-stream; charset=utf-8"
        );
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "data: {\"a\":1}\n\ndata: {\"error\":{\"message\":\"boom\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}\n\ndata: [DONE]\n\n"
        );
    }
}
