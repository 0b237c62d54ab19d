"""The engine worker's gRPC side: the servicer, GenerateStream calls, proto conversion, client."""
