//! Server-sent events as OpenAI clients parse them: `data: <json>\n\n` per chunk, an error
//! chunk (`data: {"error": {...}}`) if generation fails mid-stream, then `data: [DONE]\n\n`.
use crate::errors::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use std::convert::Infallible;

pub fn frame(v: &Value) -> Bytes {
    Bytes::from(format!(
        "data: {}\n\n",
        serde_json::to_string(v).unwrap_or_default()
    ))
}

pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Wraps a stream of chunks; the stream (and so the engine call) lives as long as the body.
pub fn sse_response<S>(chunks: S) -> Response
where
    S: Stream<Item = Result<Value, ApiError>> + Send + 'static,
{
    let body = chunks
        .map(|c| match c {
            Ok(v) => frame(&v),
            Err(e) => {
                tracing::warn!("stream failed: {e}");
                frame(&e.body())
            }
        })
        .chain(futures_util::stream::once(async {
            Bytes::from_static(DONE)
        }))
        .map(Ok::<_, Infallible>);
    let mut resp = Body::from_stream(body).into_response();
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
            Ok(serde_json::json!({"a": 1})),
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
