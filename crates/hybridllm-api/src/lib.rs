//! hybridllm's OpenAI layer, written once: what a request may ask for (validation into
//! validated parameters), the typed errors and their bodies, prompts (chat templates,
//! tokenization) and text (incremental detokenization, stop strings). No I/O: the Rust
//! frontend (axum, tonic) and the Python fallback (through the `hybridllm-py` extension)
//! are shells around it.
pub mod aggregate;
pub mod auth;
pub mod beam_search;
pub mod chat;
pub mod chat_batch;
pub mod completions;
pub mod context;
pub mod cors;
pub mod embeddings;
pub mod engine_io;
pub mod errors;
pub mod generate_tokens;
pub mod invocations;
pub mod limits;
pub mod logprobs;
pub mod metrics;
pub mod openapi;
pub mod prompt;
pub mod reasoning;
pub mod request;
pub mod response_store;
pub mod responses;
pub mod root_path;
pub mod sampling;
pub mod sequence_text;
pub mod sse;
pub mod structured;
pub mod text;
pub mod text_deltas;
pub mod tokenize;
pub mod tools;
pub mod usage;
pub mod validation;
