//! CORS from `--allowed-origins/-methods/-headers` (tower-http's CorsLayer), and a preflight
//! the policy refuses answered as Starlette's CORSMiddleware (the Python frontend, vLLM)
//! answers it: 400 `Disallowed CORS origin, method, headers` (whichever failed), not a 200
//! without an Access-Control-Allow-Origin header.
use crate::config::ServeConfig;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tower_http::cors::{AllowHeaders, AllowMethods, AllowOrigin, CorsLayer};

/// Request headers a browser may send without asking (Starlette's list).
const SAFELISTED: [&str; 4] = [
    "accept",
    "accept-language",
    "content-language",
    "content-type",
];

pub fn layer(c: &ServeConfig) -> CorsLayer {
    let any = |v: &[String]| v.iter().any(|s| s == "*");
    let mut layer = CorsLayer::new();
    layer = if any(&c.allowed_origins) {
        layer.allow_origin(AllowOrigin::any())
    } else {
        layer.allow_origin(
            c.allowed_origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        )
    };
    layer = if any(&c.allowed_methods) {
        layer.allow_methods(AllowMethods::any())
    } else {
        layer.allow_methods(
            c.allowed_methods
                .iter()
                .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                .collect::<Vec<_>>(),
        )
    };
    layer = if any(&c.allowed_headers) {
        layer.allow_headers(AllowHeaders::any())
    } else {
        layer.allow_headers(
            c.allowed_headers
                .iter()
                .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok())
                .collect::<Vec<_>>(),
        )
    };
    // Credentials cannot be combined with wildcards (tower-http panics), so only when explicit.
    if c.allow_credentials
        && !any(&c.allowed_origins)
        && !any(&c.allowed_headers)
        && !any(&c.allowed_methods)
    {
        layer = layer.allow_credentials(true);
    }
    layer
}

/// What a preflight asks for that the policy does not allow, in Starlette's words and order.
fn preflight_failures(c: &ServeConfig, req: &Request) -> Vec<&'static str> {
    let h = req.headers();
    let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    let any = |v: &[String]| v.iter().any(|s| s == "*");
    let mut failures = vec![];
    let origin = get("origin").unwrap_or("");
    if !any(&c.allowed_origins) && !c.allowed_origins.iter().any(|o| o == origin) {
        failures.push("origin");
    }
    let method = get("access-control-request-method").unwrap_or("");
    if !any(&c.allowed_methods) && !c.allowed_methods.iter().any(|m| m == method) {
        failures.push("method");
    }
    if let Some(asked) = get("access-control-request-headers") {
        let allowed = |name: &str| {
            SAFELISTED.contains(&name) || c.allowed_headers.iter().any(|a| a.to_lowercase() == name)
        };
        if !any(&c.allowed_headers) && !asked.split(',').all(|n| allowed(&n.trim().to_lowercase()))
        {
            failures.push("headers");
        }
    }
    if h.contains_key("access-control-request-private-network") {
        failures.push("private-network");
    }
    failures
}

pub async fn refuse_disallowed_preflight(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let preflight = req.method() == Method::OPTIONS
        && req.headers().contains_key(header::ORIGIN)
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let failures = preflight_failures(&state.config, &req);
        if !failures.is_empty() {
            let text = format!("Disallowed CORS {}", failures.join(", "));
            let ctype = HeaderValue::from_static("text/plain; charset=utf-8");
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, ctype)],
                text,
            )
                .into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preflight(origin: &str, method: &str, headers: Option<&str>) -> Request {
        let mut b = Request::builder()
            .method(Method::OPTIONS)
            .uri("/v1/models")
            .header("origin", origin)
            .header("access-control-request-method", method);
        if let Some(h) = headers {
            b = b.header("access-control-request-headers", h);
        }
        b.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn names_what_the_policy_refuses() {
        let c = ServeConfig {
            allowed_origins: vec!["https://a.example".into()],
            allowed_methods: vec!["GET".into(), "POST".into()],
            allowed_headers: vec!["Authorization".into()],
            ..Default::default()
        };
        let ok = preflight(
            "https://a.example",
            "POST",
            Some("authorization, Content-Type"),
        );
        assert!(preflight_failures(&c, &ok).is_empty());
        let bad = preflight("https://b.example", "PUT", Some("x-secret"));
        assert_eq!(
            preflight_failures(&c, &bad),
            vec!["origin", "method", "headers"]
        );
        let open = ServeConfig::default(); // "*" everywhere
        assert!(preflight_failures(&open, &bad).is_empty());
    }
}
