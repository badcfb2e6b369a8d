#!/usr/bin/python3
"""
grid_vs_fresh.py — how well the suite's grid foretells its comparison. The suite picks each arm's point by
the lowest mean over a few grid seeds and then reads the arms there on fresh seeds. A pick's grid reading is
flattered by the pick itself (of many points, the one whose seeds happened to land low); the question is by
how much, and whether it flatters a method more than the baseline it meets.

    scripts/grid_vs_fresh.py docs/results --out docs/results/grid_vs_fresh.md

Reads every summary.json under the folders given that holds the table "each method against the baseline it
meets" (configs with methods: each entry names the method's pick, its mean over the comparison seeds, and
its paired difference from its baseline there) and the grid's means per arm and point. For each pick:
fresh − grid, the comparison seeds' mean at the pick minus the grid seeds' mean there (an arm counted once
per report, as a method or as a baseline). For each method: the grid's difference (method − baseline, each at
its own pick, on the grid seeds) against the comparison's (the same, on the fresh seeds). Picks of one
report share seeds, so the summary describes; it carries no p-value.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from comparelib import die, write_text  # noqa: E402


def find_summaries(roots):
    out = []
    for root in roots:
        if os.path.isfile(root):
            out.append(root)
            continue
        if not os.path.isdir(root):
            die(f"{root}: no such file or folder")
        for d, _, files in os.walk(root):
            if "summary.json" in files:
                out.append(os.path.join(d, "summary.json"))
    return sorted(out)


def read_summary(path):
    """(label, [method rows]) or None for a summary without methods."""
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        die(f"{path}: cannot read ({e.strerror})")
    except json.JSONDecodeError as e:
        die(f"{path}: not JSON ({e.msg}, line {e.lineno})")
    if not isinstance(d, dict) or not d.get("methods"):
        return None
    for key in ("grid", "best", "corpus", "cell"):
        if key not in d:
            die(f"{path}: a summary with methods but no '{key}'")
    best, best_b2 = d["best"], d.get("best_beta2", {})
    at = {}
    for g in d["grid"]:
        for arm, m in (g.get("means") or {}).items():
            if m is not None:
                at[(arm, g["lr"], g.get("beta2"))] = m
    grid = {}
    for arm, lr in best.items():
        key = (arm, lr, best_b2.get(arm))
        if key in at:
            grid[arm] = at[key]
    rows = []
    for m in d["methods"]:
        p = m.get("paired") or {}
        if m.get("mean") is None or p.get("mean") is None:
            continue  # a comparison not finished
        arm, base = m["arm"], m["against"]
        if arm not in grid or base not in grid:
            die(f"{path}: method {arm} against {base}: no grid mean at a pick")
        rows.append({"arm": arm, "base": base, "fresh": m["mean"], "fresh_base": m["mean"] - p["mean"],
                     "grid": grid[arm], "grid_base": grid[base]})
    return os.path.relpath(os.path.dirname(path)), rows


def describe(v):
    """mean, sd, n, share above 0 of a list (sd None under 2)"""
    if not v:
        return None
    return {"mean": statistics.mean(v), "sd": statistics.stdev(v) if len(v) > 1 else None, "n": len(v),
            "above": sum(x > 0 for x in v) / len(v)}


def analyse(summaries):
    picks, methods, reports = [], [], []
    for path in summaries:
        got = read_summary(path)
        if got is None:
            continue
        label, rows = got
        if not rows:
            continue
        reports.append(label)
        seen = set()
        for r in rows:
            for arm, role, fresh, grid in ((r["arm"], "method", r["fresh"], r["grid"]),
                                           (r["base"], "baseline", r["fresh_base"], r["grid_base"])):
                if arm in seen:
                    continue
                seen.add(arm)
                picks.append({"report": label, "arm": arm, "role": role, "shift": fresh - grid})
            gd, fd = r["grid"] - r["grid_base"], r["fresh"] - r["fresh_base"]
            methods.append({"report": label, "arm": r["arm"], "base": r["base"], "grid_diff": gd,
                            "fresh_diff": fd, "error": fd - gd})
    return reports, picks, methods


def text(roots, reports, picks, methods):
    if not methods:
        die(f"{', '.join(roots)}: no summary.json with a finished method comparison")
    L = [f"How the grid's reading at each pick compares with the fresh seeds' ({len(reports)} reports under "
         f"{', '.join(roots)}; scripts/grid_vs_fresh.py). Fresh − grid: the comparison seeds' mean at an arm's "
         "pick minus the grid seeds' mean there. Error: the comparison's difference (method − baseline) minus "
         "the grid's, each arm at its own pick. The picks of one report share seeds: a description, no p-value.",
         "", "| picks | n | fresh − grid: mean | sd | share above 0 |", "|---|---|---|---|---|"]
    for role in ("baseline", "method", None):
        v = [p["shift"] for p in picks if role is None or p["role"] == role]
        s = describe(v)
        if s:
            sd = "—" if s["sd"] is None else f"{s['sd']:.4f}"
            L.append(f"| {role + 's' if role else 'all'} | {s['n']} | {s['mean']:+.4f} | {sd} | {s['above']:.0%} |")
    err = describe([m["error"] for m in methods])
    # a method that ran as its baseline (a gate that never opened) ties on both: it says nothing of the sign
    signed = [m for m in methods if m["grid_diff"] != 0 or m["fresh_diff"] != 0]
    agree = sum((m["grid_diff"] < 0) == (m["fresh_diff"] < 0) for m in signed)
    small = [m for m in signed if abs(m["grid_diff"]) < 0.01]
    flip = sum((m["grid_diff"] < 0) != (m["fresh_diff"] < 0) for m in small)
    L += ["", f"Method against its baseline, {err['n']} comparisons: error {err['mean']:+.4f} on average, sd "
          + ("—" if err["sd"] is None else f"{err['sd']:.4f}")
          + f"; the grid and the fresh seeds agree on which is lower in {agree} of the {len(signed)} that do not "
          f"tie on both; where the grid's difference is under 0.01 nats, in {len(small) - flip} of {len(small)}.", "",
          "| report | method | against | grid: method − baseline | fresh seeds | error |", "|---|---|---|---|---|---|"]
    for m in methods:
        L.append(f"| {m['report']} | `{m['arm']}` | `{m['base']}` | {m['grid_diff']:+.4f} | {m['fresh_diff']:+.4f} | "
                 f"{m['error']:+.4f} |")
    return "\n".join(L) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("roots", nargs="+", help="folders searched for summary.json (or summary.json files)")
    p.add_argument("--out", help="also write the tables to this markdown file (temp file + rename)")
    a = p.parse_args()
    reports, picks, methods = analyse(find_summaries(a.roots))
    out = text(a.roots, reports, picks, methods)
    print(out, end="")
    if a.out:
        write_text(a.out, out)


if __name__ == "__main__":
    main()
