#!/usr/bin/python3
"""
test/test_suite.py — scripts/suite's runner with test/fake_trainer.py standing in for the trainer (run by
`make test`; the longer suites, beta2 grids, named arms and the variants table, are test/test_suite_variants.py's,
in `make check`): the dry run lists every grid command and runs nothing; a shard (--cell, --corpus) runs its
grid, picks each arm's best LR from it and runs best against best on the fresh seeds (the baseline also at
115% of the steps), and touches no other shard; a second call runs nothing; a run whose DONE file is gone is
run again, alone, and a changed cell runs again; the LR grid grows past an end where a best LR sits; a seed
without a step ratio is counted and said; a failed run fails the call and leaves the others finished; a config
whose comparison seeds are not fresh is refused; --verdict counts, over several results folders, the median
cell, the cells that clear the threshold and the grid points where hybrid mode was worse; arms that do not fit
are refused.
Prints 'N passed, N failed'; exits 1 if any failed.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "scripts", "suite")
FAKE = os.path.join(ROOT, "test", "fake_trainer.py")
TMP = tempfile.mkdtemp(prefix="test_suite_")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import TESTS, run_tests, test  # noqa: E402


def make_config(where, **over):
    """A suite of two corpora and two cells of 10 steps; the fake trainer's loss is lowest at LR 2e-3."""
    os.makedirs(where, exist_ok=True)
    corpora = {}
    for c in ("alpha", "beta"):
        d = os.path.join(where, "data", c)
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "train_000000.bin"), "wb").close()
        corpora[c] = d
    cfg = {"name": "t", "trainer": FAKE, "results": os.path.join(where, "results"), "corpora": corpora,
           "heldout": ["alpha", "beta"], "cells": ["c1", "c2"], "grid_seeds": [1, 2], "compare_seeds": [3, 4, 5],
           "long_fraction": 1.15, "threshold": 0.03, "args": {"-v": 5}, "hybrid_args": {"--hybrid": 1}}
    cfg.update(over)
    cfg = {k: v for k, v in cfg.items() if v is not None}  # a key given as None is left out
    with open(os.path.join(where, "suite.json"), "w") as f:
        json.dump(cfg, f)
    for c in ("c1", "c2"):
        with open(os.path.join(where, f"{c}.json"), "w") as f:
            json.dump({"name": c, "args": {"-b": 4, "-t": 8, "-x": 10}, "lr_grid": [0.001, 0.002, 0.004]}, f)
    return os.path.join(where, "suite.json")


def suite(*args, env=None):
    e = dict(os.environ, FAKE_LOOKAHEAD_SUMMARY="1")
    e.update(env or {})
    p = subprocess.run([SUITE] + list(args), cwd=ROOT, capture_output=True, text=True, env=e, timeout=300)
    return p.returncode, p.stdout, p.stderr


def run_shard(name, cell, corpus, **over):
    """A fresh suite under TMP/name (make_config's, with over), one shard of it run to the end (two jobs):
    (its config, the call's output, the cell's results folder)."""
    where = os.path.join(TMP, name)
    cfg = make_config(where, **over)
    rc, out, err = suite("--config", cfg, "--cell", cell, "--corpus", corpus, "--jobs", "2")
    assert rc == 0, out + err
    return cfg, out, os.path.join(where, "results", corpus, cell)


def started(out):
    return [ln for ln in out.split("\n") if "] start " in ln]


@test
def dry_run_lists_the_grid_and_runs_nothing():
    cfg = make_config(os.path.join(TMP, "dry"))
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 0, err
    cmds = [ln for ln in out.split("\n") if ln.startswith("  ")]
    assert len(cmds) == 2 * 2 * (2 * 2 * 3), len(cmds)  # corpora x cells x (seeds x arms x LRs)
    assert "waits for the baseline and hybrid grid" in out
    assert any("--hybrid 1 -l 0.004" in c and "--seed 2" in c for c in cmds)
    assert not os.path.exists(os.path.join(TMP, "dry", "results"))


