//! vLLM's POST /v1/chat/completions/batch: a chat request whose `messages` is a list of
//! conversations. Each conversation runs as its own engine request under the shared fields,
//! and the answer is one `chat.completion` with a choice per conversation (index = its
//! place in the list) and their usage summed. As vLLM, not streamed and without tools,
//! beam search or `n` > 1; `prompt_logprobs` and `return_token_ids` are refused too (the
//! body has one place for a prompt's, and N prompts).
use crate::aggregate::Collected;
use crate::chat::{ChatCall, ChatRequest, ChatResponse};
use crate::context::ApiContext;
use crate::errors::ApiError;
use crate::request::{json_object, parse_fields};
use crate::text::tokenizer::Tokenizer;
use crate::validation::GenRequest;
use serde_json::{Map, Value};

/// A valid batch: one chat call per conversation, prompts rendered.
pub struct ChatBatchCall {
    calls: Vec<ChatCall>,
    /// The rendered prompts, in order, for the shell to tokenize.
    pub prompts: Vec<String>,
    pub add_special_tokens: bool,
}

/// What the batch endpoint refuses that a single chat request allows: (field, whether
/// `fields` asks for it, the refusal).
fn batch_limits(fields: &Map<String, Value>) -> [(&'static str, bool, &'static str); 6] {
    let set = |k: &str| fields.get(k).is_some_and(|v| !v.is_null());
    let is = |k: &str, v: Value| fields.get(k) == Some(&v);
    [
        (
            "stream",
            is("stream", Value::Bool(true)),
            "Batch chat completions do not support streaming: set stream to false.",
        ),
        (
            "use_beam_search",
            is("use_beam_search", Value::Bool(true)),
            "Batch chat completions do not support beam search: set use_beam_search to false.",
        ),
        (
            "n",
            set("n") && !is("n", Value::from(1)),
            "Batch chat completions do not support n > 1: set n to 1.",
        ),
        (
            "tools",
            fields
                .get("tools")
                .is_some_and(|t| t.as_array().map_or(!t.is_null(), |a| !a.is_empty())),
            "Batch chat completions do not support tools.",
        ),
        (
            "prompt_logprobs",
            set("prompt_logprobs"),
            "Batch chat completions do not return prompt_logprobs.",
        ),
        (
            "return_token_ids",
            is("return_token_ids", Value::Bool(true)),
            "Batch chat completions do not return token ids (one place for N prompts' ids).",
        ),
    ]
}

impl ChatBatchCall {
    /// The body's conversations as chat calls; `request_id_header`: the request's
    /// `X-Request-Id` (each conversation's engine id is still its own).
    pub fn new(
        ctx: &ApiContext,
        body: &[u8],
        request_id_header: Option<String>,
    ) -> Result<Self, ApiError> {
        let mut fields = json_object(body)?;
        let list = |i: Option<usize>| {
            let (param, what) = match i {
                None => (
                    "messages",
                    "messages must be a non-empty list of conversations",
                ),
                Some(_) => (
                    "messages",
                    "each conversation must be a non-empty list of messages",
                ),
            };
            let at = i.map(|i| format!(" (messages[{i}])")).unwrap_or_default();
            ApiError::bad_param(param, format!("{what}{at}."))
        };
        let conversations = match fields.remove("messages") {
            Some(Value::Array(c)) if !c.is_empty() => c,
            _ => return Err(list(None)),
        };
        for (field, asked, refusal) in batch_limits(&fields) {
            if asked {
                return Err(ApiError::bad_param(field, refusal));
            }
        }
        let mut calls = Vec::with_capacity(conversations.len());
        for (i, conversation) in conversations.into_iter().enumerate() {
            if conversation.as_array().is_none_or(|m| m.is_empty()) {
                return Err(list(Some(i)));
            }
            let mut one = fields.clone();
            one.insert("messages".into(), conversation);
            let mut call = ChatCall::new(ctx, parse_fields::<ChatRequest>(one)?)?;
            call.set_request_id_header(request_id_header.clone());
            calls.push(call);
        }
        let prompts = calls
            .iter_mut()
            .map(|c| std::mem::take(&mut c.prompt))
            .collect();
        Ok(ChatBatchCall {
            add_special_tokens: calls[0].add_special_tokens,
            calls,
            prompts,
        })
    }

