#!/usr/bin/python3
"""
best_rule.py — which rule should pick an arm's best point from its grid? Scored the way the held-out suite
uses the pick: chosen on a few grid seeds, then read on fresh ones.

    scripts/best_rule.py docs/results/best_rule_dev/default/b1/runs.csv --out docs/results/best_rule_dev/rules.md

Reads a suite report's runs.csv (configs/suite/best_rule_dev.json: every arm at every point of a fixed LR x
beta2 grid on many seeds) and, for each arm, draws every --pick of its seeds (3, as the suite's grid seeds),
lets each rule pick a point from those seeds' final val losses, and scores the pick on the seeds left over
(5 of 8, as the suite's comparison seeds): their mean there, its regret (that mean minus the mean of the point
best on those seeds), and their spread there (what widens every interval read at the pick). The draws share
seeds, so their averages describe the grid; they are not independent samples and carry no p-value.

The rules (a pick is the point of lowest value; ties to the lower LR, then the lower beta2, as the suite):
  mean     the mean over the drawn seeds (the suite's rule)
  median   their median
  worst    their largest value: a point is as good as its worst seed
  mean_sd  their mean plus their sample standard deviation
  smooth   the mean smoothed along the LR axis: the point's mean at half weight, each LR neighbour's (same
           beta2) at a quarter, renormalised at an end of the grid
"""
import argparse
import csv
import itertools
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from comparelib import die  # noqa: E402  (one line 'error: ...', exit 1, as the suite's)

RULES = ("mean", "median", "worst", "mean_sd", "smooth")


def read_grid(path):
    """{arm kind: {(lr, beta2): {seed: final val loss}}} of the grid runs in a suite report's runs.csv"""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        die(f"{path}: cannot read ({e.strerror})")
    need = {"phase", "kind", "lr", "seed", "final_val_loss"}
    if not rows or not need <= set(rows[0]):
        die(f"{path}: not a suite runs.csv (needs columns {', '.join(sorted(need))})")
    grid = {}
    for r in rows:
        if r["phase"] != "grid" or r["final_val_loss"] in ("", None):
            continue
        b2 = float(r["beta2"]) if r.get("beta2") else None
        pt = (float(r["lr"]), b2)
        seeds = grid.setdefault(r["kind"], {}).setdefault(pt, {})
        seed = int(r["seed"])
        if seed in seeds:
            die(f"{path}: {r['kind']} at lr {pt[0]:g}, beta2 {b2}: seed {seed} twice")
        seeds[seed] = float(r["final_val_loss"])
    return grid


def complete_seeds(path, kind, pts):
    """The seeds every point of an arm's grid has (a rule compares points on the same seeds)."""
    seeds = set.intersection(*(set(v) for v in pts.values()))
    missing = sorted(set.union(*(set(v) for v in pts.values())) - seeds)
    if missing:
        die(f"{path}: arm {kind}: seeds {missing} lack some grid points (the grid is not finished)")
    return sorted(seeds)


def rule_values(rule, pts, seeds):
    """{point: the rule's value of it over these seeds}"""
    means = {pt: statistics.mean(v[s] for s in seeds) for pt, v in pts.items()}
    if rule == "mean":
        return means
    if rule == "median":
        return {pt: statistics.median(v[s] for s in seeds) for pt, v in pts.items()}
    if rule == "worst":
        return {pt: max(v[s] for s in seeds) for pt, v in pts.items()}
    if rule == "mean_sd":
        return {pt: means[pt] + statistics.stdev(v[s] for s in seeds) for pt, v in pts.items()}
    if rule == "smooth":
        out = {}
        for lr, b2 in pts:
            lrs = sorted(l for l, b in pts if b == b2)
            i = lrs.index(lr)
            nb = [lrs[j] for j in (i - 1, i + 1) if 0 <= j < len(lrs)]
            w = 0.5 + 0.25 * len(nb)
            out[(lr, b2)] = (0.5 * means[(lr, b2)] + sum(0.25 * means[(l, b2)] for l in nb)) / w
        return out
    die(f"unknown rule {rule}")


def pick(values):
    """The point of lowest value; ties to the lower LR, then the lower beta2 (the suite's order)."""
    return min(values, key=lambda pt: (values[pt], pt[0], pt[1] or 0))


