//! Incremental detokenization (the vLLM/TGI prefix/read-offset algorithm).
//!
//! Decoding token by token is wrong for byte-level BPE (a character may span tokens) and for
//! SentencePiece (leading-space rules depend on neighbours). So each step decodes a short
//! window of earlier tokens plus the new ones and emits only the text beyond the window's
//! previous decode; output ending in U+FFFD (an incomplete UTF-8 sequence) is held back.
use crate::text::tokenizer::{DecodeOpts, Tokenizer};

/// How many prompt tokens seed the window, so the first output token decodes in context.
const PROMPT_CONTEXT: usize = 5;

pub struct IncrementalDetokenizer {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    opts: DecodeOpts,
}

impl IncrementalDetokenizer {
    pub fn new(prompt_ids: &[u32], opts: DecodeOpts) -> Self {
        let ctx = &prompt_ids[prompt_ids.len().saturating_sub(PROMPT_CONTEXT)..];
        IncrementalDetokenizer {
            ids: ctx.to_vec(),
            prefix_offset: 0,
            read_offset: ctx.len(),
            opts,
        }
    }

    /// Adds tokens and returns the newly readable text (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, new_ids: &[u32]) -> Result<String, String> {
        self.ids.extend_from_slice(new_ids);
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset], self.opts)?;
        let full = tok.decode(&self.ids[self.prefix_offset..], self.opts)?;
        if full.len() > prefix.len()
            && !full.ends_with('\u{FFFD}')
            && full.is_char_boundary(prefix.len())
        {
            let delta = full[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            Ok(delta)
        } else {
            Ok(String::new())
        }
    }

    /// Text still held back when the sequence ends. A character left incomplete (the model
    /// stopped mid-character, e.g. at max_tokens) is dropped rather than sent as U+FFFD.
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<String, String> {
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset], self.opts)?;
        let full = tok.decode(&self.ids[self.prefix_offset..], self.opts)?;
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(
            if full.len() > prefix.len() && full.is_char_boundary(prefix.len()) {
                full[prefix.len()..]
                    .trim_end_matches('\u{FFFD}')
                    .to_string()
            } else {
                String::new()
            },
        )
    }
}
