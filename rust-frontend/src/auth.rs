//! Bearer-token auth. Everything but /health, /version, the playground page (and /metrics with
//! `metrics_no_auth`) and CORS preflight needs a key when `api_keys` is set; keys are compared
//! in constant time.
//! Neither a key nor the Authorization header is ever logged.
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    // Length is not secret; contents are compared without early exit.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub fn key_ok(keys: &[String], header: Option<&str>) -> bool {
    let Some(token) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
        return false;
    };
    // Check every key so timing does not reveal which one matched.
    keys.iter().fold(false, |ok, k| {
        ct_eq(k.as_bytes(), token.trim().as_bytes()) | ok
    })
}

pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let keys = &state.config.api_keys;
    let path = req.uri().path();
    let open = path == "/health"
        || path == "/version"
        || (path == "/" && !state.config.disable_playground)
        || (path == "/metrics" && state.config.metrics_no_auth);
    if keys.is_empty() || req.method() == Method::OPTIONS || open {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if key_ok(keys, header) {
        next.run(req).await
    } else {
        HttpError(ApiError::Unauthorized(
            "Unauthorized: a valid API key is required (Authorization: Bearer <key>).".into(),
        ))
        .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_bearer() {
        let keys = vec!["sk-a".to_string(), "sk-b".to_string()];
        assert!(key_ok(&keys, Some("Bearer sk-b")));
        assert!(!key_ok(&keys, Some("Bearer sk-c")));
        assert!(!key_ok(&keys, Some("sk-a")));
        assert!(!key_ok(&keys, None));
    }
}
