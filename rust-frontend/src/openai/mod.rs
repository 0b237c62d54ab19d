//! OpenAI-compatible endpoints (with vLLM's extensions).
//!
//! The handlers (`chat`, `completions`, `embeddings`, `responses`, `models`, `tokenizer_info`)
//! never import each other: what they share lives in the modules below them (`request`,
//! `prompt`, `generate`, `text_deltas`, `aggregate`, `sse`; response shapes, logprobs and usage are the core's). Only
//! `invocations` (vLLM's /invocations) sits above three of them and dispatches. This module
//! only declares them.
pub mod aggregate;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod generate;
pub mod invocations;
pub mod models;
pub mod prompt;
pub mod request;
pub mod responses;
pub mod sse;
pub mod text_deltas;
pub mod tokenizer_info;
