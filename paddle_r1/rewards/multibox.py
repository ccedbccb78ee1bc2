"""Multi-box grounding rewards (seed 000 abs_box): Hungarian matching per label."""
