"""The run's curves as inline SVG (no script, no CDN): the panels of ``paddle-r1 plot`` -- reward (total and each
reward's mean), KL, completion length, held-out score -- read with its own helpers from metrics.jsonl."""
from __future__ import annotations

from html import escape

from ..plot import PANELS, reward_function_keys, series

WIDTH, HEIGHT, PAD = 320, 170, 34
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def _polyline(steps, values, x_of, y_of, color: str, dash: str = "") -> str:
    points = " ".join(f"{x_of(s):.1f},{y_of(v):.1f}" for s, v in zip(steps, values))
    dots = "".join(f'<circle cx="{x_of(s):.1f}" cy="{y_of(v):.1f}" r="2" fill="{color}"/>'
                   for s, v in zip(steps, values)) if len(steps) < 30 else ""
    return (f'<polyline fill="none" stroke="{color}" stroke-width="1.5" stroke-dasharray="{dash}" '
            f'points="{points}"/>{dots}')


def panel(title: str, lines: list[tuple[str, list, list]]) -> str:
    """One chart: ``lines`` are (name, steps, values); a panel with no points says what was not logged."""
    lines = [line for line in lines if line[1]]
    body = [f'<text x="{WIDTH / 2}" y="14" text-anchor="middle" class="title">{escape(title)}</text>']
    if not lines:
        body.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="none">not logged</text>')
    else:
        all_steps = [s for _, steps, _ in lines for s in steps]
        all_values = [v for _, _, values in lines for v in values]
        s0, s1 = min(all_steps), max(all_steps)
        v0, v1 = min(all_values), max(all_values)
        if v1 == v0:
            v0, v1 = v0 - 0.5, v1 + 0.5
        def x_of(s): return PAD + (s - s0) / ((s1 - s0) or 1) * (WIDTH - PAD - 8)
        def y_of(v): return HEIGHT - 20 - (v - v0) / (v1 - v0) * (HEIGHT - 44)
        body.append(f'<line x1="{PAD}" y1="{HEIGHT - 20}" x2="{WIDTH - 8}" y2="{HEIGHT - 20}" class="axis"/>')
        body.append(f'<text x="2" y="{y_of(v1) + 4:.1f}" class="tick">{v1:.3g}</text>'
                    f'<text x="2" y="{y_of(v0) + 4:.1f}" class="tick">{v0:.3g}</text>'
                    f'<text x="{PAD}" y="{HEIGHT - 6}" class="tick">step {s0}</text>'
                    f'<text x="{WIDTH - 8}" y="{HEIGHT - 6}" text-anchor="end" class="tick">{s1}</text>')
        for i, (name, steps, values) in enumerate(lines):
            color = COLORS[i % len(COLORS)]
            body.append(_polyline(steps, values, x_of, y_of, color, "" if i == 0 else "4 2"))
            body.append(f'<text x="{WIDTH - 8}" y="{28 + 11 * i}" text-anchor="end" fill="{color}" class="legend">'
                        f'{escape(name)}</text>')
    return (f'<svg class="curve" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">'
            + "".join(body) + "</svg>")


def curves_html(rows: list[dict]) -> str:
    charts = []
    for key, title in PANELS:
        lines = [(key.split("/")[-1] if key != "reward" else "total", *series(rows, key))]
        if key == "reward":
            lines += [(k.split("/")[1], *series(rows, k)) for k in reward_function_keys(rows)]
        charts.append(panel(title, lines))
    return '<div class="curves">' + "".join(charts) + "</div>"
