//! From the engine's token deltas to text deltas per sequence (incremental detokenization,
//! stop strings held back while they may still match, finish reasons): the events every
//! response of chat, completions and the Responses API is built from. `EngineEvents` reads a
//! request's engine steps for both shells: its events, the engine's errors that end it, and
//! the queue time, time to first token, time between tokens and finish reasons as metrics.
use crate::engine_io::{EngineFinish, EngineStep, PositionLogprobs, PromptInfo, SequenceDelta};
use crate::errors::ApiError;
use crate::metrics::Metrics;
use crate::sequence_text::{Finish, SequenceText};
use crate::text::tokenizer::Tokenizer;
use crate::validation::GenParams;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug)]
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
    /// The step's token ids (for `return_token_ids`).
    pub token_ids: Vec<u32>,
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
            token_ids: d.token_ids,
            logprobs: d.logprobs,
            finish,
        }))
    }
}

/// One request's engine steps, read in order.
pub struct EngineEvents {
    metrics: Arc<Metrics>,
    deltas: TextDeltas,
    /// When the request started, for the time to first token.
    start: Instant,
    last_token: Option<Instant>,
    /// Per sequence: whether the engine itself has finished it (a stop string ends a
    /// sequence the engine still runs, which the shell must then abort).
    engine_finished: Vec<bool>,
}

impl EngineEvents {
    pub fn new(
        metrics: Arc<Metrics>,
        tokenizer: Arc<Tokenizer>,
        eos: Arc<[u32]>,
        prompt_ids: &[u32],
        p: &GenParams,
        start: Instant,
    ) -> Self {
        EngineEvents {
            metrics,
            deltas: TextDeltas::new(tokenizer, eos, prompt_ids, p),
            start,
            last_token: None,
            engine_finished: vec![false; p.n as usize],
        }
    }

    /// Every sequence has its finish reason: no more events.
    pub fn all_finished(&self) -> bool {
        self.deltas.all_finished()
    }

    /// The engine has finished every sequence: nothing to abort.
    pub fn engine_done(&self) -> bool {
        self.engine_finished.iter().all(|f| *f)
    }

    /// The events of one engine step; an error ends the request.
    pub fn process(&mut self, step: EngineStep) -> Result<Vec<GenEvent>, ApiError> {
        let mut events = vec![];
        if let Some(p) = step.prompt {
            self.metrics.queue_time.observe(p.queue_time_s as f64);
            events.push(GenEvent::Prompt(p));
        }
        let now = Instant::now();
        if step.sequences.iter().any(|d| !d.token_ids.is_empty()) {
            let since = self.last_token.unwrap_or(self.start);
            let h = match self.last_token {
                None => &self.metrics.ttft,
                Some(_) => &self.metrics.itl,
            };
            h.observe((now - since).as_secs_f64());
            self.last_token = Some(now);
        }
        for d in step.sequences {
            if let Some(f) = self.engine_finished.get_mut(d.index as usize) {
                *f |= d.finish != EngineFinish::Running;
            }
            if self.deltas.finished(d.index) == Some(true) {
                continue;
            }
            if d.finish == EngineFinish::Error {
                let error = step.error.unwrap_or_else(|| "engine error".into());
                return Err(match step.error_param {
                    Some(param) => ApiError::bad_param(&param, error),
                    None => ApiError::Internal(error),
                });
            }
            let Some(out) = self.deltas.push(d)? else {
                continue;
            };
            if let Some(f) = &out.finish {
                self.metrics
                    .request_success
                    .with_label_values(&[f.reason])
                    .inc();
            }
            events.push(GenEvent::Output(out));
        }
        Ok(events)
    }
}
