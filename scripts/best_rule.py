#!/usr/bin/python3
"""
best_rule.py — which rule should pick an arm's best point from its grid? Scored the way the held-out suite
uses the pick: chosen on a few grid seeds, then read on fresh ones.

    scripts/best_rule.py docs/results/best_rule_dev/default/b1/runs.csv --out docs/results/best_rule_dev/rules.md
    scripts/best_rule.py docs/results/best_rule_dev/default/b1/runs.csv --sizes 2,3,4,5 --out docs/results/best_rule_dev/sizes.md

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

--sizes asks how many grid seeds the suite's rule (the mean) needs: for each size k, every draw of k seeds
picks a point, read on the seeds left over against the point best over all of them. That reference is the
same for every k (the regret above is against the best on the seeds left over, which flatters a pick read
on few), so the costs of different sizes compare; each seed lies in the left-over set equally often over
the draws, so a cost averages to the all-seeds mean at the pick minus the all-seeds best. The reference
holds the drawn seeds too, which pulls a large draw's cost toward 0: a size is read only up to half the seeds.
"""
import argparse
import csv
import itertools
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from comparelib import die, write_text  # noqa: E402  (die: one line 'error: ...', exit 1, as the suite's)

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


def score_sizes(pts, seeds, sizes):
    """{k: {"cost", "hits", "draws"}}: the mean rule's pick from every draw of k seeds, read on the rest
    against the point best over all the seeds (one reference for every k)."""
    best_all = pick(rule_values("mean", pts, seeds))
    out = {}
    for k in sizes:
        cost, hits, draws = [], 0, list(itertools.combinations(seeds, k))
        for drawn in draws:
            rest = [s for s in seeds if s not in drawn]
            p = pick(rule_values("mean", pts, drawn))
            on_rest = rule_values("mean", pts, rest)
            cost.append(on_rest[p] - on_rest[best_all])
            hits += p == best_all
        out[k] = {"cost": statistics.mean(cost), "hits": hits / len(draws), "draws": len(draws)}
    return out


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
    p.add_argument("--sizes", help="instead: score the mean's pick from each of these numbers of seeds, e.g. 2,3,4")
    p.add_argument("--out", help="also write the tables to this markdown file")
    a = p.parse_args()
    if a.pick < 2:
        die(f"flag --pick: {a.pick}; a rule needs at least 2 seeds (mean_sd takes their spread)")
    sizes = None
    if a.sizes is not None:
        try:
            sizes = sorted({int(x) for x in a.sizes.split(",")})
        except ValueError:
            die(f"flag --sizes: {a.sizes!r}; expected numbers of seeds separated by commas, e.g. 2,3,4")
        if sizes[0] < 1:
            die(f"flag --sizes: {a.sizes}; a pick needs at least 1 seed")
    grid = read_grid(a.runs_csv)
    if not grid:
        die(f"{a.runs_csv}: no finished grid runs")
    if sizes is not None:
        write(a.out, sizes_text(a.runs_csv, grid, sizes))
        return
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
    write(a.out, "\n".join(out) + "\n")


def sizes_text(path, grid, sizes):
    """The table of --sizes: one row per size, one column per arm."""
    kinds = sorted(grid)
    res, n_seeds = {}, {}
    for kind in kinds:
        seeds = complete_seeds(path, kind, grid[kind])
        if len(seeds) < 2 * sizes[-1]:  # past half, the reference is mostly the drawn seeds themselves
            die(f"{path}: arm {kind}: {len(seeds)} seeds; --sizes up to {sizes[-1]} needs at least {2 * sizes[-1]}")
        res[kind], n_seeds[kind] = score_sizes(grid[kind], seeds, sizes), len(seeds)
    out = [f"The mean's pick from k seeds of each arm's, read on the seeds left over ({path}; scripts/best_rule.py "
           "--sizes). Cost: their mean at the pick minus their mean at the point best over all the arm's seeds, "
           "averaged over every draw; in brackets, the share of draws that pick that point.", "",
           "| seeds picking | " + " | ".join(f"`{k}` ({n_seeds[k]} seeds, {len(grid[k])} points)" for k in kinds) + " |",
           "|---|" + "---|" * len(kinds)]
    for k in sizes:
        out.append(f"| {k} | " + " | ".join(f"{res[kind][k]['cost']:+.4f} ({res[kind][k]['hits']:.0%})"
                                           for kind in kinds) + " |")
    return "\n".join(out) + "\n"


def write(path, text):
    """Print the tables; with --out also write them there (temp file + rename)."""
    print(text, end="")
    if path:
        write_text(path, text)


if __name__ == "__main__":
    main()
