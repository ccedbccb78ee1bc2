"""LLM judge: an OpenAI-compatible chat-completions endpoint decides whether an answer matches."""
