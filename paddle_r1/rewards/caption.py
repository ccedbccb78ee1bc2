"""Caption rewards: METEOR and the METEOR + judge mix."""
