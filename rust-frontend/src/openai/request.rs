//! Request intake shared by every endpoint: the JSON body extractor with OpenAI error
//! bodies, the model-name check and `stream_options`.
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct StreamOptions {
    pub include_usage: bool,
}

/// A JSON object only (serde's derive would also read it from the sequence of its fields).
impl<'de> Deserialize<'de> for StreamOptions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            #[serde(default)]
            include_usage: bool,
        }
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Fields, A::Error> {
                Fields::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        let fields = d.deserialize_map(Object)?;
        Ok(StreamOptions {
            include_usage: fields.include_usage,
        })
    }
}

/// An omitted/null model is allowed; any other name must be one of the served names.
pub fn check_model(state: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model {
        Some(m) if !state.served_names.iter().any(|s| s == m) => Err(ApiError::model_not_found(m)),
        _ => Ok(()),
    }
}

/// An endpoint the model cannot serve: 400 naming the model's task (vLLM's answer).
pub fn check_task(state: &AppState, api: &str, embed: bool) -> Result<(), ApiError> {
    let is_embed =
        state.model_info.kind == crate::engine_client::pb::model_info::Kind::Embed as i32;
    if is_embed == embed {
        return Ok(());
    }
    let (kind, task) = if is_embed {
        ("an embedding", "embed")
    } else {
        ("a generative", "generate")
    };
    Err(ApiError::bad(format!(
        "The model does not support the {api} API: `{}` is {kind} model (task '{task}').",
        state.served_names[0]
    )))
}

/// A request body: a JSON object. Its error names the first mistyped field in body order.
pub trait RequestBody: DeserializeOwned {
    /// Readers of the `#[serde(flatten)]`ed groups, whose errors serde reports without a path.
    const GROUPS: &'static [FieldError] = &[];
}

/// The path and message of the error reading a value as some type, if any.
pub type FieldError = fn(&serde_json::Value) -> Option<(String, String)>;

pub fn field_error<T: DeserializeOwned>(v: &serde_json::Value) -> Option<(String, String)> {
    serde_path_to_error::deserialize::<_, T>(v)
        .err()
        .map(|e| (e.path().to_string(), e.into_inner().to_string()))
}

/// JSON body extractor whose failures are OpenAI error bodies (axum's are plain text):
/// not JSON by its content type -> 415, too large -> 413, malformed, no object or mistyped -> 400 with serde's explanation.
pub struct JsonBody<T>(pub T);

impl<T: RequestBody> FromRequest<Arc<AppState>> for JsonBody<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, HttpError> {
        Ok(JsonBody(read_body(req, state).await?))
    }
}

async fn read_body<T: RequestBody>(req: Request, state: &Arc<AppState>) -> Result<T, ApiError> {
    crate::limits::check_json_content_type(req.headers())?;
    let limit = state.config.max_request_body_bytes;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    let bytes = axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| ApiError::PayloadTooLarge(limit))?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad(format!("Invalid JSON body: {e}")))?;
    let Some(fields) = value.as_object() else {
        return Err(ApiError::bad(
            "Invalid request: the body must be a JSON object.",
        ));
    };
    let (path, inner) = match serde_path_to_error::deserialize(&value) {
        Ok(v) => return Ok(v),
        Err(e) => (e.path().to_string(), e.into_inner().to_string()),
    };
    // The field first in the body of those mistyped is `param` (the message has the path,
    // e.g. `stop_token_ids[1]: invalid value: ...`); else serde's error has no field (a
    // missing one).
    let field = |p: &str| {
        let name = p.split(['.', '[']).next().filter(|n| !n.is_empty())?;
        Some((fields.keys().position(|k| k == name)?, name.to_string()))
    };
    let first = T::GROUPS
        .iter()
        .filter_map(|read| read(&value))
        .chain([(path, inner.clone())])
        .filter_map(|(p, m)| Some((field(&p)?, p, m)))
        .min_by_key(|((i, _), ..)| *i);
    Err(match first {
        Some(((_, name), p, m)) => ApiError::bad_param(&name, format!("Invalid request: {p}: {m}")),
        None => ApiError::bad(format!("Invalid request: {inner}")),
    })
}
