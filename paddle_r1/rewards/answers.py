"""Answer-content rewards: counting, math, multiple choice, yes/no, and the accuracy router."""
