"""The report's HTML: one file, its style and script inline, images from the thumbnails folder beside it.

A step (or results file) is chosen with a selector; each prompt is a card with its images, the true shapes in
green and each completion's predicted shapes in that completion's colour, and a table of the completions (scores
of each reward, total, advantage, the answer for text tasks, the text) that can be sorted and filtered by reward.
A multi-turn completion shows its turns in order: the model's texts, and each tool's name, arguments, result text
and images; a tool call's box is drawn dashed on the prompt's image.
"""
from __future__ import annotations

import json
import math
from html import escape
from typing import Optional

from ..rewards.parsing import answer_text

PALETTE = ("#e6194b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#9a6324", "#800000", "#000075",
           "#808000", "#469990", "#bfef45")
TRUTH = "#11bb33"

STYLE = """
body{font-family:system-ui,sans-serif;margin:16px;color:#222}
.controls{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #ddd;z-index:2}
.curves{display:flex;flex-wrap:wrap;gap:8px}.curve{border:1px solid #eee}
.curve .title{font-size:12px;font-weight:600}.curve .tick,.curve .legend{font-size:9px}.curve .none{fill:#999}
.curve .axis{stroke:#999}
.note{background:#fff4d6;border:1px solid #e8c66a;padding:6px 10px;margin:8px 0}
.prompt{border:1px solid #ccc;border-radius:6px;padding:10px;margin:12px 0}
.images{display:flex;flex-wrap:wrap;gap:8px}.images svg{max-width:420px;max-height:420px;background:#eee}
.problem{white-space:pre-wrap;margin:6px 0}.solution{font-family:monospace}
table{border-collapse:collapse;margin-top:6px;width:100%}td,th{border:1px solid #ddd;padding:2px 6px;
vertical-align:top;font-size:13px}th{background:#f4f4f4}td.text{font-family:monospace;white-space:pre-wrap;
max-width:700px;word-break:break-word}.swatch{display:inline-block;width:12px;height:12px;border-radius:2px}
tr.hidden,g.hidden{display:none}tr.hover{background:#fffbe0}g.hover *{stroke-width:4}
.turn{border-left:3px solid #ccc;padding:2px 6px;margin:2px 0}.turn.tool{border-color:#4363d8;background:#f3f6ff}
.turn .role{font-family:system-ui,sans-serif;font-size:11px;font-weight:600;color:#555}
.turn img.tool-image{width:160px;max-height:240px;object-fit:contain;image-rendering:pixelated;display:block;
margin:3px 0;border:1px solid #ddd}
.clip{width:640px;max-width:100%}.strip{display:flex}.strip img{width:0;flex:1;min-width:0;object-fit:cover}
.timeline{width:100%;display:block;background:#f4f4f4}.timeline .tick{font-size:9px}
"""

SCRIPT = """
const byId = id => document.getElementById(id);
function apply() {
  const step = byId('step').value, order = byId('sort').value, min = parseFloat(byId('min-reward').value);
  document.querySelectorAll('section.step').forEach(s => { s.style.display = s.dataset.step === step ? '' : 'none'; });
  document.querySelectorAll('table.completions tbody').forEach(body => {
    const rows = Array.from(body.rows);
    const key = r => { const v = parseFloat(r.dataset[order === 'advantage' ? 'advantage' : 'reward']);
                       return isNaN(v) ? -Infinity : v; };
    if (order === 'index') rows.sort((a, b) => a.dataset.row - b.dataset.row);
    else rows.sort((a, b) => key(b) - key(a));
    if (order === 'reward-asc') rows.reverse();
    rows.forEach(r => body.appendChild(r));
    const card = body.closest('.prompt');
    rows.forEach(r => {
      const v = parseFloat(r.dataset.reward), hide = !isNaN(min) && !(v >= min);
      r.classList.toggle('hidden', hide);
      card.querySelectorAll('g.pred[data-row="' + r.dataset.row + '"]').forEach(g => g.classList.toggle('hidden', hide));
    });
  });
}
document.addEventListener('DOMContentLoaded', () => {
  ['step', 'sort', 'min-reward'].forEach(id => byId(id).addEventListener('input', apply));
  document.querySelectorAll('table.completions tbody tr').forEach(r => {
    const card = r.closest('.prompt'), shapes = () => card.querySelectorAll('g.pred[data-row="' + r.dataset.row + '"]');
    r.addEventListener('mouseenter', () => { r.classList.add('hover'); shapes().forEach(g => g.classList.add('hover')); });
    r.addEventListener('mouseleave', () => { r.classList.remove('hover'); shapes().forEach(g => g.classList.remove('hover')); });
  });
  apply();
});
"""


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def number(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "&ndash;"
    return f"{value:.{digits}f}"


def data_number(value) -> str:
    return "" if value is None or (isinstance(value, float) and not math.isfinite(value)) else repr(float(value))


def shape_svg(shape, stroke: str, css: str, radius: float) -> str:
    x1, y1, x2, y2 = shape.coords
    common = f'class="{css}" stroke="{stroke}" fill="none" stroke-width="2" vector-effect="non-scaling-stroke"'
    title = f"<title>{escape(shape.label)}</title>" if shape.label else ""
    if shape.kind == "point":
        return (f'<circle cx="{x1:.1f}" cy="{y1:.1f}" r="{radius:.1f}" {common}>{title}</circle>'
                f'<circle cx="{x1:.1f}" cy="{y1:.1f}" r="{radius / 4:.1f}" class="{css}" fill="{stroke}"/>')
    if shape.kind == "swipe":
        return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {common}>{title}</line>'
                f'<circle cx="{x2:.1f}" cy="{y2:.1f}" r="{radius / 2:.1f}" class="{css}" fill="{stroke}"/>')
    dashed = ' stroke-dasharray="6 4"' if shape.kind == "tool_box" else ""
    return (f'<rect x="{x1:.1f}" y="{y1:.1f}" width="{x2 - x1:.1f}" height="{y2 - y1:.1f}" {common}{dashed}>'
            f'{title}</rect>')


