//! The core's errors (`hybridllm_api::errors`) as HTTP responses, and the worker's gRPC
//! statuses as core errors: the two mappings this shell adds.
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

/// A gRPC status from the worker, as the core maps it. A status made here from a transport
/// error (the worker's connection dropped mid-stream, as when it is killed) carries its
/// source; one sent by the worker does not.
pub fn from_status(s: tonic::Status) -> ApiError {
    let lost = std::error::Error::source(&s).is_some();
    ApiError::from_engine(s.code() as i32, s.message(), None, lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use hybridllm_api::errors::RETRY_AFTER_S;

    #[test]
    fn grpc_statuses() {
        let e = from_status(tonic::Status::invalid_argument("bad ids"));
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            from_status(tonic::Status::unavailable("x")).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let e = from_status(tonic::Status::resource_exhausted("busy"));
        assert_eq!(e.body()["error"]["type"], "RateLimitError");
        let resp = HttpError(e).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["retry-after"], RETRY_AFTER_S);
    }

    #[test]
    fn lost_connection_is_503_worker_error_is_500() {
        let lost = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let e = from_status(tonic::Status::from_error(Box::new(lost)));
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        let e = from_status(tonic::Status::unknown("worker bug"));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
