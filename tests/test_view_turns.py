"""``paddle-r1 view`` on multi-turn completions: completions.jsonl rows written by hand to the contract the GRPO side
writes (``turns``, tool images relative to the file's folder), with real PNG files; rows without turns beside them."""
import json
import os
import re
import shutil
import subprocess
from html import escape

import pytest
from PIL import Image

from paddle_r1.cli import main
from paddle_r1.synthetic.zoom import make_synthetic_zoom

from test_view import CHROMIUM, Elements


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder: one zoom prompt with a two-turn completion (a crop, its image, the answer), a failed tool call
    (its error text, no image) and a single-turn completion; the tool image copied where the trainer writes it."""
    out = tmp_path_factory.mktemp("multiturn_run")
    data = make_synthetic_zoom(str(out / "data"), num_samples=1, seed=4)
    row = json.loads(open(data).readline())
    call, result, answer = row["episode"]
    tool_image = "tool_images/step-000003/r0-t1-0.png"
    os.makedirs(out / "tool_images" / "step-000003")
    shutil.copy(out / "data" / result["images"][0], out / tool_image)
    common = {"step": 3, "problem": row["problem"], "images": [str(out / "data" / row["images"][0])],
              "solution": row["solution"], "image_sizes": [[448, 448]], "input_sizes": [[112, 112]],
              "coord_system": "abs_resized"}
    rows = [
        {**common, "completion": answer["text"], "reward": 1.0, "advantage": 0.9, "reward/all_match": 1.0,
         "turns": [call, {**result, "images": [tool_image]}, answer]},
        {**common, "completion": "<answer>plain</answer>", "reward": 0.0, "advantage": -0.5, "reward/all_match": 0.0,
         "turns": [{"role": "assistant",
                    "text": '<tool_call>{"name": "crop", "arguments": {"bbox_2d": [9]}}</tool_call>'},
                   {"role": "tool", "name": "crop", "arguments": {"bbox_2d": [9]},
                    "text": "error: box must be [x1, y1, x2, y2]", "images": []},
                   {"role": "assistant", "text": "<answer>plain</answer>"}]},
        {**common, "completion": "<answer>vertical</answer>", "reward": 0.0, "advantage": -0.4,
         "reward/all_match": 0.0},
    ]
    with open(out / "completions.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return out, row


def test_turns_their_tools_and_images(run_dir):
    out, row = run_dir
    result_text = row["episode"][1]["text"]  # the crop tool's own text for the scripted call
    assert result_text.startswith("the crop of [")
    assert main(["view", str(out)]) == 0
    html = open(out / "report" / "index.html").read()
    page = Elements(html)
    assert len(page.all("div", "turn assistant")) == 4 and len(page.all("div", "turn tool")) == 2
    assert re.findall(r'<span class="tool-name">([^<]*)</span>', html) == ["crop", "crop"]
    box = row["episode"][1]["arguments"]["bbox_2d"]
    assert f'<span class="arguments">{{&quot;bbox_2d&quot;: {box}}}</span>' in html
    assert "error: box must be [x1, y1, x2, y2]" in html and escape(result_text) in html
    # the tool's image is shown from a thumbnail of the file the row names
    (picture,) = page.all("img", "tool-image")
    thumb = Image.open(out / "report" / picture["src"])
    assert thumb.size == Image.open(out / "tool_images" / "step-000003" / "r0-t1-0.png").size
    # the crop's box is drawn dashed on the prompt image, in original pixels (4 x the 112-pixel input's); the
    # malformed one is not drawn
    dashed = [a for a in page.all("rect", "pred") if a.get("stroke-dasharray")]
    assert [[float(dashed[0][k]) for k in ("x", "y", "width", "height")]] == [
        [4.0 * box[0], 4.0 * box[1], 4.0 * (box[2] - box[0]), 4.0 * (box[3] - box[1])]]
    # the single-turn row keeps its text cell, and the answer column reads every row's final answer
    assert "&lt;answer&gt;vertical&lt;/answer&gt;</td>" in html
    assert re.findall(r'<td class="answer">([^<]*)</td>', html) == [row["solution"], "plain", "vertical"]


def test_turns_in_a_real_browser(run_dir, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium); the report's browser test needs it")
    out, _ = run_dir
    assert main(["view", str(out)]) == 0
    url = "file://" + str(out / "report" / "index.html")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1400"]
    dom = subprocess.run(flags + ["--dump-dom", url], check=True, capture_output=True, text=True, timeout=60).stdout
    page = Elements(dom)
    assert len(page.all("div", "turn tool")) == 2 and len(page.all("img", "tool-image")) == 1
    assert [s.get("style") for s in page.all("section", "step")] == [None]  # the script ran: step 3 shown
    shot = tmp_path / "turns.png"
    subprocess.run(flags + [f"--screenshot={shot}", url], check=True, capture_output=True, timeout=60)
    assert shot.stat().st_size > 10_000
