"""A self-contained HTML page with inline SVG charts: throughput and TTFT against concurrency.

No dependency and no script: the page opens offline in any browser. One line per target;
TTFT is drawn on a logarithmic axis (p50 solid, p95 dashed) because engines differ by orders of
magnitude there.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from .report import HEADERS, describe, ordered, row_cells
from .runner import BenchResult

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
W, H, LEFT, RIGHT, TOP, BOTTOM = 560, 320, 70, 150, 30, 45

Series = tuple[str, str, bool, list[tuple[float, float]]]  # label, color, dashed, points


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        steps = (1, 2, 5) if last - first <= 3 else (1,)
        return [m * 10.0**e for e in range(first, last + 1) for m in steps if m * 10.0**e <= 10.0**last]
    step = 10 ** math.floor(math.log10(hi / 4)) if hi > 0 else 1
    for mult in (1, 2, 5, 10):
        if hi / (step * mult) <= 6:
            step *= mult
            break
    return [i * step for i in range(int(hi / step) + 2)]


def _fmt(v: float, unit: str) -> str:
    if unit == "s":
        return f"{v * 1000:g} ms" if v < 1 else f"{v:g} s"
    return f"{v:g}"


def svg_chart(title: str, series: Sequence[Series], xs: Sequence[int], unit: str, log: bool) -> str:
    """One line chart; x is concurrency (evenly spaced categories), y linear or log10."""
    values = [y for *_, pts in series for _, y in pts if y > 0 or not log]
    if not values or not xs:
        return f"<p>{html.escape(title)}: no data</p>"
    lo = min(values) if log else 0.0
    hi = max(values) * (1.0 if log else 1.1) or 1.0
    ticks = _ticks(lo, hi, log)
    y0, y1 = (ticks[0], ticks[-1])
    if log:
        lo_l, hi_l = math.log10(y0), math.log10(y1) if y1 > y0 else math.log10(y0) + 1

        def ymap(v: float) -> float:
            return TOP + (H - TOP - BOTTOM) * (1 - (math.log10(max(v, y0)) - lo_l) / (hi_l - lo_l))
    else:
        def ymap(v: float) -> float:
            return TOP + (H - TOP - BOTTOM) * (1 - v / (y1 or 1))

    def xmap(c: float) -> float:
        i = list(xs).index(int(c))
        span = W - LEFT - RIGHT
        return LEFT + (span * i / (len(xs) - 1) if len(xs) > 1 else span / 2)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for t in ticks:
        y = ymap(t)
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t, unit)}</text>')
    for c in xs:
        x = xmap(c)
        out.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{c}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle">concurrent streams</text>')
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" stroke="#333"/>')
    for k, (label, color, dashed, pts) in enumerate(series):
        pts = [(x, y) for x, y in pts if y > 0 or not log]
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        coords = " ".join(f"{xmap(x):.1f},{ymap(y):.1f}" for x, y in pts)
        if coords:
            out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{xmap(x):.1f}" cy="{ymap(y):.1f}" r="3" fill="{color}">'
                       f'<title>{html.escape(label)} @ {x:g}: '
                       f'{_fmt(y, unit) if unit == "s" else f"{y:.1f}"}</title></circle>')
        ly = TOP + 10 + 16 * k
        out.append(f'<line x1="{W - RIGHT + 10}" x2="{W - RIGHT + 30}" y1="{ly}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{W - RIGHT + 34}" y="{ly + 4}">{html.escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def to_html(result: BenchResult) -> str:
    """The whole report page: charts, the table and the run description."""
    labels = [t.label for t in result.targets]
    xs = sorted({lv.stats.concurrency for lv in result.levels})
    tput: list[Series] = []
    ttft: list[Series] = []
    for i, label in enumerate(labels):
        color = COLORS[i % len(COLORS)]
        levels = sorted((lv for lv in result.levels if lv.target == label), key=lambda lv: lv.stats.concurrency)
        tput.append((label, color, False, [(float(lv.stats.concurrency), lv.stats.output_tok_s) for lv in levels]))
        for q, dashed in (("p50", False), ("p95", True)):
            pts = [(float(lv.stats.concurrency), float(v)) for lv in levels
                   if (v := getattr(lv.stats.ttft, q)) is not None]
            ttft.append((f"{label} {q}", color, dashed, pts))
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row_cells(lv)) + "</tr>" for lv in ordered(result)
    )
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    notes = "".join(f"<li>{html.escape(line)}</li>" for line in describe(result))
    warns = "".join(f"<li>{html.escape(w)}</li>" for w in result.warnings)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>localrun bench</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}td:first-child{{text-align:left}}</style></head>
<body><h1>localrun bench</h1><ul>{notes}</ul>
{svg_chart("Aggregate output tokens/s", tput, xs, "tok/s", log=False)}
{svg_chart("Time to first token (p50 solid, p95 dashed)", ttft, xs, "s", log=True)}
<table><tr>{head}</tr>
{rows}</table>
{f"<h3>Warnings</h3><ul>{warns}</ul>" if warns else ""}
</body></html>
"""
