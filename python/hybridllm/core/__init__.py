"""Scheduling state: sequences, the paged KV-cache manager and the token-budget scheduler."""
