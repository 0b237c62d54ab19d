"""Text in Python: the engine's tokenizer (`tokenizers`), chat prompts through the API core,
and encoder-input truncation. Detokenization and stop strings are the core's
(`hybridllm._api.SequenceText`), as in the Rust frontend."""
