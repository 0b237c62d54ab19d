//! Text processing that the worker leaves to the frontend.
pub mod chat_template;
pub mod detokenizer;
pub mod pyjson;
pub mod stop;
pub mod tokenizer;
