"""Product attribute rewards (seed 002): length / width / height."""