    /// One engine request per conversation from its prompt's ids, and the response.
    pub fn plan(
        self,
        ctx: &ApiContext,
        ids: Vec<Vec<u32>>,
    ) -> Result<(Vec<GenRequest>, ChatBatchResponse), ApiError> {
        if ids.len() != self.calls.len() {
            return Err(ApiError::Internal(format!(
                "{} prompts' ids for {} conversations",
                ids.len(),
                self.calls.len()
            )));
        }
        let mut gens = Vec::with_capacity(ids.len());
        let mut parts = Vec::with_capacity(ids.len());
        for (call, ids) in self.calls.into_iter().zip(ids) {
            let (gen, resp) = call.plan(ctx, ids)?;
            gens.push(gen);
            parts.push(resp);
        }
        Ok((gens, ChatBatchResponse { parts }))
    }
}

/// The batch's response: one part per conversation, collected together (n = 1 each, so
/// choice p is conversation p's).
pub struct ChatBatchResponse {
    parts: Vec<ChatResponse>,
}

impl ChatBatchResponse {
    /// The whole body: each conversation's choice at its index, the usage summed, under the
    /// first conversation's id.
    pub fn body(&self, tok: &Tokenizer, c: Collected) -> Value {
        let choices = c
            .choices
            .into_iter()
            .zip(&self.parts)
            .enumerate()
            .map(|(i, (choice, part))| part.choice(tok, i, choice))
            .collect();
        let details = self.parts[0].head.prompt_details;
        self.parts[0].completion(choices, c.usage.body(details), Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::test_context;

    fn refusal(body: Value) -> (String, String) {
        match ChatBatchCall::new(&test_context(), body.to_string().as_bytes(), None) {
            Err(e) => (
                e.body()["error"]["param"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e.to_string(),
            ),
            Ok(_) => panic!("expected a refusal of {body}"),
        }
    }

    #[test]
    fn one_call_per_conversation() {
        let body = serde_json::json!({"messages": [
            [{"role": "user", "content": "a"}],
            [{"role": "user", "content": "b"}, {"role": "assistant", "content": "c"},
             {"role": "user", "content": "d"}],
        ], "max_tokens": 3});
        let call = ChatBatchCall::new(&test_context(), body.to_string().as_bytes(), None).unwrap();
        assert_eq!(call.prompts.len(), 2);
        assert!(call.prompts[1].contains('d') && !call.prompts[0].contains('d'));
    }

    #[test]
    fn what_a_batch_refuses_names_the_field() {
        let hi = serde_json::json!([[{"role": "user", "content": "a"}]]);
        let with = |k: &str, v: Value| serde_json::json!({"messages": hi, k: v});
        assert_eq!(refusal(with("stream", Value::Bool(true))).0, "stream");
        assert_eq!(refusal(with("n", Value::from(2))).0, "n");
        assert_eq!(
            refusal(with("use_beam_search", Value::Bool(true))).0,
            "use_beam_search"
        );
        assert_eq!(
            refusal(with("prompt_logprobs", Value::from(1))).0,
            "prompt_logprobs"
        );
        let tool = serde_json::json!([{"type": "function", "function": {"name": "f"}}]);
        assert_eq!(refusal(with("tools", tool)).0, "tools");
        assert_eq!(
            refusal(serde_json::json!({"messages": []})),
            (
                "messages".into(),
                "messages must be a non-empty list of conversations.".into()
            )
        );
        assert_eq!(
            refusal(serde_json::json!({"messages": [[{"role": "user", "content": "a"}], []]})),
            (
                "messages".into(),
                "each conversation must be a non-empty list of messages (messages[1]).".into()
            )
        );
        // A conversation's own error is the chat endpoint's.
        assert_eq!(
            refusal(with("temperature", Value::from(9))).0,
            "temperature"
        );
        // Neutral values ask for nothing.
        for (k, v) in [
            ("stream", Value::Bool(false)),
            ("n", Value::from(1)),
            ("tools", serde_json::json!([])),
        ] {
            assert!(
                ChatBatchCall::new(&test_context(), with(k, v).to_string().as_bytes(), None)
                    .is_ok()
            );
        }
    }
}
