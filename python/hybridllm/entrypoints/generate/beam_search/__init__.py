"""Beam search: the offline `LLM.beam_search`, the serving glue, and their shared types."""
