"""Generation, below both training and evaluation: samples -> prompts -> KV-cached decode -> text."""
