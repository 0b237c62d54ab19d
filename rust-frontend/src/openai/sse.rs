//! Server-sent events as OpenAI clients parse them: `data: <json>\n\n` per chunk, an error
//! chunk (`data: {"error": {...}}`) if generation fails mid-stream, then `data: [DONE]\n\n`.
use crate::errors::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::Serialize;
use serde_json::Value;
use std::convert::Infallible;

/// One SSE event: `data: <json>\n\n`, serialized straight into the frame's buffer.
pub fn frame<T: Serialize + ?Sized>(v: &T) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    // Serializing our own types and JSON values into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut buf, v);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// A named event (the Responses API's), `event: <name>\ndata: <json>\n\n`, appended to `buf`
/// so that events produced together can leave as one chunk.
pub fn write_named_frame<T: Serialize + ?Sized>(buf: &mut Vec<u8>, event: &str, v: &T) {
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(event.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    let _ = serde_json::to_writer(&mut *buf, v);
    buf.extend_from_slice(b"\n\n");
}

pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// The envelope of every streamed chunk, borrowed from the request's `ChunkHead`: serialized
/// without building a JSON tree per token. Field order is the wire order.
#[derive(Serialize)]
struct Chunk<'a, C: Serialize> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: &'a [C],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<&'a Value>,
}

/// What every streamed chunk of one response repeats.
pub struct ChunkHead {
    pub id: String,
    pub object: &'static str,
    pub created: i64,
    pub model: String,
    /// `include_usage`: every chunk carries `usage`, null but on the last.
    pub include_usage: bool,
}

impl ChunkHead {
    /// A framed chunk of these choices (usage null if included at all).
    pub fn frame<C: Serialize>(&self, choices: &[C]) -> Bytes {
        self.frame_with_usage(choices, self.include_usage.then_some(&Value::Null))
    }

    /// The last chunk: no choices, the usage.
    pub fn usage_frame(&self, usage: &Value) -> Bytes {
        self.frame_with_usage::<Value>(&[], Some(usage))
    }

    fn frame_with_usage<C: Serialize>(&self, choices: &[C], usage: Option<&Value>) -> Bytes {
        frame(&Chunk {
            id: &self.id,
            object: self.object,
            created: self.created,
            model: &self.model,
            choices,
            usage,
        })
    }
}

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
