"""User-style reward functions loaded by tests through get_reward("reward_helpers:..."), and the columns every
registered reward is fed in the adversarial tests (test_rewards_linear.py, test_rewards_fuzz.py)."""
import json

BOX = [10, 20, 110, 220]
SOLUTIONS = {  # a valid solution per reward; the rest take the default
    "box_format": None, "iou": BOX, "iou_accuracy": BOX, "gaussian_point": BOX, "gaussian_plane": BOX,
    "multi_iou": {"0": [BOX]}, "multi_gaussian_point": {"0": [BOX]}, "multi_gaussian_plane": {"0": [BOX]},
    "map": [{"bbox_2d": BOX, "label": "cat"}], "map50": [{"bbox_2d": BOX, "label": "cat"}],
    "odLength": [{"bbox_2d": BOX, "label": "cat"}], "weighted_sum": [{"bbox_2d": BOX, "label": "cat"}],
    "mask_iou": [[10, 10, 200, 10, 200, 200, 10, 200]], "counting": "3", "counting_strict": "3", "mcq": "B",
    "yes_no": "yes", "dimensions": "12 8 15", "meteor": "a red car", "caption": "a red car",
    "llm_judge": "a red car", "all_match": "a red car", "teds": "<fcel>a<fcel>b<nl><fcel>1<ecel><nl>",
    "temporal_iou": [2.0, 5.5],
    "gui_action": json.dumps({"action_type": "click", "action_parameter": {"click": "100,200,300,400"}}),
}


# video_r1_accuracy's rows: each Video-R1 problem type in turn, with a gold of its kind
VIDEO_R1_GOLDS = {"multiple choice": "B", "numerical": "3", "OCR": "STOP AHEAD", "free-form": "a red car",
                  "regression": "12.5"}


def reward_columns(name: str, n: int) -> dict:
    """The columns of ``n`` rows for the registered reward ``name``: its valid solution (``SOLUTIONS``, else "1/2"),
    a question, no reward_method, and the image facts of a 640 x 480 image resized to 644 x 476."""
    columns = dict(solution=[SOLUTIONS.get(name, "1/2")] * n, problem=["How many?"] * n, reward_method=[None] * n,
                   image_sizes=[[(640, 480)]] * n, input_sizes=[[(644, 476)]] * n, coord_system=["abs_resized"] * n)
    if name == "video_r1_accuracy":
        kinds = [list(VIDEO_R1_GOLDS)[i % len(VIDEO_R1_GOLDS)] for i in range(n)]
        columns.update(problem_type=kinds, solution=[VIDEO_R1_GOLDS[kind] for kind in kinds])
    return columns


def short_reward(completions, **columns):
    """Prefers short completions: a signal a random tiny model's samples differ in."""
    return [1.0 - len(text) / 200.0 for text in completions]


def none_for_all(completions, **columns):
    return [None for _ in completions]


def inf_for_first(completions, **columns):
    """A buggy reward: inf for the first completion of the batch, 1.0 for the rest."""
    return [float("inf") if i == 0 else 1.0 for i in range(len(completions))]


def reads_a_missing_column(completions, **columns):
    """A buggy reward: reads a column the data does not have."""
    return [float(columns["answer"][i] == text) for i, text in enumerate(completions)]


def with_setting(completions, scale=1.0, **columns):
    """A user reward with one setting, checked like the built-in ones."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    return [scale * (1.0 - len(text) / 200.0) for text in completions]


def short_reward_unless_tied(completions, tied=None, **columns):
    """``short_reward``, except a constant 1.0 for samples marked ``tied`` (a group with no learning signal)."""
    tied = tied or [False] * len(completions)
    return [1.0 if t else 1.0 - len(text) / 200.0 for text, t in zip(completions, tied)]


def shifted_short_reward(completions, shift=None, **columns):
    """``short_reward`` moved by the sample's ``shift`` column: groups whose mean reward is set by their sample."""
    shift = shift or [0.0] * len(completions)
    return [s - len(text) / 200.0 for text, s in zip(completions, shift)]


def inf_if_poisoned(completions, poison=None, **columns):
    """``short_reward``, but inf (a reward's failure) for samples marked ``poison``."""
    poison = poison or [None] * len(completions)
    return [float("inf") if p else 1.0 - len(text) / 200.0 for text, p in zip(completions, poison)]


def slow_on_rank(completions, seconds=0.0, rank=1, **columns):
    """``short_reward`` after ``seconds`` of waiting on rank ``rank`` only (a judge that answers slowly there)."""
    import os
    import time

    if completions and int(os.environ.get("PADDLE_TRAINER_ID", "0")) == rank:
        time.sleep(seconds)
    return short_reward(completions)
