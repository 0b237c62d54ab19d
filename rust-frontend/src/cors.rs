//! CORS as the core decides it (`hybridllm_api::cors`): a preflight is answered here, whole;
//! every other answer to a request that names its origin gets the policy's headers.
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hybridllm_api::cors::Cors;
use std::sync::Arc;

fn add_headers(resp: &mut Response, headers: Vec<(&'static str, String)>) {
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            let name = HeaderName::from_static(name);
            match name.as_str() {
                "vary" => resp.headers_mut().append(name, v),
                _ => resp.headers_mut().insert(name, v).is_some(),
            };
        }
    }
}

pub async fn apply(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let get = |name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let origin = get("origin");
    let request_method = get("access-control-request-method");
    if Cors::is_preflight(
        req.method().as_str(),
        origin.as_deref(),
        request_method.as_deref(),
    ) {
        let (status, headers, body) = state.cors.preflight(
            origin.as_deref().unwrap_or_default(),
            request_method.as_deref().unwrap_or_default(),
            get("access-control-request-headers").as_deref(),
            h.contains_key("access-control-request-private-network"),
        );
        let mut resp =
            (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body).into_response();
        resp.headers_mut().remove("content-type");
        add_headers(&mut resp, headers);
        return resp;
    }
    let mut resp = next.run(req).await;
    if let Some(o) = origin {
        add_headers(&mut resp, state.cors.response_headers(&o));
    }
    resp
}
