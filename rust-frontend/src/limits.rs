//! Request limits checked before any handler runs, over HTTP: the header fields (431) and the
//! body's content type (415) read from axum's types; the rules and messages are the core's
//! (`hybridllm_api::limits`), as in the Python fallback.
use crate::errors::{ApiError, HttpError};
use axum::extract::Request;
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
#[cfg(test)]
use hybridllm_api::limits::{MAX_HEADER_BYTES, MAX_HEADER_FIELDS};

pub fn check_headers(headers: &HeaderMap) -> Result<(), ApiError> {
    let bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    hybridllm_api::limits::check_headers(headers.len(), bytes)
}

pub async fn header_limits(req: Request, next: Next) -> Response {
    match check_headers(req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => HttpError(e).into_response(),
    }
}

pub fn check_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let value = headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes());
    hybridllm_api::limits::check_json_content_type(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_type(t: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(t));
        h
    }

    #[test]
    fn content_types() {
        assert!(check_json_content_type(&HeaderMap::new()).is_ok());
        assert!(check_json_content_type(&with_type("application/json; charset=utf-8")).is_ok());
        assert!(check_json_content_type(&with_type("Application/JSON")).is_ok());
        assert!(check_json_content_type(&with_type("application/vnd.api+json")).is_ok());
        let e = check_json_content_type(&with_type("text/plain")).unwrap_err();
        assert_eq!(e.status(), axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(e.to_string().contains("got 'text/plain'."), "{e}");
    }

    #[test]
    fn header_counts() {
        let mut h = HeaderMap::new();
        for i in 0..MAX_HEADER_FIELDS {
            h.insert(
                header::HeaderName::try_from(format!("x-{i}")).unwrap(),
                HeaderValue::from_static("v"),
            );
        }
        assert!(check_headers(&h).is_ok());
        h.insert("x-one-more", HeaderValue::from_static("v"));
        let e = check_headers(&h).unwrap_err();
        assert_eq!(e.status(), axum::http::StatusCode::from_u16(431).unwrap());
        let mut h = HeaderMap::new();
        let big = "a".repeat(MAX_HEADER_BYTES);
        h.insert("x-big", HeaderValue::from_str(&big).unwrap());
        assert!(check_headers(&h).is_err());
    }
}
