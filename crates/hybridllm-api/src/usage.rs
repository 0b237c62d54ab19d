//! Pieces every response body repeats: ids, timestamps and `usage`.
use crate::engine_io::PromptInfo;
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `<prefix>-<32 hex>`, e.g. `chatcmpl-0123…`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// `usage` of chat completions and completions.
#[derive(Serialize, ToSchema)]
pub struct CompletionUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: CachedTokens,
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

    pub fn body(&self) -> CompletionUsage {
        let prompt: usize = self.prompt_tokens.iter().sum();
        let completion = self.completion_tokens;
        CompletionUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: CachedTokens {
                cached_tokens: self.cached_tokens,
            },
        }
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.body()).expect("usage serializes")
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
