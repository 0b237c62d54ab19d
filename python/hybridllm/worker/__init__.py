"""Device-side work: KV-cache memory, input preparation, the forward pass (and the gRPC server)."""
