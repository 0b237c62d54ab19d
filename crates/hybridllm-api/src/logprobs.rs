//! Logprob formatting: OpenAI's chat shape (`content: [{token, logprob, bytes, top_logprobs}]`)
//! and the legacy completions shape (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`).
use crate::engine_io::{PositionLogprobs, TokenLogprob};
use crate::text::tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

/// JSON has no -inf/NaN; vLLM reports -9999.0 for them.
pub fn finite(x: f32) -> f64 {
    if x.is_finite() {
        x as f64
    } else {
        -9999.0
    }
}

fn entry(tok: &Tokenizer, t: &TokenLogprob) -> Value {
    let s = tok.token_text(t.token_id);
    json!({"token": s, "logprob": finite(t.logprob), "bytes": s.as_bytes()})
}

pub fn chat_content(tok: &Tokenizer, lps: &[PositionLogprobs], top_n: u32) -> Vec<Value> {
    lps.iter()
        .filter_map(|p| {
            let t = p.token.as_ref()?;
            let mut e = entry(tok, t);
            let top: Vec<Value> = p
                .top
                .iter()
                .take(top_n as usize)
                .map(|x| entry(tok, x))
                .collect();
            e["top_logprobs"] = Value::Array(top);
            Some(e)
        })
        .collect()
}

/// Accumulates the completions shape; `offset` is the text offset of the next token.
#[derive(Default)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Value>,
    pub top_logprobs: Vec<Value>,
    pub text_offset: Vec<usize>,
    pub offset: usize,
}

impl CompletionLogprobs {
    pub fn push(&mut self, tok: &Tokenizer, p: &PositionLogprobs, top_n: u32) {
        let Some(t) = p.token.as_ref() else { return };
        let s = tok.token_text(t.token_id);
        self.text_offset.push(self.offset);
        self.offset += s.len();
        self.token_logprobs.push(if t.logprob.is_nan() {
            Value::Null
        } else {
            json!(finite(t.logprob))
        });
        let mut top = Map::new();
        for x in p.top.iter().take(top_n as usize) {
            top.insert(tok.token_text(x.token_id), json!(finite(x.logprob)));
        }
        if top_n > 0 {
            // vLLM always lists the sampled token among the alternatives.
            top.entry(s.clone()).or_insert(json!(finite(t.logprob)));
        }
        self.top_logprobs.push(if t.logprob.is_nan() {
            Value::Null
        } else {
            Value::Object(top)
        });
        self.tokens.push(s);
    }

    pub fn to_json(&self) -> Value {
        json!({
            "text_offset": self.text_offset,
            "token_logprobs": self.token_logprobs,
            "tokens": self.tokens,
            "top_logprobs": self.top_logprobs,
        })
    }
}

/// vLLM's `prompt_logprobs`: per prompt token `{token_id: {logprob, rank, decoded_token}}`,
/// the first entry null.
pub fn prompt_logprobs(tok: &Tokenizer, lps: &[PositionLogprobs]) -> Value {
    let mut out = vec![];
    for (i, p) in lps.iter().enumerate() {
        let Some(t) = p.token.as_ref().filter(|t| i > 0 && !t.logprob.is_nan()) else {
            out.push(Value::Null);
            continue;
        };
        let mut m = Map::new();
        for x in std::iter::once(t).chain(p.top.iter()) {
            m.entry(x.token_id.to_string()).or_insert(json!({
                "logprob": finite(x.logprob), "rank": x.rank, "decoded_token": tok.token_text(x.token_id)
            }));
        }
        out.push(Value::Object(m));
    }
    Value::Array(out)
}
