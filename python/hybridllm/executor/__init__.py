"""Device-side work: KV-cache sizing, input preparation, the forward pass, CUDA graphs."""
