//! Server-sent events as OpenAI clients parse them: `data: <json>\n\n` per chunk, an error
//! chunk (`data: {"error": {...}}`) if generation fails mid-stream, then `data: [DONE]\n\n`.
//! The frames only: the shells write them out.
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

/// One SSE event: `data: <json>\n\n`, serialized straight into the frame's buffer.
pub fn frame<T: Serialize + ?Sized>(v: &T) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    // Serializing our own types and JSON values into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut buf, v);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// A named event (the Responses API's), `event: <name>\ndata: <json>\n\n`, appended to `buf`
/// so that events produced together can leave as one chunk.
pub fn write_named_frame<T: Serialize + ?Sized>(buf: &mut Vec<u8>, event: &str, v: &T) {
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(event.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    let _ = serde_json::to_writer(&mut *buf, v);
    buf.extend_from_slice(b"\n\n");
}

pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// The envelope of every streamed chunk, borrowed from the request's `ChunkHead`: serialized
/// without building a JSON tree per token. Field order is the wire order.
#[derive(Serialize)]
struct Chunk<'a, C: Serialize> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: &'a [C],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<&'a Value>,
    /// vLLM's `return_token_ids` on a chat stream's role chunks: the prompt's ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<&'a [u32]>,
}

/// What every streamed chunk of one response repeats.
pub struct ChunkHead {
    pub id: String,
    pub object: &'static str,
    pub created: i64,
    pub model: String,
    /// `include_usage`: every chunk carries `usage`, null but on the last.
    pub include_usage: bool,
    /// `continuous_usage_stats` (with `include_usage`, as vLLM): each chunk's `usage` is the
    /// running count of the choice it carries instead of null.
    pub continuous_usage: bool,
    /// `--enable-prompt-tokens-details`.
    pub prompt_details: bool,
}

impl ChunkHead {
    /// A framed chunk of these choices (usage null if included at all).
    pub fn frame<C: Serialize>(&self, choices: &[C]) -> Bytes {
        self.frame_with_usage(choices, self.include_usage.then_some(&Value::Null))
    }

    /// A chunk of one choice, with that choice's running usage under `continuous_usage`.
    pub fn frame_running<C: Serialize>(&self, choices: &[C], prompt: usize, done: usize) -> Bytes {
        self.frame_first(choices, None, prompt, done)
    }

    /// `frame_running`, with the prompt's ids at the top (a chat stream's first chunks).
    pub fn frame_first<C: Serialize>(
        &self,
        choices: &[C],
        prompt_ids: Option<&[u32]>,
        prompt: usize,
        done: usize,
    ) -> Bytes {
        let usage = self.continuous_usage.then(|| {
            serde_json::json!({
                "prompt_tokens": prompt,
                "completion_tokens": done,
                "total_tokens": prompt + done,
            })
        });
        let usage = match &usage {
            Some(u) => Some(u),
            None => self.include_usage.then_some(&Value::Null),
        };
        self.frame_full(choices, usage, prompt_ids)
    }

    /// The last chunk: no choices, the usage.
    pub fn usage_frame(&self, usage: &Value) -> Bytes {
        self.frame_with_usage::<Value>(&[], Some(usage))
    }

    fn frame_with_usage<C: Serialize>(&self, choices: &[C], usage: Option<&Value>) -> Bytes {
        self.frame_full(choices, usage, None)
    }

    fn frame_full<C: Serialize>(
        &self,
        choices: &[C],
        usage: Option<&Value>,
        prompt_token_ids: Option<&[u32]>,
    ) -> Bytes {
        frame(&Chunk {
            id: &self.id,
            object: self.object,
            created: self.created,
            model: &self.model,
            choices,
            usage,
            prompt_token_ids,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing() {
        let head = ChunkHead {
            id: "x".into(),
            object: "chat.completion.chunk",
            created: 7,
            model: "m".into(),
            include_usage: true,
            continuous_usage: false,
            prompt_details: false,
        };
        assert_eq!(
            &head.frame(&[1])[..],
            b"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":[1],\"usage\":null}\n\n"
        );
        assert_eq!(
            &head.usage_frame(&serde_json::json!({"a": 1}))[..],
            b"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":[],\"usage\":{\"a\":1}}\n\n"
        );
        let mut buf = vec![];
        write_named_frame(&mut buf, "e", &serde_json::json!({"b": 2}));
        assert_eq!(buf, b"event: e\ndata: {\"b\":2}\n\n");
    }
}
