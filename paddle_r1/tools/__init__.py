"""Tools a model calls during a multi-turn rollout (config keys ``tools``, ``max_turns``): ``calls`` reads the calls
from a completion, ``builtins`` holds ``crop`` and ``zoom``, ``toolbox`` resolves names and runs calls (a failure is
text for the model, never an exception for the run)."""
