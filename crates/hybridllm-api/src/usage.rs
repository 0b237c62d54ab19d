//! Pieces every response body repeats: ids, timestamps and `usage`.
use crate::engine_io::PromptInfo;
use crate::errors::ApiError;
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A new uuid's 32 hex digits: the `X-Request-Id` made for a request that came without one
/// (`--enable-request-id-headers`, as vLLM's), and the tail of every id the server makes.
pub fn new_request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// `<prefix>-<32 hex>`, e.g. `chatcmpl-0123…`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", new_request_id())
}

/// The longest request id a caller may choose (`X-Request-Id` or the body's `request_id`):
/// every streamed chunk repeats it.
pub const MAX_REQUEST_ID_LEN: usize = 512;

/// The ids a caller chose for a request: the body's `request_id`, and the `X-Request-Id`
/// header once the shell has set it.
#[derive(Debug, Default)]
pub struct CallerId {
    pub body: Option<String>,
    pub header: Option<String>,
}

impl CallerId {
    pub fn ids(&self, prefix: &str) -> Result<RequestIds, ApiError> {
        RequestIds::new(prefix, self.header.as_deref(), self.body.as_deref())
    }
}

/// A chat or completion request's ids, as vLLM makes them: the response id is
/// `<prefix>-<base>`, the base being the `X-Request-Id` header, else the body's `request_id`,
/// else a new uuid. The engine's id is the response id when the server chose it; a caller's
/// id need not be unique (two clients may send the same), so the engine's then gets a uuid
/// after it.
pub struct RequestIds {
    pub response: String,
    pub engine: String,
}

impl RequestIds {
    pub fn new(prefix: &str, header: Option<&str>, body: Option<&str>) -> Result<Self, ApiError> {
        let chosen = match (header.filter(|h| !h.is_empty()), body) {
            (Some(h), _) => Some(("X-Request-Id", h)),
            (None, Some(b)) => Some(("request_id", b)),
            (None, None) => None,
        };
        let Some((param, base)) = chosen else {
            let id = new_id(prefix);
            return Ok(RequestIds {
                engine: id.clone(),
                response: id,
            });
        };
        if base.is_empty() || base.len() > MAX_REQUEST_ID_LEN {
            return Err(ApiError::bad_param(
                param,
                format!(
                    "{param} must be 1 to {MAX_REQUEST_ID_LEN} bytes long, got {}.",
                    base.len()
                ),
            ));
        }
        let response = format!("{prefix}-{base}");
        Ok(RequestIds {
            engine: new_id(&response),
            response,
        })
    }
}

/// `usage` of chat completions and completions.
#[derive(Serialize, ToSchema)]
pub struct CompletionUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    /// vLLM's: with `--enable-prompt-tokens-details` and a prefix-cache hit; else null.
    pub prompt_tokens_details: Option<CachedTokens>,
}

#[derive(Serialize, ToSchema)]
pub struct CachedTokens {
    /// Prompt tokens found in the prefix cache.
    pub cached_tokens: u32,
}

/// Token counts for `usage`, over every prompt of the request.
pub struct Usage {
    /// Per prompt: our count until the worker reports its own.
    prompt_tokens: Vec<usize>,
    cached_tokens: u32,
    completion_tokens: usize,
    /// Per choice (index over all prompts' choices): its tokens so far.
    choice_tokens: Vec<usize>,
}

impl Usage {
    pub fn new(prompt_lens: Vec<usize>) -> Self {
        Usage {
            prompt_tokens: prompt_lens,
            cached_tokens: 0,
            completion_tokens: 0,
            choice_tokens: vec![],
        }
    }

    pub fn on_prompt(&mut self, prompt: usize, info: &PromptInfo) {
        self.prompt_tokens[prompt] = info.prompt_tokens as usize;
        self.cached_tokens += info.cached_tokens;
    }

    pub fn on_output(&mut self, num_tokens: usize) {
        self.completion_tokens += num_tokens;
    }

    /// `on_output` that also counts the tokens of choice `choice`.
    pub fn on_choice_output(&mut self, choice: usize, num_tokens: usize) {
        self.on_output(num_tokens);
        if self.choice_tokens.len() <= choice {
            self.choice_tokens.resize(choice + 1, 0);
        }
        self.choice_tokens[choice] += num_tokens;
    }

    /// (prompt tokens of `prompt`, tokens of `choice` so far): a chunk's running usage.
    pub fn running(&self, prompt: usize, choice: usize) -> (usize, usize) {
        let done = self.choice_tokens.get(choice).copied().unwrap_or(0);
        (self.prompt_tokens.get(prompt).copied().unwrap_or(0), done)
    }

    /// `details`: `--enable-prompt-tokens-details`, under which (as vLLM) the cached-token
    /// count shows when there is one.
    pub fn body(&self, details: bool) -> CompletionUsage {
        let prompt: usize = self.prompt_tokens.iter().sum();
        let completion = self.completion_tokens;
        CompletionUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: (details && self.cached_tokens > 0).then_some(CachedTokens {
                cached_tokens: self.cached_tokens,
            }),
        }
    }

    pub fn to_json(&self, details: bool) -> Value {
        serde_json::to_value(self.body(details)).expect("usage serializes")
    }

    /// The Responses API's shape of the same counts.
    pub fn to_responses_json(&self) -> Value {
        let input: usize = self.prompt_tokens.iter().sum();
        let output = self.completion_tokens;
        json!({
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + output,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_as_vllm_makes_them() {
        let own = RequestIds::new("chatcmpl", None, None).unwrap();
        assert_eq!(own.engine, own.response);
        assert!(own.response.starts_with("chatcmpl-") && own.response.len() == 9 + 32);
        // The header wins over the body; an empty header counts as none.
        let ids = RequestIds::new("cmpl", Some("h"), Some("b")).unwrap();
        assert_eq!(ids.response, "cmpl-h");
        assert!(ids.engine.starts_with("cmpl-h-") && ids.engine.len() == 7 + 32);
        let ids = RequestIds::new("cmpl", Some(""), Some("b")).unwrap();
        assert_eq!(ids.response, "cmpl-b");
        // A caller's id twice: the engine's ids still differ.
        let again = RequestIds::new("cmpl", Some("b"), None).unwrap();
        assert_eq!(again.response, ids.response);
        assert_ne!(again.engine, ids.engine);
        let long = "x".repeat(MAX_REQUEST_ID_LEN + 1);
        let e = RequestIds::new("cmpl", None, Some(&long)).err().unwrap();
        assert_eq!(
            e.to_string(),
            "request_id must be 1 to 512 bytes long, got 513."
        );
        assert!(RequestIds::new("cmpl", None, Some("")).is_err());
        assert!(RequestIds::new("cmpl", Some(&long[1..]), None).is_ok());
    }
}
