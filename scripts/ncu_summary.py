#!/usr/bin/env python3
"""Kernel time by kernel from Nsight Compute CSVs, side by side.

    python3 scripts/ncu_summary.py NAME=FILE.csv[.gz] [NAME=FILE.csv[.gz] ...] [--top N]

Each FILE is the output of `ncu --metrics gpu__time_duration.sum --csv --print-units base PROGRAM ...`
(the program's own lines before the CSV header are skipped). Prints, per input, the number of kernels and
their summed time, then one Markdown table per input: time, share and launches by kernel name (templates
and argument lists cut at 80 characters), largest first. ncu runs kernels one at a time, so the sums are
kernel time without overlap, not a step time.
"""
import argparse
import collections
import csv
import gzip
import sys


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", errors="replace") as f:
        rows = list(csv.reader(f))
    for i, r in enumerate(rows):
        if "Kernel Name" in r and "Metric Value" in r:
            h = r
            break
    else:
        sys.exit(f"{path}: no ncu CSV header (Kernel Name, Metric Value)")
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    total, count = collections.Counter(), collections.Counter()
    for r in rows[i + 1:]:
        if len(r) <= vi:
            continue
        try:
            v = float(r[vi].replace(",", ""))
        except ValueError:
            continue
        scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}.get(r[ui], None)
        if scale is None:
            sys.exit(f"{path}: unexpected unit {r[ui]!r}")
        name = r[ki][:80]
        total[name] += v * scale
        count[name] += 1
    return total, count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="NAME=FILE")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    for spec in args.inputs:
        name, _, path = spec.partition("=")
        if not path:
            sys.exit(f"{spec}: expected NAME=FILE")
        total, count = read(path)
        s = sum(total.values())
        print(f"### {name}: {sum(count.values())} kernels, {s:.2f} ms\n")
        print("| ms | share | launches | kernel |")
        print("|---:|---:|---:|---|")
        for k, t in total.most_common(args.top):
            print(f"| {t:.3f} | {100 * t / s:.1f}% | {count[k]} | `{k}` |")
        print()


if __name__ == "__main__":
    main()
