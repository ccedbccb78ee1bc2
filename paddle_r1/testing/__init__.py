"""Tools that build tiny checkpoints for tests, the demo and the selftest (no hub download)."""
