//! Non-streamed responses: a request's events collected into one output per choice, the
//! usage and the prompt logprobs. Shared by chat and completions.
use crate::engine_io::PositionLogprobs;
use crate::logprobs::prompt_logprobs;
use crate::sequence_text::Finish;
use crate::text::tokenizer::Tokenizer;
use crate::text_deltas::GenEvent;
use crate::usage::Usage;
use serde_json::Value;

/// Everything one sequence produced.
pub struct ChoiceOutput {
    pub text: String,
    /// The generated token ids.
    pub token_ids: Vec<u32>,
    /// One per generated token, when asked for.
    pub logprobs: Vec<PositionLogprobs>,
    pub finish: Finish,
}

pub struct Collected {
    /// Choice `p * n + i` is sequence `i` of prompt `p`.
    pub choices: Vec<ChoiceOutput>,
    pub usage: Usage,
    /// Per prompt: vLLM's `prompt_logprobs`, null unless asked for.
    pub prompt_logprobs: Vec<Value>,
    /// Per prompt: the same positions as the engine sent them (empty unless asked for).
    pub prompt_positions: Vec<Vec<PositionLogprobs>>,
}

/// Collects the events of a request, tagged with their prompt index, until it ends.
pub struct Collector {
    n: usize,
    texts: Vec<String>,
    token_ids: Vec<Vec<u32>>,
    logprobs: Vec<Vec<PositionLogprobs>>,
    finishes: Vec<Option<Finish>>,
    usage: Usage,
    prompt_lps: Vec<Value>,
    prompt_positions: Vec<Vec<PositionLogprobs>>,
}

impl Collector {
    /// `n` choices for each prompt of `prompt_lens` (the prompts' lengths as tokenized here).
    pub fn new(n: usize, prompt_lens: Vec<usize>) -> Self {
        let num_prompts = prompt_lens.len();
        Collector {
            n,
            texts: vec![String::new(); num_prompts * n],
            token_ids: vec![vec![]; num_prompts * n],
            logprobs: vec![vec![]; num_prompts * n],
            finishes: vec![None; num_prompts * n],
            usage: Usage::new(prompt_lens),
            prompt_lps: vec![Value::Null; num_prompts],
            prompt_positions: vec![vec![]; num_prompts],
        }
    }

    pub fn push(&mut self, tokenizer: &Tokenizer, p: usize, ev: GenEvent) {
        match ev {
            GenEvent::Prompt(info) => {
                self.usage.on_prompt(p, &info);
                if !info.prompt_logprobs.is_empty() {
                    self.prompt_lps[p] = prompt_logprobs(tokenizer, &info.prompt_logprobs);
                    self.prompt_positions[p] = info.prompt_logprobs;
                }
            }
            GenEvent::Output(out) => {
                let c = p * self.n + out.index as usize;
                self.usage.on_output(out.num_tokens);
                self.texts[c].push_str(&out.text);
                self.token_ids[c].extend(out.token_ids);
                self.logprobs[c].extend(out.logprobs);
                if out.finish.is_some() {
                    self.finishes[c] = out.finish;
                }
            }
        }
    }

    pub fn finish(self) -> Collected {
        let choices = self
            .texts
            .into_iter()
            .zip(self.token_ids)
            .zip(self.logprobs)
            .zip(self.finishes)
            .map(|(((text, token_ids), logprobs), finish)| ChoiceOutput {
                text,
                token_ids,
                logprobs,
                // The stream ended without a finish reason for it.
                finish: finish.unwrap_or(Finish {
                    reason: "abort",
                    stop_reason: Value::Null,
                }),
            })
            .collect();
        Collected {
            choices,
            usage: self.usage,
            prompt_logprobs: self.prompt_lps,
            prompt_positions: self.prompt_positions,
        }
    }
}
