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

/// A token as logprobs name it: its text, or vLLM's `token_id:<id>` with
/// `return_tokens_as_token_ids` (for tokens that are not valid text on their own).
fn token_name(tok: &Tokenizer, id: u32, as_ids: bool) -> String {
    match as_ids {
        true => format!("token_id:{id}"),
        false => tok.token_text(id),
    }
}

fn entry(tok: &Tokenizer, t: &TokenLogprob, as_ids: bool) -> Value {
    let s = token_name(tok, t.token_id, as_ids);
    json!({"token": s, "logprob": finite(t.logprob), "bytes": s.as_bytes()})
}

pub fn chat_content(
    tok: &Tokenizer,
    lps: &[PositionLogprobs],
    top_n: u32,
    as_ids: bool,
) -> Vec<Value> {
    lps.iter()
        .filter_map(|p| {
            let t = p.token.as_ref()?;
            let mut e = entry(tok, t, as_ids);
            let top: Vec<Value> = p
                .top
                .iter()
                .take(top_n as usize)
                .map(|x| entry(tok, x, as_ids))
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
    /// `return_tokens_as_token_ids`.
    pub as_ids: bool,
}

impl CompletionLogprobs {
    pub fn new(as_ids: bool) -> Self {
        CompletionLogprobs {
            as_ids,
            ..Default::default()
        }
    }

    pub fn push(&mut self, tok: &Tokenizer, p: &PositionLogprobs, top_n: u32) {
        let Some(t) = p.token.as_ref() else { return };
        let s = token_name(tok, t.token_id, self.as_ids);
        self.text_offset.push(self.offset);
        self.offset += s.len();
        self.token_logprobs.push(if t.logprob.is_nan() {
            Value::Null
        } else {
            json!(finite(t.logprob))
        });
        let mut top = Map::new();
        for x in p.top.iter().take(top_n as usize) {
            top.insert(
                token_name(tok, x.token_id, self.as_ids),
                json!(finite(x.logprob)),
            );
        }
        // vLLM always lists the sampled token among the alternatives (with `logprobs: 0`
        // too, where it is the only one).
        top.entry(s.clone()).or_insert(json!(finite(t.logprob)));
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

/// The Responses API's logprobs of output text (`include: ["message.output_text.logprobs"]`),
/// as vLLM writes them: per token `{token, logprob, bytes, top_logprobs}`, `top_logprobs` the
/// first `top_n` entries of vLLM's logprobs dict (the sampled token, then the most likely
/// others; none when `top_n` is 0). `bytes: false` is the streamed delta's shape, which has no
/// `bytes` anywhere.
pub fn responses_logprobs(
    tok: &Tokenizer,
    lps: &[PositionLogprobs],
    top_n: u32,
    bytes: bool,
) -> Vec<Value> {
    let one = |x: &TokenLogprob| {
        let s = tok.token_text(x.token_id);
        let mut e = json!({"token": s, "logprob": finite(x.logprob)});
        if bytes {
            e["bytes"] = json!(s.as_bytes());
        }
        e
    };
    lps.iter()
        .filter_map(|p| {
            let t = p.token.as_ref()?;
            let top: Vec<Value> = std::iter::once(t)
                .chain(p.top.iter().filter(|x| x.token_id != t.token_id))
                .take(top_n as usize)
                .map(one)
                .collect();
            let mut e = one(t);
            e["top_logprobs"] = Value::Array(top);
            Some(e)
        })
        .collect()
}
