"""The task families of rewards, one module each; importing them registers their rewards."""
