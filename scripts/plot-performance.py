#!/usr/bin/env python3
"""Draws docs/performance.svg from docs/performance.csv: per CPU and weight
type, ours over llama.cpp (tokens/s) for prefill (pp512) and decode (tg128),
on 1 and 2 threads. A plain SVG, written by hand: no plotting package needed.

    python3 scripts/plot-performance.py [docs/performance.csv] [docs/performance.svg]
"""
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERIES = [  # (column stem, label, colour)
    ("pp512_1t", "prefill pp512, 1 thread", "#1f5f99"),
    ("pp512_2t", "prefill pp512, 2 threads", "#5d9bd5"),
    ("tg128_1t", "decode tg128, 1 thread", "#b35a00"),
    ("tg128_2t", "decode tg128, 2 threads", "#f0a030"),
]
BAR, GAP, GROUP_GAP, PANEL_W, LEFT, TOP = 9, 1, 14, 300, 70, 60


def ratio(row, stem):
    return float(row[stem + "_ours"]) / float(row[stem + "_llama"])


def main():
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs/performance.csv"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs/performance.svg"
    rows = list(csv.DictReader(src.open()))
    cpus = list(dict.fromkeys(r["cpu"] for r in rows))
    top = max(max(ratio(r, s) for s, _, _ in SERIES) for r in rows)
    top = float(int(top) + 1)
    group_h = len(SERIES) * (BAR + GAP) + GROUP_GAP
    panel_h = max(sum(1 for r in rows if r["cpu"] == c) for c in cpus) * group_h
    width = LEFT + len(cpus) * (PANEL_W + 40)
    height = TOP + panel_h + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14">streamllm / llama.cpp, tokens/s (TinyLlama-1.1B shape; 1.0: level)</text>']
    for p, cpu in enumerate(cpus):
        x0 = LEFT + p * (PANEL_W + 40)
        scale = PANEL_W / top
        out.append(f'<text x="{x0}" y="{TOP - 12}" font-size="12" font-weight="bold">{cpu}</text>')
        for t in range(int(top) + 1):
            x = x0 + t * scale
            out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + panel_h}" stroke="{"#000" if t == 1 else "#ddd"}"/>')
            out.append(f'<text x="{x:.1f}" y="{TOP + panel_h + 14}" text-anchor="middle">{t}</text>')
        for g, row in enumerate(r for r in rows if r["cpu"] == cpu):
            y0 = TOP + g * group_h
            out.append(f'<text x="{x0 - 4}" y="{y0 + 2 * (BAR + GAP) + 4}" text-anchor="end">{row["type"]}</text>')
            for s, (stem, _, colour) in enumerate(SERIES):
                v = ratio(row, stem)
                y = y0 + s * (BAR + GAP)
                out.append(f'<rect x="{x0}" y="{y}" width="{v * scale:.1f}" height="{BAR}" fill="{colour}"/>')
                out.append(f'<text x="{x0 + v * scale + 3:.1f}" y="{y + BAR - 1}" font-size="9">{v:.2f}</text>')
    ly = TOP + panel_h + 34
    for s, (_, label, colour) in enumerate(SERIES):
        lx = LEFT + s * 200
        out.append(f'<rect x="{lx}" y="{ly}" width="12" height="10" fill="{colour}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly + 9}">{label}</text>')
    out.append("</svg>")
    dst.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