@test
def cell_args_replace_a_cells_own_flags_and_an_arm_still_wins():
    cfg = make_config(os.path.join(TMP, "cellargs"), cell_args={"-t": 16, "-u": 3},
                      hybrid_args={"--hybrid": 1, "-u": 5})
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 0, err
    cmds = [ln for ln in out.split("\n") if ln.startswith("  ")]
    base = [c for c in cmds if "--hybrid" not in c]
    hyb = [c for c in cmds if "--hybrid 1" in c]
    assert base and hyb and len(base) + len(hyb) == len(cmds), out
    assert all(" -t 16 " in c and " -t 8 " not in c and " -u 3 " in c for c in base), base[0]  # the cell's -t 8 replaced
    assert all(" -t 16 " in c and " -u 5 " in c and " -u 3 " not in c for c in hyb), hyb[0]  # the arm's -u wins
    # the report says which of the cell's flags the config replaced (the cell's own text describes its own)
    rc, out, err = suite("--config", cfg, "--report-only")
    reports = glob.glob(os.path.join(TMP, "cellargs", "results", "*", "*", "report.md"))
    assert rc == 0 and reports, err
    assert all("This config replaces the cell's flags with -t 16 -u 3." in open(r).read() for r in reports), reports
    cfg = make_config(os.path.join(TMP, "cellargs_bad"), cell_args={"-x": 20})
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 1 and "'cell_args': flag -x is set by the suite per run" in err, err


@test
def cell_lr_grid_replaces_a_named_cells_grid_only():
    cfg = make_config(os.path.join(TMP, "cellgrid"), cell_lr_grid={"c1": [0.003, 0.006]})
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 0, err
    cmds = [ln for ln in out.split("\n") if ln.startswith("  ")]
    lrs = {cell: sorted({float(re.search(r" -l (\S+)", c).group(1)) for c in cmds if f"/{cell}/" in c})
           for cell in ("c1", "c2")}
    assert lrs == {"c1": [0.003, 0.006], "c2": [0.001, 0.002, 0.004]}, lrs
    for bad in ({"c3": [0.001, 0.002]}, {"c1": [0.002, 0.001]}, {"c1": [0.001]}):
        cfg = make_config(os.path.join(TMP, "cellgrid_bad"), cell_lr_grid=bad)
        rc, out, err = suite("--config", cfg, "--dry-run")
        assert rc == 1 and "'cell_lr_grid'" in err, (bad, err)


@test
def a_config_made_from_another_says_only_what_it_changes():
    where = os.path.join(TMP, "based")
    make_config(where, args={"-v": 5, "-m": 2, "-q": 0.1})

    def derived(file, **keys):
        path = os.path.join(where, file)
        with open(path, "w") as f:
            json.dump(keys, f)
        return path
    # args merge flag by flag (null drops one), anything else replaces; the cells stay the base's folder's
    cfg = derived("gpu.json", base="suite.json", name="t_gpu", description="the same on c1, -m 3, no -q",
                  cells=["c1"], args={"-m": 3, "-q": None}, results=os.path.join(where, "results_gpu"))
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 0, err
    cmds = [ln for ln in out.split("\n") if ln.startswith("  ")]
    assert len(cmds) == 2 * (2 * 2 * 3), len(cmds)  # corpora x (seeds x arms x LRs) of c1 alone
    assert all("/c1/" in c and "results_gpu" in c for c in cmds), cmds[0]
    assert all(" -v 5 " in c and " -m 3 " in c and " -m 2 " not in c and " -q " not in c for c in cmds), cmds[0]
    # a chain resolves in order: the nearest config's keys win
    cfg = derived("gpu2.json", base="gpu.json", name="t_gpu2", description="c2 this time", cells=["c2"])
    rc, out, err = suite("--config", cfg, "--dry-run")
    cmds = [ln for ln in out.split("\n") if ln.startswith("  ")]
    assert rc == 0 and cmds and all("/c2/" in c and " -m 3 " in c for c in cmds), out + err
    # a base that is missing, the config itself, or a loop, and a config without its own name, are refused
    for bad, msg in ((dict(base="nothere.json", name="x", description="x"), "'base': no config"),
                     (dict(base="self.json", name="x", description="x"), "is this config or one it is made from"),
                     (dict(base="gpu.json", description="x"), "needs its own 'name' and 'description'"),
                     (dict(base=3, name="x", description="x"), "'base' must name another config")):
        rc, out, err = suite("--config", derived("self.json", **bad), "--dry-run")
        assert rc == 1 and msg in err and "Traceback" not in err, (bad, err)
    derived("loop_a.json", base="loop_b.json", name="a", description="a")
    rc, out, err = suite("--config", derived("loop_b.json", base="loop_a.json", name="b", description="b"), "--dry-run")
    assert rc == 1 and "is this config or one it is made from" in err, err


