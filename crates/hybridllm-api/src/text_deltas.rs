//! From the engine's token deltas to text deltas per sequence (incremental detokenization,
//! stop strings held back while they may still match, finish reasons): the events every
//! response of chat, completions and the Responses API is built from.
use crate::engine_io::{PositionLogprobs, PromptInfo, SequenceDelta};
use crate::errors::ApiError;
use crate::sequence_text::{Finish, SequenceText};
use crate::text::tokenizer::Tokenizer;
use crate::validation::GenParams;
use std::sync::Arc;

pub enum GenEvent {
    /// The prompt facts (the first event of a prompt).
    Prompt(PromptInfo),
    Output(SeqOutput),
}

/// What one sequence produced in one engine step.
#[derive(Debug)]
pub struct SeqOutput {
    /// Which of the n sequences.
    pub index: u32,
    /// Text safe to show (stop strings held back or cut).
    pub text: String,
    pub num_tokens: usize,
    pub logprobs: Vec<PositionLogprobs>,
    /// Set on the sequence's last output.
    pub finish: Option<Finish>,
}

/// The text state of one request's n sequences.
pub struct TextDeltas {
    tokenizer: Arc<Tokenizer>,
    /// The model's EOS ids: a stop on one of them reports no `stop_reason`.
    eos: Arc<[u32]>,
    seqs: Vec<SequenceText>,
}

impl TextDeltas {
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        eos: Arc<[u32]>,
        prompt_ids: &[u32],
        p: &GenParams,
    ) -> Self {
        let seqs = (0..p.n)
            .map(|_| SequenceText::new(prompt_ids, p.decode, p.stop.clone(), p.include_stop))
            .collect();
        TextDeltas {
            tokenizer,
            eos,
            seqs,
        }
    }

    /// Whether sequence `index` has finished (None: the request has no such sequence).
    pub fn finished(&self, index: u32) -> Option<bool> {
        self.seqs.get(index as usize).map(SequenceText::finished)
    }

    pub fn all_finished(&self) -> bool {
        self.seqs.iter().all(SequenceText::finished)
    }

    /// The output of one sequence's delta; None once that sequence has finished (the engine
    /// may still send tokens after a stop string matched).
    pub fn push(&mut self, d: SequenceDelta) -> Result<Option<SeqOutput>, ApiError> {
        let Some(seq) = self.seqs.get_mut(d.index as usize) else {
            return Err(ApiError::Internal(format!(
                "engine sent unknown sequence index {}",
                d.index
            )));
        };
        if seq.finished() {
            return Ok(None);
        }
        let (text, finish) = seq
            .push(
                &self.tokenizer,
                &d.token_ids,
                d.finish,
                d.stop_token_id,
                &self.eos,
            )
            .map_err(ApiError::Internal)?;
        Ok(Some(SeqOutput {
            index: d.index,
            text,
            num_tokens: d.token_ids.len(),
            logprobs: d.logprobs,
            finish,
        }))
    }
}
