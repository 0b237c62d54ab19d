//! Non-streamed responses: a request's events collected into one output per choice, the
//! usage and the prompt logprobs. Shared by chat and completions.
use super::logprobs::prompt_logprobs;
use super::response::Usage;
use super::text_deltas::{Finish, GenEvent};
use crate::engine_client::pb;
use crate::errors::ApiError;
use hybridllm_api::text::tokenizer::Tokenizer;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

/// Everything one sequence produced.
pub struct ChoiceOutput {
    pub text: String,
    /// One per generated token, when asked for.
    pub logprobs: Vec<pb::PositionLogprobs>,
    pub finish: Finish,
}

pub struct Collected {
    /// Choice `p * n + i` is sequence `i` of prompt `p`.
    pub choices: Vec<ChoiceOutput>,
    pub usage: Usage,
    /// Per prompt: vLLM's `prompt_logprobs`, null unless asked for.
    pub prompt_logprobs: Vec<Value>,
    /// Per prompt: the same positions as the engine sent them (empty unless asked for).
    pub prompt_positions: Vec<Vec<pb::PositionLogprobs>>,
}

/// Runs the request to its end (the first error ends it). `events` are tagged with their
/// prompt index, as `generate_many` yields them.
pub async fn collect(
    events: impl Stream<Item = Result<(usize, GenEvent), ApiError>>,
    n: usize,
    prompt_lens: Vec<usize>,
    tokenizer: &Tokenizer,
) -> Result<Collected, ApiError> {
    let num_prompts = prompt_lens.len();
    let mut texts = vec![String::new(); num_prompts * n];
    let mut logprobs = vec![vec![]; num_prompts * n];
    let mut finishes: Vec<Option<Finish>> = vec![None; num_prompts * n];
    let mut usage = Usage::new(prompt_lens);
    let mut prompt_lps = vec![Value::Null; num_prompts];
    let mut prompt_positions = vec![vec![]; num_prompts];
    let mut events = std::pin::pin!(events);
    while let Some(ev) = events.next().await {
        match ev? {
            (p, GenEvent::Prompt(info)) => {
                usage.on_prompt(p, &info);
                if !info.prompt_logprobs.is_empty() {
                    prompt_lps[p] = prompt_logprobs(tokenizer, &info.prompt_logprobs);
                    prompt_positions[p] = info.prompt_logprobs;
                }
            }
            (p, GenEvent::Output(out)) => {
                let c = p * n + out.index as usize;
                usage.on_output(out.num_tokens);
                texts[c].push_str(&out.text);
                logprobs[c].extend(out.logprobs);
                if out.finish.is_some() {
                    finishes[c] = out.finish;
                }
            }
        }
    }
    let choices = texts
        .into_iter()
        .zip(logprobs)
        .zip(finishes)
        .map(|((text, logprobs), finish)| ChoiceOutput {
            text,
            logprobs,
            // The stream ended without a finish reason for it.
            finish: finish.unwrap_or(Finish {
                reason: "abort",
                stop_reason: Value::Null,
            }),
        })
        .collect();
    Ok(Collected {
        choices,
        usage,
        prompt_logprobs: prompt_lps,
        prompt_positions,
    })
}
