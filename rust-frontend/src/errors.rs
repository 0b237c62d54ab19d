//! Every failure a client can see, mapped in one place to an HTTP status and the OpenAI error
//! body `{"error": {"message", "type", "param", "code"}}` (vLLM's type names).
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<String>,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("Request body is larger than the limit of {0} bytes.")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    HeadersTooLarge(String),
    /// Admission control (the worker's RESOURCE_EXHAUSTED): 429 with Retry-After.
    #[error("{0}")]
    TooManyRequests(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn bad(message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            message: message.into(),
            param: None,
        }
    }
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            message: message.into(),
            param: Some(param.to_string()),
        }
    }
    pub fn model_not_found(model: &str) -> Self {
        ApiError::NotFound(format!("The model `{model}` does not exist."))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn error_type(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. } => "BadRequestError",
            ApiError::NotFound(_) => "NotFoundError",
            ApiError::Unauthorized(_) => "AuthenticationError",
            ApiError::PayloadTooLarge(_) => "PayloadTooLargeError",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaTypeError",
            ApiError::HeadersTooLarge(_) => "RequestHeaderFieldsTooLargeError",
            ApiError::TooManyRequests(_) => "RateLimitError",
            ApiError::Unavailable(_) => "ServiceUnavailableError",
            ApiError::Internal(_) => "InternalServerError",
        }
    }

    /// The JSON body; also used as the payload of an SSE error event mid-stream.
    pub fn body(&self) -> serde_json::Value {
        let param = match self {
            ApiError::BadRequest { param, .. } => param.clone(),
            _ => None,
        };
        json!({"error": {
            "message": self.to_string(),
            "type": self.error_type(),
            "param": param,
            "code": self.status().as_u16(),
        }})
    }

    /// Maps a gRPC status from the worker.
    pub fn from_status(s: tonic::Status) -> Self {
        use tonic::Code;
        match s.code() {
            Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
                ApiError::bad(s.message())
            }
            Code::NotFound => ApiError::NotFound(s.message().to_string()),
            Code::ResourceExhausted => ApiError::TooManyRequests(s.message().to_string()),
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => {
                ApiError::Unavailable(format!("The engine is unavailable: {}", s.message()))
            }
            // A status made here from a transport error (the worker's connection dropped
            // mid-stream, as when it is killed) carries its source; one sent by the worker
            // does not. The former is an unavailable engine, not a server bug.
            _ if std::error::Error::source(&s).is_some() => ApiError::Unavailable(format!(
                "The engine is unavailable: the connection to it was lost ({})",
                s.message()
            )),
            _ => ApiError::Internal(format!("Engine error: {}", s.message())),
        }
    }
}

/// What a 429 (admission control) asks the client to wait, in seconds.
pub const RETRY_AFTER_S: &str = "1";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status(), axum::Json(self.body())).into_response();
        let extra = match self {
            ApiError::Unauthorized(_) => Some(("www-authenticate", "Bearer")),
            ApiError::TooManyRequests(_) => Some(("retry-after", RETRY_AFTER_S)),
            _ => None,
        };
        if let Some((name, value)) = extra {
            resp.headers_mut()
                .insert(name, axum::http::HeaderValue::from_static(value));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_shape() {
        let e = ApiError::bad_param("temperature", "temperature must be in [0, 2], got 3.0.");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            serde_json::to_string(&e.body()).unwrap(),
            r#"{"error":{"message":"temperature must be in [0, 2], got 3.0.","type":"BadRequestError","param":"temperature","code":400}}"#
        );
        let e = ApiError::model_not_found("x");
        assert_eq!(
            e.body()["error"]["message"],
            "The model `x` does not exist."
        );
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        let e = ApiError::from_status(tonic::Status::invalid_argument("bad ids"));
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            ApiError::from_status(tonic::Status::unavailable("x")).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let e = ApiError::from_status(tonic::Status::resource_exhausted("busy"));
        assert_eq!(e.body()["error"]["type"], "RateLimitError");
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["retry-after"], RETRY_AFTER_S);
    }

    #[test]
    fn lost_connection_is_503_worker_error_is_500() {
        let lost = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let e = ApiError::from_status(tonic::Status::from_error(Box::new(lost)));
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        let e = ApiError::from_status(tonic::Status::unknown("worker bug"));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
