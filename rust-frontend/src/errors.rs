//! The core's errors (`hybridllm_api::errors`) as HTTP responses: the mapping this shell
//! adds (the engine's errors become core errors in the core: `engine_io::EngineError`).
use axum::response::{IntoResponse, Response};
pub use hybridllm_api::errors::ApiError;

/// A handler's error: an `ApiError` written as its status, headers and JSON body.
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let e = self.0;
        let mut resp = (e.status(), axum::Json(e.body())).into_response();
        if let Some((name, value)) = e.header() {
            resp.headers_mut()
                .insert(name, axum::http::HeaderValue::from_static(value));
        }
        resp
    }
}
