//! The HF `tokenizers` wrapper: encode for prompts, decode for outputs, honouring
//! `skip_special_tokens` and `spaces_between_special_tokens`.
use std::collections::HashSet;
use std::path::Path;

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Added tokens (e.g. `<|im_start|>`): decoded as their own segments, like transformers.
    added: HashSet<u32>,
}

#[derive(Clone, Copy, Debug)]
pub struct DecodeOpts {
    pub skip_special_tokens: bool,
    pub spaces_between_special_tokens: bool,
}

impl Default for DecodeOpts {
    fn default() -> Self {
        DecodeOpts {
            skip_special_tokens: true,
            spaces_between_special_tokens: true,
        }
    }
}

impl Tokenizer {
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow::anyhow!("cannot load tokenizer {}: {e}", path.display()))?;
        Ok(Tokenizer::new(inner))
    }

    pub fn new(inner: tokenizers::Tokenizer) -> Self {
        let added = inner.get_added_tokens_decoder().keys().copied().collect();
        Tokenizer { inner, added }
    }

    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, String> {
        self.inner
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("tokenization failed: {e}"))
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Decodes ids. With special tokens kept and `spaces_between_special_tokens`, added tokens
    /// are separated from neighbouring text by a space (transformers' slow-tokenizer rule);
    /// otherwise this is exactly `tokenizers`' decode.
    pub fn decode(&self, ids: &[u32], o: DecodeOpts) -> Result<String, String> {
        let plain = |ids: &[u32]| {
            self.inner
                .decode(ids, o.skip_special_tokens)
                .map_err(|e| format!("detokenization failed: {e}"))
        };
        if o.skip_special_tokens
            || !o.spaces_between_special_tokens
            || !ids.iter().any(|i| self.added.contains(i))
        {
            return plain(ids);
        }
        let mut parts: Vec<String> = Vec::new();
        let mut run: Vec<u32> = Vec::new();
        for &id in ids {
            if self.added.contains(&id) {
                if !run.is_empty() {
                    parts.push(plain(&run)?);
                    run.clear();
                }
                parts.push(plain(&[id])?);
            } else {
                run.push(id);
            }
        }
        if !run.is_empty() {
            parts.push(plain(&run)?);
        }
        Ok(parts.join(" "))
    }

    /// The text of one token for logprobs (special tokens included).
    pub fn token_text(&self, id: u32) -> String {
        self.inner.decode(&[id], false).unwrap_or_default()
    }
}
