"""``paddle-r1 view FOLDER``: the report of a training run (completions.jsonl + metrics.jsonl) or of an eval
results folder (``eval/test_rec.py``'s json files), written as ``FOLDER/report/index.html`` with its thumbnails in
``FOLDER/report/images/``. Only the steps asked for are read into prompts and drawn, so a long run stays fast."""
from __future__ import annotations

import os
from typing import Optional

from ..models.resize import resizer_for
from ..telemetry.metrics import read_jsonl
from . import clips as run_clips, curves, facts as run_facts, geometry, page, records, thumbnails


def parse_steps(spec: Optional[str], logged: list[int], last: int = 3) -> list[int]:
    """``None``: the last ``last`` logged steps; ``"all"``; or a list like ``"1,5,10-20"`` (steps not logged are
    ignored). A malformed list is a ValueError naming it."""
    if spec is None:
        return logged[-last:]
    if spec.strip() == "all":
        return logged
    wanted = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"--steps {spec!r}: expected 'all' or steps like 1,5,10-20")
        wanted.update(range(int(lo), int(hi or lo) + 1))
    return [s for s in logged if s in wanted]


def _image_path(path, folder: str):
    """``path`` (or each of a list of frame paths) relative to ``folder`` unless absolute."""
    if isinstance(path, list):
        return [_image_path(p, folder) for p in path]
    return path if os.path.isabs(path) else os.path.join(folder, path)


def _thumbnail_href(path: str, images_dir: str) -> tuple:
    """(the thumbnail's address from the report, the image's original (w, h)); (None, (100, 100)) when unreadable."""
    thumb = thumbnails.thumbnail(path, images_dir)
    return (f"images/{thumb[0]}", thumb[1]) if thumb else (None, (100, 100))


def render_prompt(prompt, folder: str, images_dir: str, reward_names: list[str], resizer, coord_system) -> tuple:
    """(card html, whether converting its answers needed facts its rows did not carry). Images, the prompt's and
    its tool results', are relative to ``folder`` (completions.jsonl's) unless absolute."""
    images = [_thumbnail_href(_image_path(p, folder), images_dir) for p in prompt.images]
    kind = geometry.solution_kind(prompt.solution)
    truth = geometry.truth_shapes(kind, prompt.solution, len(images))
    facts = run_facts.prompt_facts(prompt.facts, [size for _, size in images], resizer, coord_system)
    predictions = [(geometry.eval_prediction_shapes(c.prediction) if c.evaluated
                    else geometry.predicted_shapes(kind, c.text, facts)) + geometry.tool_box_shapes(c.turns, facts)
                   for c in prompt.completions]
    turn_images = [[[_thumbnail_href(_image_path(p, folder), images_dir) for p in turn.get("images", [])]
                    for turn in c.turns] for c in prompt.completions]
    # answers or tool boxes to convert (an evaluation's boxes are in original pixels already)
    drawn = (kind is not None and not all(c.evaluated for c in prompt.completions)) or \
        any(c.turns for c in prompt.completions)
    recomputed = drawn and not all(k in prompt.facts for k in records.FACT_KEYS)
    text_task = kind is None
    clips = [render_clip(prompt, _image_path(p, folder), images_dir) for p in prompt.videos]
    return (page.prompt_card(prompt, images, truth, predictions, reward_names, text_task, turn_images, clips),
            recomputed)


def render_clip(prompt, path: str, images_dir: str) -> str:
    """A video's strip of frames over its time line, with the true and predicted spans when the sample is a
    temporal grounding one (its length: the row's ``duration``, else the clip's own)."""
    strip = run_clips.frame_strip(path, images_dir)
    truth = run_clips.solution_span(prompt.solution)
    duration = prompt.duration or (strip.duration if strip else None)
    spans = [run_clips.predicted_span(c.text) for c in prompt.completions] if truth is not None else []
    frames = [f"images/{name}" for name in strip.frames] if strip else None
    return page.clip_html(frames, duration, truth, spans)


def write_report(folder: str, steps: Optional[str] = None, output: Optional[str] = None,
                 model_dir: Optional[str] = None, coord_system: Optional[str] = None) -> str:
    """Write the report and return its path. ``model_dir``: the model folder whose processor settings and family
    recompute sizes and coordinates the rows lack (default: the run's newest checkpoint); ``coord_system``
    overrides the family's."""
    completions_file = os.path.join(folder, "completions.jsonl")
    notes, metrics, skipped = [], [], 0
    if os.path.isfile(completions_file):
        rows = read_jsonl(completions_file)
        logged = records.training_steps(rows)
        chosen = parse_steps(steps, logged)
        skipped = len(logged) - len(chosen)
        sections = records.training_sections(rows, chosen)
        metrics_file = os.path.join(folder, "metrics.jsonl")
        metrics = read_jsonl(metrics_file) if os.path.isfile(metrics_file) else []
        if not logged:
            notes.append("completions.jsonl holds no rows yet (log_completions_steps sets how often steps are logged).")
    else:
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"no such folder: {folder}")
        results = records.eval_result_files(folder)
        if not results:
            raise FileNotFoundError(f"{folder} holds neither completions.jsonl (a training run) nor eval results json")
        sections = records.eval_sections(results)
    model_dir = model_dir or run_facts.find_model_dir(folder)
    resizer = resizer_for(model_dir) if model_dir else None

    output = output or os.path.join(folder, "report", "index.html")
    images_dir = os.path.join(os.path.dirname(os.path.abspath(output)), "images")
    reward_names = sorted({n for s in sections for p in s.prompts for c in p.completions for n in c.scores})
    rendered, recomputed = [], False
    for section in sections:
        cards = []
        for prompt in section.prompts:
            card, needed = render_prompt(prompt, folder, images_dir, reward_names, resizer, coord_system)
            cards.append(card)
            recomputed |= needed
        rendered.append((section.key, cards))
    if recomputed:
        source = f"processor settings and model family of {model_dir}" if resizer else \
            "no model folder found: predicted boxes in the model's coordinates are not drawn; pass --model"
        notes.append(run_facts.MISSING_FACTS_NOTE.format(source=source))
    title = f"paddle_r1: {os.path.basename(os.path.abspath(folder))}"
    html = page.page(title, curves.curves_html(metrics) if metrics else "", notes, rendered, reward_names, skipped)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w", encoding="utf-8") as f:
        f.write(html)
    for note in notes:
        print(f"note: {note}")
    return output
