#!/usr/bin/env python3
"""Loss curves of train_gpt2cu and llm.c from dev/cuda/curve_llmc.sh's output folder.

    /usr/bin/python3 scripts/plot_curve_llmc.py OUT_DIR [--png FILE] [--table FILE]

Reads OUT_DIR/ours_seed*/metrics.jsonl and OUT_DIR/llmc_run*/main.log (and OUT_DIR/cpu_fp32_seed*/metrics.jsonl,
the CPU trainer in fp32 with the same flags and seeds, where present) and writes a plot (train loss, as a
25-step running mean, and val loss against the step) and a Markdown table: the val loss of every run at
every evaluation, and per-pair differences. Steps are counted as in our metrics: step k's train loss is the
loss of the k-th update's batch (llm.c's main.log calls it s:k-1), the val loss at step k is measured after
k updates (llm.c's s:k). The noise of the comparison is what separates two runs of one program: if the two
programs' curves differ by no more than that, they train the same.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys


def read_ours(path):
    train, val = {}, {}
    for line in open(path):
        r = json.loads(line)
        if r.get("loss") is not None and r["step"] > 0:
            train[r["step"]] = r["loss"]
        if r.get("val_loss") is not None:
            val[r["step"]] = r["val_loss"]
    return train, val


def read_llmc(path):
    train, val = {}, {}
    for line in open(path):
        m = re.match(r"s:(\d+) trl:([-\d.eE+naif]+)", line)
        if m:
            train[int(m.group(1)) + 1] = float(m.group(2))
        m = re.match(r"s:(\d+) tel:([-\d.eE+naif]+)", line)
        if m:
            val[int(m.group(1))] = float(m.group(2))
    return train, val


def running_mean(d, w):
    steps = sorted(d)
    out = {}
    for i, s in enumerate(steps):
        lo = max(0, i - w + 1)
        out[s] = statistics.fmean(d[t] for t in steps[lo:i + 1])
    return out


def max_abs_diff(a, b):
    common = sorted(set(a) & set(b))
    if not common:
        return float("nan"), 0
    return max(abs(a[s] - b[s]) for s in common), len(common)


def mean_diff(a, b, steps):
    return statistics.fmean(a[s] - b[s] for s in steps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--png", default="")
    ap.add_argument("--table", default="")
    args = ap.parse_args()
    runs = {}
    for p in sorted(glob.glob(os.path.join(args.out_dir, "ours_seed*", "metrics.jsonl"))):
        runs["ours " + os.path.basename(os.path.dirname(p)).replace("ours_", "")] = read_ours(p)
    # the CPU trainer in fp32 (the PyTorch-checked reference) from the same init, if run: same flags, the
    # same seeds, so the same data order as ours on the GPU; only the numerics differ
    for p in sorted(glob.glob(os.path.join(args.out_dir, "cpu_fp32_seed*", "metrics.jsonl"))):
        runs["CPU fp32 " + os.path.basename(os.path.dirname(p)).replace("cpu_fp32_", "")] = read_ours(p)
    for p in sorted(glob.glob(os.path.join(args.out_dir, "llmc_run*", "main.log"))):
        runs["llm.c " + os.path.basename(os.path.dirname(p)).replace("llmc_", "")] = read_llmc(p)
    runs = {k: v for k, v in runs.items() if v[0] or v[1]}
    if not runs:
        sys.exit(f"{args.out_dir}: no ours_seed*/metrics.jsonl or llmc_run*/main.log with losses")
    names = list(runs)
    ours = [n for n in names if n.startswith("ours")]
    llmc = [n for n in names if n.startswith("llm.c")]
    cpu = [n for n in names if n.startswith("CPU")]

    lines = []
    readme = os.path.join(args.out_dir, "README.txt")
    if os.path.exists(readme):
        lines += ["```", open(readme).read().rstrip(), "```", ""]
    val_steps = sorted(set.intersection(*(set(runs[n][1]) for n in names)))
    lines.append("| step | " + " | ".join(names) + " |")
    lines.append("|---:|" + "---:|" * len(names))
    for s in val_steps:
        lines.append(f"| {s} | " + " | ".join(f"{runs[n][1][s]:.4f}" for n in names) + " |")
    lines.append("")
    # train loss: mean over windows of 50 steps (a single step's loss is one batch's)
    last = min(max(runs[n][0]) for n in names if runs[n][0])
    windows = [(lo, min(lo + 49, last)) for lo in range(1, last + 1, 50)]
    lines.append("| train loss, mean over steps | " + " | ".join(names) + " |")
    lines.append("|---|" + "---:|" * len(names))
    for lo, hi in windows:
        cells = []
        for n in names:
            vals = [runs[n][0][s] for s in range(lo, hi + 1) if s in runs[n][0]]
            cells.append(f"{statistics.fmean(vals):.4f}" if vals else "-")
        lines.append(f"| {lo}-{hi} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| pair | max abs val difference | mean val difference (first - second) | train, last 50 steps (first - second) |")
    lines.append("|---|---:|---:|---:|")
    pairs = []
    if len(ours) >= 2:
        pairs.append((ours[0], ours[1], "two seeds of ours"))
    if len(llmc) >= 2:
        pairs.append((llmc[0], llmc[1], "two runs of llm.c"))
    for c in cpu:
        o = "ours " + c.split()[-1]
        if o in runs:
            pairs.append((o, c, "GPU bf16 against CPU fp32, same seed"))
    for o in ours:
        for c in llmc[:1]:
            pairs.append((o, c, "ours against llm.c"))
    tail = range(max(1, last - 49), last + 1)
    for a, b, what in pairs:
        d, _ = max_abs_diff(runs[a][1], runs[b][1])
        md = mean_diff(runs[a][1], runs[b][1], val_steps[1:]) if len(val_steps) > 1 else float("nan")
        ta = [runs[a][0][s] for s in tail if s in runs[a][0] and s in runs[b][0]]
        tb = [runs[b][0][s] for s in tail if s in runs[a][0] and s in runs[b][0]]
        td = statistics.fmean(ta) - statistics.fmean(tb) if ta else float("nan")
        lines.append(f"| {a} - {b} ({what}) | {d:.4f} | {md:+.4f} | {td:+.4f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.table:
        with open(args.table + ".tmp", "w") as f:
            f.write(text)
        os.replace(args.table + ".tmp", args.table)

    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for n in names:
            style = {"ours": "-", "llm.c": "--", "CPU": ":"}[n.split()[0]]
            tr = running_mean(runs[n][0], 25)
            ax1.plot(sorted(tr), [tr[s] for s in sorted(tr)], style, label=n, linewidth=1.2)
            v = runs[n][1]
            ax2.plot(sorted(v), [v[s] for s in sorted(v)], style, marker="o", markersize=3, label=n, linewidth=1.2)
        ax1.set_title("train loss (running mean of 25 steps)")
        ax2.set_title("val loss")
        for ax in (ax1, ax2):
            ax.set_xlabel("step")
            ax.set_ylabel("loss (nats per token)")
            ax.grid(alpha=0.3)
            ax.legend()
        ax1.set_ylim(top=min(8.0, ax1.get_ylim()[1]))
        later = [v for n in names for s, v in runs[n][1].items() if s > 0]  # step 0 (10.9) would flatten the rest
        if later:
            ax2.set_ylim(min(later) - 0.1, max(later) + 0.1)
        fig.tight_layout()
        fig.savefig(args.png + ".tmp.png", dpi=110)
        os.replace(args.png + ".tmp.png", args.png)


if __name__ == "__main__":
    main()
