"""Embeddings and pooling entrypoints: the offline LLM's embed()/encode() and the input rules
an HTTP frontend shares."""
