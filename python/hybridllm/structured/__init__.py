"""Structured outputs: output constraints compiled with llguidance against the model's
tokenizer (grammar.py) and each step's token bitmask filled while the forward pass runs
(masks.py). docs/structured_outputs.md tells the whole path."""