def image_svg(href: Optional[str], size, index: int, truth: list, predictions: list[list]) -> str:
    """One image in its original pixel space (so shapes need no scaling): the truth, then each completion's
    shapes in a group ``g.pred[data-row]`` the table's filter and hover act on."""
    width, height = size
    radius = max(width, height) / 60
    parts = [f'<svg viewBox="0 0 {width} {height}" data-image="{index}" preserveAspectRatio="xMidYMid meet">']
    if href:
        parts.append(f'<image href="{escape(href)}" x="0" y="0" width="{width}" height="{height}"/>')
    else:
        parts.append(f'<text x="10" y="30" font-size="{radius * 2:.0f}">image not found</text>')
    parts += [shape_svg(s, TRUTH, "truth", radius) for s in truth if s.image == index]
    for row, shapes in enumerate(predictions):
        mine = [shape_svg(s, color(row), "pred", radius) for s in shapes if s.image == index]
        if mine:
            parts.append(f'<g class="pred" data-row="{row}">' + "".join(mine) + "</g>")
    return "".join(parts) + "</svg>"


def turns_html(turns: list[dict], images: list[list]) -> str:
    """A multi-turn completion, turn by turn; ``images``: per turn, its images as (thumbnail href or None, size)."""
    parts = []
    for turn, shown in zip(turns, images):
        if turn["role"] != "tool":
            parts.append(f'<div class="turn {escape(turn["role"])}"><span class="role">{escape(turn["role"])}</span>'
                         f'<div>{escape(turn["text"])}</div></div>')
            continue
        pictures = "".join(f'<img class="tool-image" src="{escape(href)}" alt="{escape(turn["name"])} result">'
                           if href else '<div class="tool-image">image not found</div>' for href, _ in shown)
        arguments = json.dumps(turn["arguments"], ensure_ascii=False)
        parts.append(f'<div class="turn tool"><span class="role">tool <span class="tool-name">{escape(turn["name"])}'
                     f'</span></span> <span class="arguments">{escape(arguments)}</span>{pictures}'
                     f'<div class="tool-text">{escape(turn["text"])}</div></div>')
    return "".join(parts)


