"""Generation entry points beyond plain sampling (beam search)."""