@test
def every_committed_suite_config_loads():
    """A study starts from a committed config: each must pass the suite's checks (its loader, which needs no data:
    a fresh clone has no corpora), so that a broken one fails here, not hours into a study."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("suite_module", SUITE)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("suite_module", loader))
    loader.exec_module(mod)
    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "suite", "*.json")))
    configs = [p for p in paths if {"cells", "base"} & set(json.load(open(p)))]  # the others are cells
    assert len(configs) >= 5, paths
    for p in configs:
        try:
            cfg = mod.load_suite(p)
        except mod.cl.CompareError as e:
            raise AssertionError(f"{p}: {e}")
        assert cfg["_cells"] and cfg["_arms"] is not None, p


@test
def a_shard_runs_its_grid_then_best_against_best_and_resumes():
    cfg, out, _ = run_shard("run", "c1", "beta")
    assert len(started(out)) == 12 + 9, len(started(out))  # the grid, then 3 seeds x (baseline, long baseline, hybrid)
    where = os.path.join(TMP, "run")
    res = os.path.join(where, "results")
    assert sorted(os.listdir(res)) == ["beta"] and sorted(os.listdir(os.path.join(res, "beta"))) == ["c1"]
    s = json.load(open(os.path.join(res, "beta", "c1", "summary.json")))
    assert s["best"] == {"baseline": 0.002, "hybrid": 0.002}, s["best"]
    cmd = open(os.path.join(res, "beta", "c1", "compare", "baseline_long", "seed4", "cmd.txt")).read().split()
    assert cmd[cmd.index("-x") + 1] == "12" and cmd[cmd.index("-l") + 1] == "0.002", cmd
    assert cmd[cmd.index("--seed") + 1] == "4"
    assert s["compare"]["paired"]["n"] == 3 and s["compare"]["paired"]["seeds"] == [3, 4, 5]
    assert "## Best against best" in open(os.path.join(res, "beta", "c1", "report.md")).read()
    why = s["grid_why"]  # the fake trainer's hybrid runs end 0.01 lower in training loss, gated 2 of 8 steps
    assert [w["lr"] for w in why] == [0.001, 0.002, 0.004], why
    assert all(abs(w["train_paired"]["mean"] + 0.01) < 1e-9 and w["gated_fraction"] == 0.25 for w in why), why
    assert "last step's training loss" in open(os.path.join(res, "beta", "c1", "report.md")).read()
    assert "| beta | c1 | 0.002 / 0.002 | " in out  # the overview table
    rows = open(os.path.join(res, "beta", "c1", "runs.csv")).read().strip().split("\n")
    assert len(rows) == 1 + 21 and rows[1].startswith("grid,") and "--seed" in rows[-1], rows[:2]
    # again: nothing to run
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta")
    assert rc == 0 and not started(out), out
    assert "beta/c1 grid: 12 of 12 runs finished" in out and "beta/c1 compare: 9 of 9 runs finished" in out
    # a run without its DONE file runs again, alone
    os.remove(os.path.join(res, "beta", "c1", "grid", "hybrid_lr0.004", "seed2", "DONE"))
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta")
    assert rc == 0 and len(started(out)) == 1 and "grid/hybrid_lr0.004/seed2" in started(out)[0], out
    # a changed cell (another batch size) changes every command: the grid runs again, none is taken as done
    c1 = json.load(open(os.path.join(where, "c1.json")))
    c1["args"]["-b"] = 2
    json.dump(c1, open(os.path.join(where, "c1.json"), "w"))
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta", "--phase", "grid")
    assert rc == 0 and len(started(out)) == 12, out
    # the other shard is untouched, and its dry run lists only its own grid
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert "beta/c1 grid: 12 of 12" in out and "alpha/c1 grid: 0 of 12" in out and "beta/c2 grid: 0 of 12" in out, out
    # runs are keyed by the trainer: a dry run with another one finds none finished, and names the one they ran with
    other = os.path.join(where, "other_trainer")
    os.symlink(FAKE, other)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta", "--dry-run", "--trainer", other)
    assert rc == 0 and f"beta/c1 grid: 0 of 12 runs finished with {other}; some ran with {FAKE}" in out, out
    # and a report with it would overwrite the cell's report with gaps: refused, the report untouched
    report = os.path.join(res, "beta", "c1", "report.md")
    before = open(report).read()
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta", "--report-only", "--trainer", other)
    assert rc == 1 and f"some runs were made with {FAKE}: pass it as --trainer (no report written)" in err, (out, err)
    assert open(report).read() == before


@test
def a_grid_grows_past_the_end_where_a_best_lr_sits():
    # the fake trainer's loss is lowest at 2e-3: a grid of 4e-3 and 8e-3 has both arms' best at its low end, so
    # with grid_extend 2 it grows to 2e-3 (best at the end again), then to 1e-3 (2e-3 now inside), and stops
    where = os.path.join(TMP, "grow")

    def config(**over):
        cfg = make_config(where, **over)
        c1 = json.load(open(os.path.join(where, "c1.json")))
        c1["lr_grid"] = [0.004, 0.008]
        json.dump(c1, open(os.path.join(where, "c1.json"), "w"))
        return cfg
    cfg = config(grid_extend=2)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--phase", "grid", "--jobs", "2")
    assert rc == 0, out + err
    assert len(started(out)) == 8 + 4 + 4, len(started(out))
    s = json.load(open(os.path.join(where, "results", "alpha", "c1", "summary.json")))
    assert [g["lr"] for g in s["grid"]] == [0.001, 0.002, 0.004, 0.008], s["grid"]
    assert s["best"] == {"baseline": 0.002, "hybrid": 0.002}, s["best"]
    assert "edge of the grid" not in open(os.path.join(where, "results", "alpha", "c1", "report.md")).read()
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--dry-run")
    assert rc == 0 and "alpha/c1 grid: 16 of 16" in out and "alpha/c1 compare: 0 of 9" in out, out
    # grown once only: the best stays at the grid's end, and the report says so
    cfg = config(grid_extend=1)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--report-only")
    assert rc == 0, err
    s = json.load(open(os.path.join(where, "results", "alpha", "c1", "summary.json")))
    assert [g["lr"] for g in s["grid"]] == [0.002, 0.004, 0.008] and s["best"]["baseline"] == 0.002, s
    assert "edge of the grid" in open(os.path.join(where, "results", "alpha", "c1", "report.md")).read()
    # without grid_extend the grid is the cell's
    cfg = config()
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--report-only")
    s = json.load(open(os.path.join(where, "results", "alpha", "c1", "summary.json")))
    assert rc == 0 and [g["lr"] for g in s["grid"]] == [0.004, 0.008], s["grid"]
    cfg = config(grid_extend=-1)
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 1 and "'grid_extend' must be an integer" in err, err


@test
def a_seed_without_a_step_ratio_is_counted_and_said():
    # seed 4's longer baseline ends higher than its 1,000-step one (an unstable end): no step ratio exists for it,
    # and the report and the overview say over how many of the seeds the steps saved were computed
    where = os.path.join(TMP, "noslope")
    cfg = make_config(where)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--jobs", "2",
                         env={"FAKE_VAL_BUMP": "baseline_long/seed4"})
    assert rc == 0, out + err
    s = json.load(open(os.path.join(where, "results", "alpha", "c1", "summary.json")))
    assert sorted(s["compare"]["ratios"]) == ["3", "5"] and s["compare"]["saved"]["n"] == 2, s["compare"]
    assert s["compare"]["paired"]["n"] == 3
    assert "(2 of 3 seeds)" in out, out
    report = open(os.path.join(where, "results", "alpha", "c1", "report.md")).read()
    assert "over 2 of 3 (on the others" in report and "no slope" in report, report


VARIANTS = {"contiguous": {"args": {"--rows": "contiguous", "--ema": 0.999}},
            "rows": {"args": {"--rows": "random", "--ema": 0.999}},
            "lr_only": {"of": "contiguous", "beta2": 0.95},
            "ema": {"of": "rows", "score": "ema"}}


def variants_config(name, **over):
    """The baseline variants on make_config's cell c1: two arms that run (llm.c's contiguous rows, rows drawn
    apart), LR-only (the contiguous arm's beta2 0.95 slice) and EMA (the rows arm's runs scored by val_loss_ema),
    each against the one before it."""
    where = os.path.join(TMP, name)
    cfg = dict(arms=VARIANTS, variants=["lr_only", "contiguous", "rows", "ema"], beta2_grid=[0.95, 0.99], grid_extend=1,
               hybrid_args=None)
    cfg.update(over)
    return where, make_config(where, **cfg)


@test
def arms_that_do_not_fit_are_refused():
    for over, why in (({"arms": dict(VARIANTS, ema={"of": "lr_only", "score": "ema"})}, "\"of\" must name an arm with \"args\""),
                      ({"arms": dict(VARIANTS, ema={"of": "rows", "score": "median"})}, "\"score\" must be one of"),
                      ({"arms": dict(VARIANTS, lr_only={"of": "contiguous", "beta2": 0.9})}, "must hold it"),
                      ({"arms": dict(VARIANTS, x={"of": "rows"})}, "needs \"score\" or \"beta2\""),
                      ({"hybrid_args": {"--hybrid": 1}}, "'hybrid_args' and 'arms' both given"),
                      ({"variants": ["lr_only", "nope"]}, "'variants' must list"),
                      ({"controls": {"q0": {"of": "baseline", "args": {"-q": 0}}}}, "with arms baseline and hybrid")):
        where, cfg = variants_config("arms_bad", **over)
        rc, out, err = suite("--config", cfg, "--dry-run")
        assert rc == 1 and why in err, (over, err)


@test
def a_failed_run_fails_the_call_and_the_rest_finish():
    where = os.path.join(TMP, "fail")
    cfg = make_config(where)
    rc, out, err = suite("--config", cfg, "--cell", "c2", "--corpus", "alpha", "--phase", "grid",
                         env={"FAKE_TRAINER_FAIL": "hybrid_lr0.001/seed1"})
    assert rc == 1 and "1 run(s) failed" in err, (rc, err)
    dones = glob.glob(os.path.join(where, "results", "alpha", "c2", "grid", "*", "seed*", "DONE"))
    assert len(dones) == 11, len(dones)
    rc, out, err = suite("--config", cfg, "--cell", "c2", "--corpus", "alpha", "--phase", "grid")
    assert rc == 0 and len(started(out)) == 1, out


@test
def comparison_seeds_must_be_fresh():
    cfg = make_config(os.path.join(TMP, "seeds"), compare_seeds=[2, 3, 4])
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 1 and "seeds [2]" in err and "fresh" in err, err
    cfg = make_config(os.path.join(TMP, "seeds2"), grid_seeds=[1, 1])
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 1 and "distinct" in err, err


def fake_summary(path, corpus, cell, saved, n_saved, p_saved, diff, p_diff, grid):
    """A cell's summary.json as the suite writes it, with only the fields --verdict reads."""
    os.makedirs(path, exist_ok=True)
    s = {"corpus": corpus, "cell": cell, "best": {"baseline": 0.002, "hybrid": 0.002},
         "grid": [{"lr": lr, "paired": {"mean": m, "p": p, "n": 3}} for lr, m, p in grid],
         "compare": {"paired": {"mean": diff, "p": p_diff, "n": 5},
                     "saved": {"mean": saved, "p": p_saved, "n": n_saved, "ci95": 0.01}}}
    with open(os.path.join(path, "summary.json"), "w") as f:
        json.dump(s, f)


