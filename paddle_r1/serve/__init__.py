"""``paddle-r1 serve``: an OpenAI-compatible chat-completions server for a checkpoint, decoding the requests that
arrive together as one batch through the rollout's KV-cached loop (for the LLM judge, quick checks, and tests)."""
