//! The HF `tokenizers` wrapper: encode for prompts, decode for outputs, honouring
//! `skip_special_tokens` (`spaces_between_special_tokens` is read, with no effect: vLLM's).
use std::collections::HashSet;
use std::path::Path;

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Added tokens marked special ([CLS], [SEP], </s>): kept when token ids are truncated.
    special: HashSet<u32>,
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

    /// Any padding or truncation the file carries (sentence-transformers' files pad to 128)
    /// is switched off: the server applies the model's own limits and never pads.
    pub fn new(mut inner: tokenizers::Tokenizer) -> Self {
        inner.with_padding(None);
        let _ = inner.with_truncation(None);
        let decoder = inner.get_added_tokens_decoder();
        let special = decoder
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| *id)
            .collect();
        Tokenizer { inner, special }
    }

    /// The tokenizer as its tokenizer.json holds it.
    pub fn to_json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::to_value(&self.inner).map_err(|e| anyhow::anyhow!("tokenizer JSON: {e}"))
    }

    /// Special tokens the post-processor adds to one sequence ([CLS] and [SEP]: 2).
    pub fn num_special_tokens(&self) -> usize {
        self.inner
            .get_post_processor()
            .map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, false))
    }

    /// `text`'s ids, at most `limit` of them, cut as transformers cuts one sequence: the text
    /// to the limit less the special tokens, which are then added (sentence-transformers).
    /// Without special tokens, the first `limit` ids.
    pub fn encode_truncated(
        &self,
        text: &str,
        add_special_tokens: bool,
        limit: Option<usize>,
    ) -> Result<Vec<u32>, String> {
        let ids = self.encode(text, add_special_tokens)?;
        let Some(limit) = limit.filter(|&l| ids.len() > l) else {
            return Ok(ids);
        };
        if !add_special_tokens {
            return Ok(ids[..limit].to_vec());
        }
        let room = limit.saturating_sub(self.num_special_tokens());
        let fail = |e: tokenizers::Error| format!("tokenization failed: {e}");
        let mut content = self.inner.encode_fast(text, false).map_err(fail)?;
        content.truncate(room, 0, tokenizers::TruncationDirection::Right);
        let done = self.inner.post_process(content, None, true).map_err(fail)?;
        Ok(done.get_ids().to_vec())
    }

    /// The first `limit` of token ids given by a client, keeping a trailing special token
    /// ([SEP]) last, as the ids of a truncated text would end.
    pub fn truncate_ids(&self, ids: &[u32], limit: Option<usize>) -> Vec<u32> {
        match limit {
            Some(l) if ids.len() > l => match ids.last() {
                Some(last) if self.special.contains(last) && l >= 2 => {
                    let mut out = ids[..l - 1].to_vec();
                    out.push(*last);
                    out
                }
                _ => ids[..l].to_vec(),
            },
            _ => ids.to_vec(),
        }
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

    /// Decodes ids: exactly `tokenizers`' decode. `spaces_between_special_tokens` has no
    /// effect, as in vLLM with a fast tokenizer (its detokenizer, `tokenizers`' own
    /// DecodeStream, writes special tokens with no spaces added; only transformers' slow
    /// tokenizers add them).
    pub fn decode(&self, ids: &[u32], o: DecodeOpts) -> Result<String, String> {
        self.inner
            .decode(ids, o.skip_special_tokens)
            .map_err(|e| format!("detokenization failed: {e}"))
    }

    /// One token's string in the vocabulary (byte-level marks and all), "" for an id
    /// outside it.
    pub fn id_to_token(&self, id: u32) -> String {
        self.inner.id_to_token(id).unwrap_or_default()
    }

    /// The text of one token for logprobs (special tokens included).
    pub fn token_text(&self, id: u32) -> String {
        self.inner.decode(&[id], false).unwrap_or_default()
    }
}
