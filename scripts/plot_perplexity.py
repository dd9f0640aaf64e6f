#!/usr/bin/python3
"""Plots examples/perplexity's CSV: perplexity and cache memory against stream position.

    scripts/plot_perplexity.py docs/perplexity-stories260K.csv docs/perplexity-stories260K.png
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    rows = defaultdict(list)
    with open(src, newline="") as f:
        for r in csv.DictReader(f):
            rows[r["mode"]].append(r)
    fig, (ppl, mem) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    styles = {"dense": ("tab:red", "-", "dense (every token)"),
              "window": ("tab:orange", "--", "window only (0 sinks)"),
              "sink+window": ("tab:blue", "-", "sink+window (StreamingLLM)")}
    for mode, rs in rows.items():
        color, line, label = styles.get(mode, (None, "-", mode))
        x = [int(r["last_token"]) + 1 for r in rs]
        ppl.plot(x, [float(r["perplexity"]) for r in rs], line, color=color, label=label, linewidth=1.1)
        mem.plot(x, [int(r["cache_bytes_used"]) / 2**20 for r in rs], line, color=color, label=label, linewidth=1.5)
    ppl.set_ylabel("perplexity per block")
    ppl.set_yscale("log")
    ppl.grid(True, which="both", alpha=0.3)
    ppl.legend()
    ppl.set_title("stories260K on tinystories-valid-excerpt.txt: teacher-forced perplexity")
    mem.set_ylabel("KV cache in use (MiB)")
    mem.set_xlabel("stream position (tokens)")
    mem.set_xscale("log")
    mem.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
