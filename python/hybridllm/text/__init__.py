"""Text handling in Python: tokenizer, chat template, incremental detokenization, stop strings.

Mirrors the Rust frontend's `text` module rule for rule; the conformance suite keeps them equal.
"""
