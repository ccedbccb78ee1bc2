"""The names of the algorithms a config chooses between, in one place below everything else: the config checks its
keys against them, and each implementation's table is keyed by them (``tests/test_algorithms.py`` proves that every
name has an implementation and every implementation a name)."""

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")  # TRL 1.16's; algorithms/loss.py
ADV_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus", "dr_grpo")  # algorithms/advantages.py
SCALE_REWARDS = ("group", "batch", "none")  # group_advantages' divisor
KL_ESTIMATORS = ("k1", "k2", "k3")  # algorithms/loss.py
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")  # algorithms/loss.py; sequence: GSPO
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")  # algorithms/groups.py
SHARDING_STAGES = ("", "stage1", "stage2")  # parallel/sharding.py