def completions_table(prompt, reward_names: list[str], predictions: list[list], text_task: bool,
                      turn_images: list[list]) -> str:
    head = ["#"] + reward_names + ["total", "advantage"] + (["answer"] if text_task else []) + ["completion"]
    rows = []
    for i, c in enumerate(prompt.completions):
        cells = [f'<td><span class="swatch" style="background:{color(i)}"></span> {i}'
                 f'{" &#9633;" if predictions[i] else ""}</td>']
        cells += [f'<td class="score" data-name="{escape(n)}">{number(c.scores.get(n))}</td>' for n in reward_names]
        cells.append(f'<td class="total">{number(c.reward)}</td>')
        cells.append(f'<td class="advantage">{number(c.advantage)}</td>')
        if text_task:
            cells.append(f'<td class="answer">{escape(answer_text(c.text).strip())}</td>')
        text = turns_html(c.turns, turn_images[i]) if c.turns else escape(c.text)
        cells.append(f'<td class="text">{text}</td>')
        rows.append(f'<tr data-row="{i}" data-reward="{data_number(c.reward)}" '
                    f'data-advantage="{data_number(c.advantage)}">' + "".join(cells) + "</tr>")
    return ('<table class="completions"><thead><tr>' + "".join(f"<th>{escape(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def solution_text(solution) -> str:
    return solution if isinstance(solution, str) else json.dumps(solution, ensure_ascii=False)


TIMELINE_WIDTH = 1000  # the time line's own units; it is drawn at the strip's width


def clip_html(frames: Optional[list], duration: Optional[float], truth: Optional[tuple],
              spans: list[Optional[tuple]]) -> str:
    """A clip: its strip of frames (hrefs; None: unreadable) over a time line of ``duration`` seconds with the true
    span in green and each completion's span (None: it gave none) in the completion's colour, one lane each, in a
    group ``g.pred[data-row]`` the table's filter and hover act on. Spans are cut to the clip where drawn; their
    numbers are in each lane's title."""
    strip = ("".join(f'<img src="{escape(href)}" alt="frame {i}">' for i, href in enumerate(frames))
             if frames else "clip not found or unreadable")
    if not duration or not math.isfinite(duration) or duration <= 0:
        return f'<div class="clip"><div class="strip">{strip}</div></div>'
    lane, top = 8, 16
    height = top + lane * (1 + len(spans)) + 4

    def bar(span, y: int, stroke: str, css: str) -> str:
        start, end = (min(max(t / duration, 0.0), 1.0) * TIMELINE_WIDTH for t in span)
        return (f'<rect class="{css}" x="{start:.1f}" y="{y}" width="{max(end - start, 1.0):.1f}" '
                f'height="{lane - 2}" fill="{stroke}"><title>{span[0]:g} to {span[1]:g} s</title></rect>')

    parts = [f'<svg class="timeline" viewBox="0 0 {TIMELINE_WIDTH} {height}" preserveAspectRatio="none">']
    for k in range(5):
        x = k / 4 * TIMELINE_WIDTH
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        parts.append(f'<line x1="{x:.0f}" y1="10" x2="{x:.0f}" y2="{height}" stroke="#ccc"/>'
                     f'<text class="tick" x="{x:.0f}" y="9" text-anchor="{anchor}">{k / 4 * duration:.1f} s</text>')
    if truth is not None:
        parts.append(bar(truth, top, TRUTH, "truth"))
    for row, span in enumerate(spans):
        if span is not None:
            parts.append(f'<g class="pred" data-row="{row}">{bar(span, top + lane * (row + 1), color(row), "pred")}'
                         "</g>")
    return f'<div class="clip"><div class="strip">{strip}</div>' + "".join(parts) + "</svg></div>"


def prompt_card(prompt, images: list, truth: list, predictions: list[list], reward_names: list[str],
                text_task: bool, turn_images: list[list], clips: tuple = ()) -> str:
    """``images``: per image (href or None, original (w, h)); ``turn_images``: per completion, per turn, the
    same for its tool results' images; ``clips``: each video's html (``clip_html``)."""
    svgs = "".join(image_svg(href, size, i, truth, predictions) for i, (href, size) in enumerate(images))
    return (f'<div class="prompt"><div class="images">{svgs}{"".join(clips)}</div>'
            f'<div class="problem">{escape(prompt.problem)}</div>'
            f'<div>solution: <span class="solution">{escape(solution_text(prompt.solution))}</span></div>'
            + completions_table(prompt, reward_names, predictions, text_task, turn_images) + "</div>")


def page(title: str, curves: str, notes: list[str], sections: list[tuple[str, list[str]]], reward_names: list,
         skipped_steps: int) -> str:
    """``sections``: (key, rendered prompt cards), the last one shown first."""
    options = "".join(f'<option value="{escape(k)}"{" selected" if i == len(sections) - 1 else ""}>'
                      f"{escape(k)}</option>" for i, (k, _) in enumerate(sections))
    bodies = "".join(f'<section class="step" data-step="{escape(k)}"><h2>{escape(k)}</h2>{"".join(cards)}</section>'
                     for k, cards in sections)
    more = (f"<p>{skipped_steps} other logged steps not rendered (<code>--steps</code> picks them).</p>"
            if skipped_steps else "")
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style><script>{SCRIPT}</script></head><body>"
            f"<h1>{escape(title)}</h1>{curves}"
            + "".join(f'<div class="note">{escape(n)}</div>' for n in notes)
            + '<div class="controls">step <select id="step">' + options + "</select> sort "
            '<select id="sort"><option value="index">as generated</option><option value="reward-desc">reward, high '
            'first</option><option value="reward-asc">reward, low first</option><option value="advantage">'
            'advantage, high first</option></select> reward &ge; <input id="min-reward" type="number" step="0.1" '
            'placeholder="any" size="6"> <span>rewards: ' + escape(", ".join(reward_names)) + "</span></div>"
            + more + bodies + "</body></html>")