@test
def the_verdict_counts_cells_corpora_and_worse_grid_points():
    a, b = os.path.join(TMP, "verdict", "cpu"), os.path.join(TMP, "verdict", "gpu")
    ok = [(0.001, -0.02, 0.01), (0.002, 0.001, 0.5)]
    fake_summary(os.path.join(a, "alpha", "c1"), "alpha", "c1", 0.05, 5, 0.01, -0.02, 0.001, ok)
    fake_summary(os.path.join(b, "beta", "c1"), "beta", "c1", 0.04, 5, 0.02, -0.01, 0.01, ok)
    fake_summary(os.path.join(b, "beta", "c2"), "beta", "c2", 0.01, 5, 0.9, 0.0, 0.9, ok)
    fake_summary(os.path.join(b, "default", "c1"), "default", "c1", -0.5, 5, 1.0, 0.3, 0.001,
                 [(0.001, 0.5, 0.001)])  # the development corpus: never counted
    rc, out, err = suite("--verdict", a, b)
    assert rc == 0, err
    assert "median cell: +4.0% over 3 cells" in out and "with p < 0.05: 2 (" in out and "in 2 corpora" in out, out
    assert "(p < 0.05): 0 of 6" in out and "the goal (median ≥ 3%, two corpora, never worse): met" in out, out
    assert "an end of its grid (not a bracketed optimum; grid_extend grows such a grid): 3 (cpu/alpha/c1, " in out, out  # best 2e-3 of 1e-3, 2e-3
    # one grid point worse, and a cell that clears 3% on only some seeds: not counted, and the goal is not met
    fake_summary(os.path.join(b, "beta", "c2"), "beta", "c2", 0.01, 5, 0.9, 0.0, 0.9, ok[:1] + [(0.002, 0.03, 0.02)])
    fake_summary(os.path.join(a, "alpha", "c1"), "alpha", "c1", 0.3, 3, 0.001, -0.02, 0.001, ok)
    rc, out, err = suite("--verdict", a, b)
    assert rc == 0, err
    assert "(p < 0.05): 1 of 6 (gpu/beta/c2 at 0.002)" in out and "not counted, a ratio on only some seeds: cpu/alpha/c1" in out, out
    assert "in 1 corpora" in out and "median cell: +2.5% over 2 cells" in out and "never worse): not met" in out, out
    rc, out, err = suite("--verdict", os.path.join(TMP, "verdict", "nothing"))
    assert rc == 1 and "not a folder" in err, err


if __name__ == "__main__":
    run_tests(TESTS, TMP)
