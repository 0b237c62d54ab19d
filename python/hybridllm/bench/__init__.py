"""Benchmarks: offline throughput against transformers, and serving (latency and load)."""
