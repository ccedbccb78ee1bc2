"""``paddle-r1 view``: a self-contained HTML report of what a run's model answered (images with predicted and
true boxes, completions, reward scores, advantages) and its curves, from a training run's or an eval's files."""
