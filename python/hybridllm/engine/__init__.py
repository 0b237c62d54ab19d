"""The engine loop: LLMEngine.step() and its asyncio wrapper AsyncLLMEngine."""