def score_rules(pts, seeds, k):
    """{rule: {"mean", "regret", "sd", "hits", "picks"}} over every draw of k seeds, scored on the rest."""
    acc = {r: {"mean": [], "regret": [], "sd": [], "hits": 0, "picks": {}} for r in RULES}
    draws = list(itertools.combinations(seeds, k))
    for drawn in draws:
        rest = [s for s in seeds if s not in drawn]
        on_rest = rule_values("mean", pts, rest)
        best_rest = pick(on_rest)
        for r in RULES:
            p = pick(rule_values(r, pts, drawn))
            a = acc[r]
            a["mean"].append(on_rest[p])
            a["regret"].append(on_rest[p] - on_rest[best_rest])
            a["sd"].append(statistics.stdev(pts[p][s] for s in rest) if len(rest) > 1 else 0.0)
            a["hits"] += p == best_rest
            a["picks"][p] = a["picks"].get(p, 0) + 1
    n = len(draws)
    return {r: {"mean": statistics.mean(a["mean"]), "regret": statistics.mean(a["regret"]),
                "sd": statistics.mean(a["sd"]), "hits": a["hits"] / n, "picks": a["picks"], "draws": n}
            for r, a in acc.items()}


def pt_name(pt):
    return f"{pt[0]:g}" + (f", {pt[1]:g}" if pt[1] is not None else "")


def grid_table(pts, seeds):
    lines = ["| LR, β2 | mean | sd | lowest seed | highest seed |", "|---|---|---|---|---|"]
    for pt in sorted(pts, key=lambda p: (p[1] or 0, p[0])):
        v = [pts[pt][s] for s in seeds]
        lines.append(f"| {pt_name(pt)} | {statistics.mean(v):.4f} | {statistics.stdev(v):.4f} | "
                     f"{min(v):.4f} | {max(v):.4f} |")
    return lines


def rules_table(res):
    lines = ["| rule | mean of the other seeds at the pick | regret | picks the best on the other seeds | "
             "their sd at the pick | points picked (share of draws) |", "|---|---|---|---|---|---|"]
    for r in RULES:
        a = res[r]
        picks = ", ".join(f"{pt_name(p)} ({c / a['draws']:.0%})"
                          for p, c in sorted(a["picks"].items(), key=lambda x: -x[1]))
        lines.append(f"| `{r}` | {a['mean']:.4f} | {a['regret']:+.4f} | {a['hits']:.0%} | {a['sd']:.4f} | {picks} |")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("runs_csv", help="a suite report's runs.csv")
    p.add_argument("--pick", type=int, default=3, help="seeds a rule picks from (default %(default)s)")
    p.add_argument("--out", help="also write the tables to this markdown file")
    a = p.parse_args()
    if a.pick < 2:
        die(f"flag --pick: {a.pick}; a rule needs at least 2 seeds (mean_sd takes their spread)")
    grid = read_grid(a.runs_csv)
    if not grid:
        die(f"{a.runs_csv}: no finished grid runs")
    out = [f"Rules scored over every {a.pick} of each arm's seeds, on the seeds left over ({a.runs_csv}; "
           "scripts/best_rule.py). Regret: the mean of the other seeds at the pick minus their mean at the point "
           "best on them, averaged over the draws.", ""]
    summary = {}
    for kind in sorted(grid):
        pts = grid[kind]
        seeds = complete_seeds(a.runs_csv, kind, pts)
        if len(seeds) < a.pick + 2:
            die(f"{a.runs_csv}: arm {kind}: {len(seeds)} seeds; --pick {a.pick} needs at least {a.pick + 2}")
        res = score_rules(pts, seeds, a.pick)
        summary[kind] = res
        out += [f"### `{kind}`: {len(pts)} points, {len(seeds)} seeds, {res['mean']['draws']} draws", ""]
        out += grid_table(pts, seeds) + [""] + rules_table(res) + [""]
    out += ["Each rule against `mean` (regret difference; negative: the rule's picks end lower on the other seeds):",
            ""]
    out += ["| rule | " + " | ".join(f"`{k}`" for k in sorted(summary)) + " |",
            "|---|" + "---|" * len(summary)]
    for r in RULES[1:]:
        out.append(f"| `{r}` | " + " | ".join(f"{summary[k][r]['regret'] - summary[k]['mean']['regret']:+.4f}"
                                             for k in sorted(summary)) + " |")
    text = "\n".join(out) + "\n"
    print(text, end="")
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
