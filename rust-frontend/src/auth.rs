//! Bearer-token auth as the core decides it (`hybridllm_api::auth`): this shell only hands it
//! the request's method, path and Authorization header.
use crate::errors::HttpError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let header = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    match state
        .auth
        .check(req.method().as_str(), req.uri().path(), header)
    {
        Ok(()) => next.run(req).await,
        Err(e) => HttpError(e).into_response(),
    }
}
