"""Rewards scored per second on a batch of 1024 completions, for each reward (the judge excluded: it waits on
its endpoint; `caption` runs with judge_weight=0). With ``--slow N``, instead: the time `math` takes on a batch of N
answers that each keep math-verify busy past its timeout (towers of powers), with the batch's shared deadline
(``--batch_timeout``) and without one (a deadline of an hour: every comparison waits its own ``--timeout``). With
``--ocr_sizes``, instead: the seconds `ocr_ned` takes on one answer and solution of 5,000 and 50,000 characters, and
`teds` on two different tables of 100, 200 and 400 cells (3-character cells, and 100-character ones).

    python benchmarks/rewards.py [--batch 1024]
    python benchmarks/rewards.py --slow 10 --timeout 1 --batch_timeout 2
    python benchmarks/rewards.py --ocr_sizes
"""
from __future__ import annotations

import argparse
import json
import random
import time

from paddle_r1.rewards.manager import bind_reward

THINK = "<think>The object is on the left, slightly above the centre of the image.</think>"


def box_case(rng):
    x, y = rng.randint(0, 300), rng.randint(0, 200)
    return f"{THINK}<answer>[{x}, {y}, {x + rng.randint(5, 200)}, {y + rng.randint(5, 150)}]</answer>"


def multibox_case(rng):
    boxes = {str(k): [[rng.randint(0, 300), rng.randint(0, 200), rng.randint(300, 600), rng.randint(200, 400)]]
             for k in range(3)}
    return f"{THINK}<answer>{json.dumps(boxes)}</answer>"


def detection_case(rng):
    items = [{"bbox_2d": [rng.randint(0, 300), rng.randint(0, 200), rng.randint(300, 600), rng.randint(200, 400)],
              "label": rng.choice(["cat", "dog"])} for _ in range(3)]
    return f"{THINK}<answer>{json.dumps(items)}</answer>"


BOX_COLUMNS = dict(solution=[50, 40, 200, 160], image_sizes=[(640, 480)], input_sizes=[(644, 476)],
                   coord_system="abs_resized")
TRUE_BOXES = {"0": [[40, 30, 350, 260]], "1": [[100, 100, 400, 300]], "2": []}
CASES = {
    "format": (box_case, {}),
    "json_format": (lambda rng: '<think>{"task_interpretation": "tap"}</think>'
                                '<answer>{"action_type": "back"}</answer>', {}),
    "box_format": (box_case, {}),
    "iou": (box_case, BOX_COLUMNS),
    "iou_accuracy": (box_case, BOX_COLUMNS),
    "gaussian_point": (box_case, BOX_COLUMNS),
    "gaussian_plane": (box_case, BOX_COLUMNS),
    "multi_box_format": (multibox_case, {}),
    "multi_iou": (multibox_case, {**BOX_COLUMNS, "solution": TRUE_BOXES}),
    "multi_gaussian_point": (multibox_case, {**BOX_COLUMNS, "solution": TRUE_BOXES}),
    "multi_gaussian_plane": (multibox_case, {**BOX_COLUMNS, "solution": TRUE_BOXES}),
    "map": (detection_case, {**BOX_COLUMNS, "solution": [{"bbox_2d": [40, 30, 350, 260], "label": "cat"}]}),
    "map50": (detection_case, {**BOX_COLUMNS, "solution": [{"bbox_2d": [40, 30, 350, 260], "label": "cat"}]}),
    "odLength": (detection_case, {**BOX_COLUMNS, "solution": [{"bbox_2d": [40, 30, 350, 260], "label": "cat"}]}),
    "weighted_sum": (detection_case, {**BOX_COLUMNS, "solution": [{"bbox_2d": [40, 30, 350, 260], "label": "cat"}]}),
    "mask_iou": (lambda rng: f"<answer>[[10, 10, {rng.randint(50, 300)}, 10, 200, 200, 10, 200]]</answer>",
                 {**BOX_COLUMNS, "solution": [[10, 10, 200, 10, 200, 200, 10, 200]]}),
    "counting": (lambda rng: f"{THINK}<answer>{rng.randint(0, 10)}</answer>", {"solution": 3}),
    "counting_strict": (lambda rng: f"{THINK}<answer>{rng.randint(0, 10)}</answer>", {"solution": 3}),
    "all_match": (lambda rng: f"{THINK}<answer>a {rng.choice(['red', 'blue'])} car</answer>",
                  {"solution": "a red car"}),
    "math": (lambda rng: f"{THINK}<answer>\\frac{{{rng.randint(1, 10**6)}}}{{{rng.randint(1, 10**6)}}}</answer>",
             {"solution": "\\frac{1}{2}"}),
    "mcq": (lambda rng: f"{THINK}<answer>({rng.choice('ABCD')}) a dog</answer>", {"solution": "B"}),
    "yes_no": (lambda rng: f"{THINK}<answer>{rng.choice(['Yes', 'No'])}, it is.</answer>", {"solution": "yes"}),
    "accuracy": (lambda rng: f"{THINK}<answer>{rng.randint(0, 10)}</answer>", {"solution": "3"}),
    "dimensions": (lambda rng: f'{{"length": {rng.randint(5, 20)}, "width": 8, "height": {rng.randint(5, 20)}}}',
                   {"solution": "12 8 15"}),
    "gui_action": (lambda rng: f'<answer>{{"action_type": "click", "action_parameter": {{"click": '
                               f'"{rng.randint(0, 500)},{rng.randint(0, 900)},{rng.randint(500, 700)},'
                               f'{rng.randint(900, 1000)}"}}}}</answer>',
                   {**BOX_COLUMNS, "image_sizes": [(720, 1280)], "input_sizes": [(728, 1288)],
                    "solution": {"action_type": "click", "action_parameter": {"click": "100,200,300,400"}}}),
    "meteor": (lambda rng: f"<answer>a {rng.choice(['red', 'blue'])} car parked near the trees</answer>",
               {"solution": "a red car parked by the trees"}),
    "caption": (lambda rng: f"<answer>a {rng.choice(['red', 'blue'])} car parked near the trees</answer>",
                {"solution": "a red car parked by the trees"}),
}
def otsl_table(rng, rows: int, columns: int, width: int) -> str:
    """A table in PaddleOCR-VL's OTSL of ``rows`` x ``columns`` cells of ``width`` random characters."""
    cell = lambda: "".join(rng.choice("0123456789abcdef金额") for _ in range(width))  # noqa: E731
    return "".join("".join(f"<fcel>{cell()}" for _ in range(columns)) + "<nl>" for _ in range(rows))


