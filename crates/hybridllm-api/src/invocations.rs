//! `POST /invocations` (vLLM's, for SageMaker): one endpoint whose body says which API it
//! calls. As vLLM tries the model's request types in order, a generation model takes a body
//! with `messages` as a chat completion and one with `prompt` as a completion; an embedding
//! model takes `input` (or chat-style `messages`) as embeddings.
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::request::json_object;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    Chat,
    Completion,
    Embedding,
}

impl Invocation {
    /// The endpoint `body` calls on this server's model.
    pub fn route(ctx: &ApiContext, body: &[u8]) -> Result<Self, ApiError> {
        let fields = json_object(body)?;
        let has = |k: &str| fields.contains_key(k);
        let (found, expected) = match ctx.embed {
            false if has("messages") => (Some(Invocation::Chat), ""),
            false if has("prompt") => (Some(Invocation::Completion), ""),
            false => (None, "['ChatCompletionRequest', 'CompletionRequest']"),
            true if has("input") || has("messages") => (Some(Invocation::Embedding), ""),
            true => (
                None,
                "['EmbeddingCompletionRequest', 'EmbeddingChatRequest']",
            ),
        };
        found.ok_or_else(|| {
            ApiError::bad(format!(
                "Cannot find suitable handler for request. Expected one of: {expected}"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::test_context;

    #[test]
    fn the_body_names_the_endpoint() {
        let ctx = test_context();
        let route = |b: &str| Invocation::route(&ctx, b.as_bytes());
        assert_eq!(
            route(r#"{"messages": [], "prompt": "x"}"#).unwrap(),
            Invocation::Chat
        );
        assert_eq!(route(r#"{"prompt": "x"}"#).unwrap(), Invocation::Completion);
        assert_eq!(
            route(r#"{"input": "x"}"#).unwrap_err().to_string(),
            "Cannot find suitable handler for request. Expected one of: \
             ['ChatCompletionRequest', 'CompletionRequest']"
        );
        assert!(route("[1]").is_err());
        let embed = ApiContext {
            embed: true,
            ..test_context()
        };
        let route = |b: &str| Invocation::route(&embed, b.as_bytes());
        assert_eq!(route(r#"{"input": "x"}"#).unwrap(), Invocation::Embedding);
        assert!(route(r#"{"prompt": "x"}"#).is_err());
    }
}
