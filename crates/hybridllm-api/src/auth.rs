//! Who may call what: with API keys set, every path but `/health`, `/version`, the playground
//! page (and `/metrics` with `metrics_no_auth`) and CORS preflight needs
//! `Authorization: Bearer <key>`. Keys are compared in constant time, every one of them, so
//! timing does not tell which matched. Neither a key nor the header is ever logged.
use crate::errors::ApiError;

pub const UNAUTHORIZED: &str =
    "Unauthorized: a valid API key is required (Authorization: Bearer <key>).";

pub struct Auth {
    keys: Vec<String>,
    metrics_no_auth: bool,
    playground: bool,
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer_token(header: Option<&str>) -> Option<&str> {
    header
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    // Length is not secret; contents are compared without early exit.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    pub fn new(keys: Vec<String>, metrics_no_auth: bool, playground: bool) -> Self {
        Auth {
            keys,
            metrics_no_auth,
            playground,
        }
    }

    /// Who may see a stored response: the key that created it (None when no keys are set;
    /// `check` has already let the request through).
    pub fn owner<'h>(&self, header: Option<&'h str>) -> Option<&'h str> {
        match self.keys.is_empty() {
            true => None,
            false => bearer_token(header),
        }
    }

    pub fn key_ok(&self, header: Option<&str>) -> bool {
        let Some(token) = bearer_token(header) else {
            return false;
        };
        self.keys
            .iter()
            .fold(false, |ok, k| ct_eq(k.as_bytes(), token.as_bytes()) | ok)
    }

    /// A path served without a key (the OpenAPI document states these too).
    pub fn is_open(&self, path: &str) -> bool {
        path == "/health"
            || path == "/version"
            || path == "/load"
            || (path == "/" && self.playground)
            || (path == "/metrics" && self.metrics_no_auth)
    }

    /// Whether a request may go on; a refusal is a 401.
    pub fn check(&self, method: &str, path: &str, header: Option<&str>) -> Result<(), ApiError> {
        let open = self.is_open(path);
        if self.keys.is_empty() || method == "OPTIONS" || open || self.key_ok(header) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized(UNAUTHORIZED.into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_bearer() {
        let auth = Auth::new(vec!["sk-a".into(), "sk-b".into()], false, true);
        assert!(auth.key_ok(Some("Bearer sk-b")));
        assert!(auth.key_ok(Some("Bearer  sk-b ")));
        assert!(!auth.key_ok(Some("Bearer sk-c")));
        assert!(!auth.key_ok(Some("sk-a")));
        assert!(!auth.key_ok(None));
    }

    #[test]
    fn open_paths_and_preflight() {
        let auth = Auth::new(vec!["k".into()], false, true);
        for path in ["/health", "/version", "/"] {
            assert!(auth.check("GET", path, None).is_ok(), "{path}");
        }
        assert!(auth.check("OPTIONS", "/v1/models", None).is_ok());
        let e = auth.check("GET", "/metrics", None).unwrap_err();
        assert_eq!(e.status(), http::StatusCode::UNAUTHORIZED);
        assert_eq!(e.to_string(), UNAUTHORIZED);
        assert!(Auth::new(vec!["k".into()], true, false)
            .check("GET", "/metrics", None)
            .is_ok());
        assert!(Auth::new(vec!["k".into()], true, false)
            .check("GET", "/", None)
            .is_err());
        assert!(Auth::new(vec![], false, false)
            .check("POST", "/v1/completions", None)
            .is_ok());
    }
}
