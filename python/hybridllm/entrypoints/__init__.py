"""User-facing entry points: the offline LLM class, the HTTP servers, the gRPC worker."""