OCR_LINE = "发票金额：ABC-123，合计 45 元 Invoice total 2023-05-01"
CASES.update({
    "ocr_ned": (lambda rng: "".join(c for c in OCR_LINE if rng.random() > 0.1), {"solution": OCR_LINE}),
    "ocr_exact": (lambda rng: "".join(c for c in OCR_LINE if rng.random() > 0.1), {"solution": OCR_LINE}),
    "teds": (lambda rng: otsl_table(rng, 3, 4, 3), {"solution": otsl_table(random.Random(1), 3, 4, 3)}),
})
SETTINGS = {"caption": {"judge_weight": 0.0, "meteor_weight": 1.0}}  # reward_kwargs, bound as a run binds them


def ocr_sizes() -> None:
    """Seconds of ocr_ned and teds on one long answer each (see the module docstring)."""
    rng = random.Random(0)
    ned = bind_reward("ocr_ned", {})
    print("| reward | size | seconds |\n|---|---|---|")
    for length in (5_000, 50_000):
        answer, gold = ("".join(rng.choice("abcde发票") for _ in range(length)) for _ in range(2))
        start = time.perf_counter()
        ned([answer], solution=[gold])
        print(f"| ocr_ned | {length:,} characters each | {time.perf_counter() - start:.3f} |")
    teds = bind_reward("teds", {"max_cells": 400})
    for cells, width in ((100, 3), (200, 3), (400, 3), (200, 100)):
        answer, gold = otsl_table(rng, cells // 10, 10, width), otsl_table(rng, cells // 10, 10, width)
        start = time.perf_counter()
        teds([answer], solution=[gold])
        print(f"| teds | {cells} cells of {width} characters each | {time.perf_counter() - start:.3f} |")


def slow_math_batch(count: int, timeout: float, batch_timeout: float) -> tuple[float, int]:
    """Seconds `math` takes on ``count`` answers math-verify cannot finish in time, and the timeouts it counts."""
    reward = bind_reward("math", {"timeout_seconds": timeout, "batch_timeout_seconds": batch_timeout})
    counts = {}
    reward.report = lambda key, n: counts.__setitem__(key, counts.get(key, 0) + n)
    reward(["<answer>4</answer>"], solution=["4"])  # warm up (the worker starts)
    slow = [f"<answer>$9^{{9^{{9^{{{9 + i}}}}}}}$</answer>" for i in range(count)]
    start = time.perf_counter()
    reward(slow, solution=["1"] * count)
    return time.perf_counter() - start, counts.get("timeouts", 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--slow", type=int, default=0, help="time math on this many slow answers instead")
    parser.add_argument("--timeout", type=float, default=5.0, help="--slow: timeout_seconds")
    parser.add_argument("--batch_timeout", type=float, default=30.0, help="--slow: batch_timeout_seconds")
    parser.add_argument("--ocr_sizes", action="store_true", help="time ocr_ned and teds on long answers instead")
    args = parser.parse_args()
    if args.ocr_sizes:
        ocr_sizes()
        return
    if args.slow:
        print(f"| math, {args.slow} slow answers, timeout_seconds {args.timeout:g} | seconds | timeouts counted |\n"
              "|---|---|---|")
        for batch_timeout in (args.batch_timeout, 3600.0):
            seconds, timeouts = slow_math_batch(args.slow, args.timeout, batch_timeout)
            print(f"| batch_timeout_seconds {batch_timeout:g} | {seconds:.1f} | {timeouts} |")
        return
    rng = random.Random(0)
    print(f"| reward | completions / s (batch {args.batch}) | ms per batch |\n|---|---|---|")
    for name, (make, columns) in CASES.items():
        completions = [make(rng) for _ in range(args.batch)]
        kwargs = {k: [v] * args.batch for k, v in columns.items()}
        fn = bind_reward(name, SETTINGS.get(name, {}))
        fn(completions[:8], **{k: v[:8] for k, v in kwargs.items()})  # warm up (workers)
        start = time.perf_counter()
        scores = fn(completions, **kwargs)
        seconds = time.perf_counter() - start
        assert len(scores) == args.batch
        print(f"| {name} | {args.batch / seconds:,.0f} | {seconds * 1000:.1f} |")


if __name__ == "__main__":
    main()
