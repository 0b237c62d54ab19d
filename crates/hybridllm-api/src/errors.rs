//! Every failure a client can see, mapped in one place to an HTTP status and the OpenAI error
//! body `{"error": {"message", "type", "param", "code"}}` (vLLM's type names). The shells
//! only write it out (with the headers its kind asks for: `ApiError::header`).
use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every refusal (and the payload of an SSE error event).
#[derive(Serialize, ToSchema)]
#[schema(as = ErrorResponse)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    /// vLLM's name of the kind of error, e.g. BadRequestError.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The request field at fault, when there is one (always present, null otherwise).
    #[schema(required = true)]
    pub param: Option<String>,
    /// The HTTP status.
    pub code: u16,
}

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
    /// The kind of refusal a shell names by its status code (its own limits, an engine
    /// error it mapped): the body and headers are then the core's.
    pub fn with_status(status: u16, message: String, param: Option<String>) -> Self {
        match status {
            400 => ApiError::BadRequest { message, param },
            401 => ApiError::Unauthorized(message),
            404 => ApiError::NotFound(message),
            415 => ApiError::UnsupportedMediaType(message),
            429 => ApiError::TooManyRequests(message),
            431 => ApiError::HeadersTooLarge(message),
            503 => ApiError::Unavailable(message),
            _ => ApiError::Internal(message),
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
        let body = ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind: self.error_type(),
                param,
                code: self.status().as_u16(),
            },
        };
        serde_json::to_value(body).expect("an error body serializes")
    }

    /// The header this kind of refusal carries besides its body.
    pub fn header(&self) -> Option<(&'static str, &'static str)> {
        match self {
            ApiError::Unauthorized(_) => Some(("www-authenticate", "Bearer")),
            ApiError::TooManyRequests(_) => Some(("retry-after", RETRY_AFTER_S)),
            _ => None,
        }
    }
}

/// What a 429 (admission control) asks the client to wait, in seconds.
pub const RETRY_AFTER_S: &str = "1";

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
        let e = ApiError::TooManyRequests("busy".into());
        assert_eq!(e.body()["error"]["type"], "RateLimitError");
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.header(), Some(("retry-after", RETRY_AFTER_S)));
    }
}
