"""GUI agent action reward (seed 004)."""
