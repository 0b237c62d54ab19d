//! Request limits checked before any handler runs (the Python frontend's `limits.py` has the
//! same rules and messages): header fields (431) and the body's content type (415).
use crate::errors::{ApiError, HttpError};
use axum::extract::Request;
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub const MAX_HEADER_FIELDS: usize = 100;
pub const MAX_HEADER_BYTES: usize = 32 << 10;

/// 431 when a request has more than MAX_HEADER_FIELDS header fields or more than
/// MAX_HEADER_BYTES of names and values together.
pub fn check_headers(headers: &HeaderMap) -> Result<(), ApiError> {
    let fields = headers.len();
    let bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    if fields > MAX_HEADER_FIELDS || bytes > MAX_HEADER_BYTES {
        return Err(ApiError::HeadersTooLarge(format!(
            "Request header fields too large: {fields} fields, {bytes} bytes (the limit is \
             {MAX_HEADER_FIELDS} fields and {MAX_HEADER_BYTES} bytes)."
        )));
    }
    Ok(())
}

pub async fn header_limits(req: Request, next: Next) -> Response {
    match check_headers(req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => HttpError(e).into_response(),
    }
}

/// A JSON body must say so, or say nothing (415 otherwise): `application/json` or any
/// `application/*+json`, parameters such as charset allowed.
pub fn check_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let media = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = media == "application/json"
        || (media.starts_with("application/") && media.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(format!(
            "Unsupported Media Type: the request body must be application/json, got '{text}'."
        )))
    }
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
