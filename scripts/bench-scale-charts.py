#!/usr/bin/env python3
"""Draws scripts/bench-scale.sh's figures as SVG line charts (standard library only).

Usage: bench-scale-charts.py FIGURES.tsv OUT_DIR

FIGURES.tsv has a header and one row per measured point:
  dimension  x  series  rps  p50_ms  p99_ms  rss_mb
One chart per dimension and measure (calls/s, p99), one line per series, x on a log scale
when it spans more than a factor of 20. Writes OUT_DIR/scale-<dimension>-<measure>.svg.
"""

import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

WIDTH, HEIGHT = 560, 320
LEFT, RIGHT, TOP, BOTTOM = 70, 150, 30, 50
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]
MEASURES = {"rps": "calls/s", "p99_ms": "p99 (ms)", "rss_mb": "RSS (MB)"}


def nice_max(value):
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above value."""
    if value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * 10**exp >= value:
            return step * 10**exp
    return 10 ** (exp + 1)


def label(value):
    if value >= 1000 and value % 1000 == 0:
        return f"{int(value // 1000)}k"
    if value == int(value):
        return str(int(value))
    return f"{value:g}"


def chart(title, xlabel, ylabel, lines):
    """lines: {series: [(x, y), ...]}; returns the SVG text."""
    xs = sorted({x for points in lines.values() for x, _ in points})
    ymax = nice_max(max(y for points in lines.values() for _, y in points))
    log = xs[0] > 0 and xs[-1] / xs[0] > 20
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x):
        if len(xs) == 1:
            return LEFT + plot_w / 2
        if log:
            span = math.log10(xs[-1]) - math.log10(xs[0])
            return LEFT + plot_w * (math.log10(x) - math.log10(xs[0])) / span
        return LEFT + plot_w * (x - xs[0]) / (xs[-1] - xs[0])

    def py(y):
        return TOP + plot_h * (1 - y / ymax)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{title}</text>',
    ]
    for i in range(5):
        y = ymax * i / 4
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            f'stroke="#ddd"/><text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">'
            f"{label(round(y, 2))}</text>"
        )
    for x in xs:
        out.append(
            f'<text x="{px(x):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{label(x)}</text>'
        )
    out.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">{xlabel}</text>'
    )
    out.append(
        f'<text transform="translate(16,{TOP + plot_h / 2}) rotate(-90)" '
        f'text-anchor="middle">{ylabel}</text>'
    )
    for i, (series, points) in enumerate(sorted(lines.items())):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(points))
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in points:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        ly = TOP + 14 + 18 * i
        out.append(
            f'<line x1="{WIDTH - RIGHT + 12}" x2="{WIDTH - RIGHT + 32}" y1="{ly - 4}" '
            f'y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{WIDTH - RIGHT + 38}" y="{ly}">{series}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: bench-scale-charts.py FIGURES.tsv OUT_DIR")
    rows = list(csv.DictReader(open(sys.argv[1], newline=""), delimiter="\t"))
    out_dir = Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    by_dimension = defaultdict(list)
    for row in rows:
        by_dimension[row["dimension"]].append(row)
    for dimension, points in by_dimension.items():
        for measure, ylabel in MEASURES.items():
            lines = defaultdict(list)
            for row in points:
                if row.get(measure) not in (None, "", "-"):
                    lines[row["series"]].append((float(row["x"]), float(row[measure])))
            if not lines:
                continue
            svg = chart(f"{ylabel} against {dimension}", dimension, ylabel, lines)
            path = out_dir / f"scale-{dimension.replace(' ', '-')}-{measure}.svg"
            path.write_text(svg)
            print(path)


if __name__ == "__main__":
    main()
