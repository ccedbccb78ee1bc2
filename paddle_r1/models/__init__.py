"""Model loading, tiny checkpoints, coordinate systems and shared forward pieces."""
