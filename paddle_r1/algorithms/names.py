"""The names of the algorithms a config chooses between, in one place for the config (its choices). The loss types,
estimators and levels are read from their registries beside the implementations (``registry.Registry``), which also
give the config each name's help and rules; scale_rewards' words are ``group_advantages``' own; the aggregations and
sharding stages are listed here (``tests/test_algorithms.py`` proves each has an implementation)."""
from .advantages import ADVANTAGE_ESTIMATORS, SCALE_REWARDS  # noqa: F401  SCALE_REWARDS: group_advantages' divisor
from .loss import KL_ESTIMATES, LOG_RATIO_LEVELS, LOSS_TYPE_RULES, SAMPLER_CORRECTIONS

# each checks its own key's rules
REGISTRIES = (LOSS_TYPE_RULES, ADVANTAGE_ESTIMATORS, KL_ESTIMATES, LOG_RATIO_LEVELS, SAMPLER_CORRECTIONS)
LOSS_TYPES = LOSS_TYPE_RULES.names  # TRL 1.16's
ADV_ESTIMATORS = ADVANTAGE_ESTIMATORS.names
KL_ESTIMATORS = KL_ESTIMATES.names
IMPORTANCE_SAMPLING_LEVELS = LOG_RATIO_LEVELS.names  # sequence: GSPO
SAMPLER_MODES = SAMPLER_CORRECTIONS.names  # TRL's vllm_importance_sampling_mode
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")  # algorithms/groups.py
SHARDING_STAGES = ("", "stage1", "stage2")  # parallel/sharding.py
