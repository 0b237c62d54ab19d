//! One sequence's text as the engine's tokens arrive: incremental detokenization, stop strings
//! (held back while they may still match) and the finish reason the API reports. The Rust
//! frontend, the Python fallback and the offline engine all go through it.
use crate::text::detokenizer::IncrementalDetokenizer;
use crate::text::stop::{StopChecker, StopOutcome};
use crate::text::tokenizer::{DecodeOpts, Tokenizer};
use serde_json::{json, Value};

/// How the engine says a sequence stands after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineFinish {
    Running,
    /// EOS or a stop token id (`stop_token_id` says which).
    Stop,
    Length,
    Abort,
    /// The engine failed it: the shell ends the request with the engine's error message
    /// rather than pushing this here.
    Error,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub reason: &'static str,
    /// vLLM's `stop_reason`: the matched stop string, or a stop token id (null for EOS).
    pub stop_reason: Value,
}

pub struct SequenceText {
    detok: IncrementalDetokenizer,
    stop: StopChecker,
    include_stop: bool,
    finished: bool,
}

impl SequenceText {
    pub fn new(
        prompt_ids: &[u32],
        decode: DecodeOpts,
        stops: Vec<String>,
        include_stop: bool,
    ) -> Self {
        SequenceText {
            detok: IncrementalDetokenizer::new(prompt_ids, decode),
            stop: StopChecker::new(stops, include_stop),
            include_stop,
            finished: false,
        }
    }

    /// Set once the sequence has its finish reason: later tokens (the engine may still send
    /// some after a stop string matched) are not text.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The text `ids` add and, on the sequence's last output, why it finished.
    /// `stop_token_id`: the engine's word on which token ended it; `eos`: the model's EOS ids
    /// (a stop on one of them reports no `stop_reason`).
    pub fn push(
        &mut self,
        tok: &Tokenizer,
        ids: &[u32],
        engine: EngineFinish,
        stop_token_id: Option<u32>,
        eos: &[u32],
    ) -> Result<(String, Option<Finish>), String> {
        // The EOS / stop token that ended the sequence is not part of the text.
        let mut text_ids = ids;
        if engine == EngineFinish::Stop && !self.include_stop {
            if let (Some(stop_id), Some(last)) = (stop_token_id, ids.last()) {
                if *last == stop_id {
                    text_ids = &ids[..ids.len() - 1];
                }
            }
        }
        let mut text = self.detok.push(tok, text_ids)?;
        if engine != EngineFinish::Running {
            text.push_str(&self.detok.flush(tok)?);
        }
        let mut finish = None;
        match self.stop.push(&text) {
            StopOutcome::Continue(t) => text = t,
            StopOutcome::Stopped(t, s) => {
                text = t;
                finish = Some(Finish {
                    reason: "stop",
                    stop_reason: json!(s),
                });
            }
        }
        if finish.is_none() && engine != EngineFinish::Running {
            text.push_str(&self.stop.flush());
            let (reason, stop_reason) = match engine {
                EngineFinish::Length => ("length", Value::Null),
                EngineFinish::Abort => ("abort", Value::Null),
                _ => match stop_token_id {
                    Some(id) if !eos.contains(&id) => ("stop", json!(id)),
                    _ => ("stop", Value::Null),
                },
            };
            finish = Some(Finish {
                reason,
                stop_reason,
            });
        }
        self.finished |= finish.is_some();
        Ok((text, finish))
    }
}
