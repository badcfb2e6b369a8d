#!/usr/bin/python3
"""
test/test_suite_variants.py — scripts/suite's longer suites with test/fake_trainer.py standing in for the
trainer (`make check`; test/test_suite.py, in `make test`, holds the runner's core and shares its helpers):
runs without their metrics are read from the trainer's summary; controls run at their arm's best LR on the
comparison seeds; a beta2_grid makes the grid LR x beta2 (every run --beta2, the best a point, the beta2 axis
grown at an end: 1 - beta2 doubled below, halved above); named arms share the grid and seeds, an arm read from
another's runs (scored by val_loss_ema, or held to a beta2 slice) gets its own best point and shares the
other's comparison runs where the points agree; the variants table pairs each arm with the one before it,
recomputed here from the runs' metrics; a cell in epochs runs as many passes over each corpus; methods (arms
with "against", one scored by GPA's kept weights) meet their baselines cell by cell and over cells (--methods,
--plot).
Prints 'N passed, N failed'; exits 1 if any failed.
"""
import glob
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import TESTS, run_tests, test  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import comparelib as cl  # noqa: E402
# the helpers and the temporary folder of test/test_suite.py; its own tests are registered too, not run here
from test_suite import ROOT, TMP, make_config, run_shard, started, suite, variants_config  # noqa: E402


def compare_finals(res):
    """finals(folder, field): per comparison seed (3, 4, 5) of a cell's results folder, (seed, (last step, the
    field's last value)) of compare/<folder>, read from the runs' metrics: the statistics recomputed here"""
    def finals(folder, field="val_loss"):
        out = []
        for seed in (3, 4, 5):
            recs = [json.loads(ln) for ln in open(os.path.join(res, "compare", folder, f"seed{seed}", "metrics.jsonl"))]
            val = [r for r in recs if field in r]
            out.append((seed, (recs[-1]["step"], val[-1][field])))
        return out
    return finals


@test
def runs_without_their_metrics_are_read_from_the_trainers_summary():
    # a GPU machine's results may come back with each run's summary.json but not its metrics.jsonl
    cfg, out, cell = run_shard("nometrics", "c2", "beta")
    before = json.load(open(os.path.join(cell, "summary.json")))
    csv_before = open(os.path.join(cell, "runs.csv")).read()
    metrics = glob.glob(os.path.join(cell, "*", "*", "seed*", "metrics.jsonl"))
    assert len(metrics) == 12 + 9, len(metrics)
    for m in metrics:
        os.remove(m)
    rc, out, err = suite("--config", cfg, "--cell", "c2", "--corpus", "beta", "--report-only")
    assert rc == 0 and not started(out), out + err
    assert json.load(open(os.path.join(cell, "summary.json"))) == before
    assert open(os.path.join(cell, "runs.csv")).read() == csv_before
    # with neither file a finished run is an error naming it, not a crash
    os.remove(os.path.join(cell, "grid", "hybrid_lr0.002", "seed1", "summary.json"))
    rc, out, err = suite("--config", cfg, "--cell", "c2", "--corpus", "beta", "--report-only")
    assert rc == 1 and "hybrid_lr0.002/seed1/metrics.jsonl: cannot read" in err and "Traceback" not in err, err


@test
def controls_run_at_their_arms_best_lr_on_the_comparison_seeds():
    controls = {"q0": {"of": "baseline", "args": {"-q": 0}},
                "ema": {"of": "hybrid", "args": {"--lookahead": 0.3, "--noise-gate": 0}}}
    cfg, out, res = run_shard("controls", "c1", "alpha", controls=controls, args={"-v": 5, "-q": 0.1})
    assert len(started(out)) == 12 + 9 + 2 * 3, len(started(out))  # grid, compare, 2 controls x 3 seeds
    cmd = open(os.path.join(res, "controls", "q0", "seed5", "cmd.txt")).read().split()
    assert cmd[cmd.index("-q") + 1] == "0" and cmd.count("-q") == 1 and "--hybrid" not in cmd, cmd
    assert cmd[cmd.index("-l") + 1] == "0.002" and cmd[cmd.index("--seed") + 1] == "5", cmd
    cmd = open(os.path.join(res, "controls", "ema", "seed3", "cmd.txt")).read().split()
    assert "--hybrid" in cmd and cmd[cmd.index("--lookahead") + 1] == "0.3", cmd
    s = json.load(open(os.path.join(res, "summary.json")))
    assert sorted(s["controls"]) == ["ema", "q0"] and s["controls"]["q0"]["vs_baseline"]["seeds"] == [3, 4, 5]
    assert "## Controls" in open(os.path.join(res, "report.md")).read()
    assert sum(1 for r in open(os.path.join(res, "runs.csv")) if r.startswith("controls,")) == 6
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha")
    assert rc == 0 and not started(out), out
    # a control may not set what the suite sets per run
    bad = make_config(os.path.join(TMP, "controls_bad"), controls={"x": {"of": "baseline", "args": {"-l": 0.1}}})
    rc, out, err = suite("--config", bad, "--dry-run")
    assert rc == 1 and "control 'x': flag -l is set by the suite" in err, err


def beta2_config(name, beta2_grid, grid_extend, **over):
    """make_config's suite with a beta2 grid on cell c1 (LRs 1e-3, 2e-3, 4e-3; the fake trainer's best beta2 is
    0.99, its best LR 2e-3)."""
    where = os.path.join(TMP, name)
    cfg = make_config(where, beta2_grid=beta2_grid, grid_extend=grid_extend, **over)
    return where, cfg


def cmd_of(path):
    cmd = open(os.path.join(path, "cmd.txt")).read().split()
    return {k: cmd[cmd.index(k) + 1] for k in ("-l", "--beta2", "--seed", "-x", "--rows", "--ema") if k in cmd}, cmd


@test
def beta2_is_tuned_with_the_lr_and_its_grid_grows_at_an_end():
    # beta2 0.95, 0.99: the fake trainer's best is 0.99, the top end, so the grid grows by one past it, 0.995
    # (1 - beta2 halved), which is worse: the best point is (2e-3, 0.99), bracketed on both axes
    where, cfg = beta2_config("beta2", [0.95, 0.99], 1)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--dry-run")
    cmds = [ln for ln in out.split("\n") if ln.startswith("  ")]
    assert rc == 0 and len(cmds) == 2 * 2 * 3 * 2, (len(cmds), out + err)  # seeds x arms x LRs x beta2s
    assert all(c.count("--beta2") == 1 for c in cmds) and any("--beta2 0.99 -l 0.004" in c for c in cmds), cmds
    assert "alpha/c1: 33 runs at most as the grid stands: grid 24 (3 LRs x 2 β2 x 2 arms x 2 seeds; each LR the " \
        "grid grows by adds 8, each β2 12 (a grid of two β2s grows once at least: its best is an end)), comparison 9 " \
        "at most" in out, out
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--jobs", "2")
    assert rc == 0, out + err
    assert len(started(out)) == 24 + 12 + 9, len(started(out))  # the grid, one beta2 grown, the comparison
    res = os.path.join(where, "results", "alpha", "c1")
    s = json.load(open(os.path.join(res, "summary.json")))
    assert s["beta2_grid"] == [0.95, 0.99, 0.995], s["beta2_grid"]
    assert s["best"] == {"baseline": 0.002, "hybrid": 0.002} and s["best_beta2"] == {"baseline": 0.99, "hybrid": 0.99}, s
    assert [(g["lr"], g["beta2"]) for g in s["grid"][:3]] == [(0.001, 0.95), (0.001, 0.99), (0.001, 0.995)], s["grid"]
    got, _ = cmd_of(os.path.join(res, "compare", "baseline_long", "seed4"))
    assert got == {"-l": "0.002", "--beta2": "0.99", "--seed": "4", "-x": "12"}, got
    report = open(os.path.join(res, "report.md")).read()
    assert "## LR × β2 grid" in report and "| peak LR | β2 |" in report and "| 0.002 | 0.99 | " in report, report
    assert "Baseline at 0.002, β2 0.99, hybrid mode at 0.002, β2 0.99" in report and "edge" not in report, report
    assert "| alpha | c1 | 0.002 (β2 0.99) / 0.002 (β2 0.99) |" in out, out  # the overview
    rows = open(os.path.join(res, "runs.csv")).read().strip().split("\n")
    assert rows[0].startswith("phase,arm,kind,lr,beta2,seed,") and len(rows) == 1 + 45, rows[:2]
    # below: 0.995 and 0.999 have their best at the low end; grid_extend 2 grows it to 0.99 (1 - beta2 doubled),
    # the best again at the end, then to 0.98, worse: 0.99 is bracketed
    where, cfg = beta2_config("beta2_low", [0.995, 0.999], 2)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta", "--phase", "grid", "--jobs", "2")
    assert rc == 0 and len(started(out)) == 24 + 12 + 12, (len(started(out)), out + err)
    s = json.load(open(os.path.join(where, "results", "beta", "c1", "summary.json")))
    assert s["beta2_grid"] == [0.98, 0.99, 0.995, 0.999] and s["best_beta2"]["baseline"] == 0.99, s
    # grown once only: the best (0.99) is the grid's end, and the report says so
    where, cfg = beta2_config("beta2_low", [0.995, 0.999], 1)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta", "--report-only")
    s = json.load(open(os.path.join(where, "results", "beta", "c1", "summary.json")))
    assert rc == 0 and s["beta2_grid"] == [0.99, 0.995, 0.999], (s, err)
    assert "best β2 is at the edge of the β2 grid" in open(os.path.join(where, "results", "beta", "c1", "report.md")).read()
    # a cell's own beta2_grid takes the suite's place; a grid out of order, or --beta2 beside it, is refused
    c1 = json.load(open(os.path.join(where, "c1.json")))
    json.dump(dict(c1, beta2_grid=[0.9, 0.95]), open(os.path.join(where, "c1.json"), "w"))
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta", "--dry-run")
    assert rc == 0 and "--beta2 0.9 -l 0.001" in out and "--beta2 0.999" not in out, out
    for over, why in (({"beta2_grid": [0.99, 0.95]}, "'beta2_grid' must be two or more increasing"),
                      ({"args": {"-v": 5, "--beta2": 0.9}}, "flag --beta2 is set per run by 'beta2_grid'")):
        where, cfg = beta2_config("beta2_bad", [0.95, 0.99], 0)
        bad = make_config(where, **dict({"beta2_grid": [0.95, 0.99]}, **over))
        rc, out, err = suite("--config", bad, "--dry-run")
        assert rc == 1 and why in err, (over, err)


@test
def named_arms_share_the_grid_and_derived_arms_read_their_runs():
    where, cfg = variants_config("arms")
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta", "--jobs", "2")
    assert rc == 0, out + err
    # grid: 2 arms that run x 3 LRs x 3 beta2 (0.995 grown) x 2 seeds; no baseline or hybrid runs
    res = os.path.join(where, "results", "beta", "c1")
    assert sorted({d.split("_lr")[0] for d in os.listdir(os.path.join(res, "grid"))}) == ["contiguous", "rows"]
    # compare: lr_only at its own point (beta2 0.95) runs both lengths; contiguous and rows both lengths; ema is
    # best where rows is, so it reads rows' folders and runs nothing: 6 folders x 3 seeds
    assert len(started(out)) == 36 + 18, len(started(out))
    assert sorted(os.listdir(os.path.join(res, "compare"))) == ["contiguous", "contiguous_long", "lr_only",
                                                               "lr_only_long", "rows", "rows_long"]
    s = json.load(open(os.path.join(res, "summary.json")))
    assert s["best"] == {"contiguous": 0.002, "rows": 0.002, "lr_only": 0.002, "ema": 0.002}, s["best"]
    assert s["best_beta2"] == {"contiguous": 0.99, "rows": 0.99, "lr_only": 0.95, "ema": 0.99}, s["best_beta2"]
    got, cmd = cmd_of(os.path.join(res, "compare", "lr_only_long", "seed5"))
    assert got == {"-l": "0.002", "--beta2": "0.95", "--seed": "5", "-x": "12", "--rows": "contiguous", "--ema": "0.999"}, got
    got, cmd = cmd_of(os.path.join(res, "compare", "rows", "seed3"))
    assert got["--rows"] == "random" and got["--beta2"] == "0.99" and "--hybrid" not in cmd, cmd
    # the grid table: each arm's column, lr_only only on its slice, ema by its score
    report = open(os.path.join(res, "report.md")).read()
    assert "| peak LR | β2 | contiguous | rows | lr_only | ema (ema) | seeds |" in report, report
    line = next(ln for ln in report.split("\n") if ln.startswith("| 0.002 | 0.99 |"))
    assert line.count("(best)") == 3 and line.split("|")[5].strip() == "—", line
    # again: nothing to run
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta")
    assert rc == 0 and not started(out) and "beta/c1 compare: 18 of 18 runs finished" in out, out
    # an EMA whose best is another LR (the fake's EMA tilted towards low LRs) runs its own comparison runs there,
    # one length only (no arm is compared against it)
    where, cfg = variants_config("arms_tilt")
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--jobs", "2", env={"FAKE_EMA_TILT": "-1"})
    assert rc == 0, out + err
    res = os.path.join(where, "results", "alpha", "c1")
    s = json.load(open(os.path.join(res, "summary.json")))
    assert s["best"]["ema"] == 0.001 and s["best"]["rows"] == 0.002, s["best"]
    assert "ema" in os.listdir(os.path.join(res, "compare")) and "ema_long" not in os.listdir(os.path.join(res, "compare"))
    got, _ = cmd_of(os.path.join(res, "compare", "ema", "seed4"))
    assert got["-l"] == "0.001" and got["--rows"] == "random" and got["--ema"] == "0.999", got


@test
def with_grid_grow_own_each_arm_grows_its_own_grid():
    # the fake's EMA tilted towards high LRs: the ema arm's best is the grid's top LR, 4e-3, so the rows arm (whose
    # runs it reads) grows past it (8e-3, worse: 4e-3 is bracketed), and, as every arm's best beta2 is the top end,
    # past 0.99 too; the contiguous arm grows its beta2 only. With "every arm" (the default) both would grow both
    # axes: 48 grid runs, not 42
    where, cfg = variants_config("own", grid_grow="own")
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--dry-run")
    assert rc == 0 and "each LR an arm's grid grows by adds 4, each β2 6" in out, out + err
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--phase", "grid", "--jobs", "2",
                         env={"FAKE_EMA_TILT": "2"})
    assert rc == 0 and len(started(out)) == 24 + 12 + 6, (len(started(out)), out + err)
    res = os.path.join(where, "results", "alpha", "c1")
    grid = os.listdir(os.path.join(res, "grid"))
    assert "rows_lr0.008_b20.995" in grid and "contiguous_lr0.002_b20.995" in grid, grid
    assert not [g for g in grid if g.startswith("contiguous_lr0.008")], grid
    s = json.load(open(os.path.join(res, "summary.json")))
    assert s["best"]["ema"] == 0.004 and s["best"]["rows"] == 0.002 and s["best"]["contiguous"] == 0.002, s["best"]
    assert s["beta2_grid"] == [0.95, 0.99, 0.995], s
    report = open(os.path.join(res, "report.md")).read()
    row = [ln for ln in report.split("\n") if ln.startswith("| 0.008 | 0.99 |")]
    assert len(row) == 1 and row[0].split("|")[3].strip() == "—" and row[0].split("|")[4].strip() != "—", row  # contiguous, rows
    assert row[0].split("|")[-2].strip() == "2", row  # the seeds of the arms that ran there, not of the one that did not
    assert "edge" not in report, report
    # a value it does not know is refused
    where, cfg = variants_config("own_bad", grid_grow="each")
    rc, out, err = suite("--config", cfg, "--dry-run")
    assert rc == 1 and "'grid_grow' must be" in err, err


@test
def the_variants_table_pairs_each_arm_with_the_one_before_it():
    where, cfg = variants_config("table")
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--jobs", "2")
    assert rc == 0, out + err
    res = os.path.join(where, "results", "alpha", "c1")
    s = json.load(open(os.path.join(res, "summary.json")))
    v = {r["arm"]: r for r in s["variants"]}
    assert [r["arm"] for r in s["variants"]] == ["lr_only", "contiguous", "rows", "ema"] and "against" not in v["lr_only"]
    assert [v[a]["against"] for a in ("contiguous", "rows", "ema")] == ["lr_only", "contiguous", "rows"], v

    finals = compare_finals(res)
    # recomputed from the runs' metrics: ema is rows' folders read by val_loss_ema, against rows' two lengths
    for arm, folder, field, prev, pfolder in (("contiguous", "contiguous", "val_loss", "lr_only", "lr_only"),
                                              ("rows", "rows", "val_loss", "contiguous", "contiguous"),
                                              ("ema", "rows", "val_loss_ema", "rows", "rows")):
        o, r, rl = finals(folder, field), finals(pfolder), finals(pfolder + "_long")
        pt = cl.paired_t([(a, b[1]) for a, b in o], [(a, b[1]) for a, b in r])
        ratios = cl.step_ratios([(a, [b, c]) for (a, b), (_, c) in zip(r, rl)], o)
        sv = cl.one_sample_t([(a, x["saved"]) for a, x in ratios.items()], 0.0)
        same = lambda a, b: a == b or (a is not None and b is not None and abs(a - b) < 1e-9)  # noqa: E731
        assert same(v[arm]["paired"]["mean"], pt["mean"]) and same(v[arm]["paired"]["p"], pt["p"]), (arm, v[arm], pt)
        assert same(v[arm]["saved"]["mean"], sv["mean"]) and same(v[arm]["saved"]["p"], sv["p"]), (arm, v[arm]["saved"], sv)
        assert v[arm]["saved"]["n"] == 3, v[arm]["saved"]
        assert abs(v[arm]["mean"] - sum(b[1] for _, b in o) / 3) < 1e-12, arm
    # the fake: beta2 0.99 is 0.108 lower than 0.95, rows apart 0.03-0.038 lower, the EMA 0.023-0.026 lower
    assert abs(v["contiguous"]["paired"]["mean"] + 0.02 * math.log2(5) ** 2) < 1e-9, v["contiguous"]["paired"]
    assert v["rows"]["paired"]["wins"] == 3 and v["ema"]["paired"]["wins"] == 3 and v["ema"]["saved"]["mean"] > 0, v
    report = open(os.path.join(res, "report.md")).read()
    assert "## Each arm against the one before it" in report and "| ema | rows, scored by ema | 0.002 | 0.99 |" in report, report
    assert "## Each arm against the one before it" in out and "| alpha | c1 | ema | 0.002, β2 0.99 |" in out, out
    assert "## Overview" not in out  # no baseline and hybrid arms: no hybrid-against-baseline table


def write_shard(path, ntok):
    """an llm.c token shard of ntok tokens (the header is what the suite reads)"""
    header = [20240520, 1, ntok] + [0] * 253
    with open(path, "wb") as f:
        f.write(b"".join(x.to_bytes(4, "little", signed=True) for x in header) + bytes(2 * ntok))


@test
def a_cell_in_epochs_runs_as_many_passes_over_each_corpus():
    # alpha has 3,200 train tokens, beta 960 (two shards): at 32 tokens per step (4 x 8), 2 epochs are 200 and 60
    # steps, and the long baseline 115% of each; -x with epochs, or epochs without -b and -t, is refused
    where = os.path.join(TMP, "epochs")
    cfg = make_config(where)
    write_shard(os.path.join(where, "data", "alpha", "train_000000.bin"), 3200)
    write_shard(os.path.join(where, "data", "beta", "train_000000.bin"), 640)
    write_shard(os.path.join(where, "data", "beta", "train_000001.bin"), 320)
    with open(os.path.join(where, "c1.json"), "w") as f:
        json.dump({"name": "c1", "epochs": 2, "args": {"-b": 4, "-t": 8}, "lr_grid": [0.001, 0.002, 0.004]}, f)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--dry-run")
    assert rc == 0, out + err
    cmds = [ln for ln in out.split("\n") if ln.startswith("  ")]
    alpha = [c for c in cmds if "/alpha/" in c]
    beta = [c for c in cmds if "/beta/" in c]
    assert alpha and beta and all(" -x 200 " in c for c in alpha) and all(" -x 60 " in c for c in beta), cmds
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "beta", "--jobs", "2")
    assert rc == 0, out + err
    report = open(os.path.join(where, "results", "beta", "c1", "report.md")).read()
    assert "the baseline also at 69 steps" in report, report
    for bad, why in (({"-b": 4, "-t": 8, "-x": 10}, "takes the place of -x"), ({"-b": 4}, "needs -b and -t")):
        with open(os.path.join(where, "c1.json"), "w") as f:
            json.dump({"name": "c1", "epochs": 2, "args": bad, "lr_grid": [0.001, 0.002]}, f)
        rc, out, err = suite("--config", cfg, "--cell", "c1", "--dry-run")
        assert rc != 0 and why in err, (bad, out, err)


METHODS = {"rows": {"args": {"--rows": "random", "--ema": 0.999}},
           "rows_ema": {"of": "rows", "score": "ema"},
           "gpa": {"args": {"--rows": "random", "--hybrid": "gpa"}, "score": "gpa", "against": "rows_ema"},
           "linefit": {"args": {"--rows": "random", "--hybrid": "linefit"}, "against": "rows"}}


@test
def with_long_runs_references_only_the_baselines_run_at_two_lengths():
    # gpa meets rows_ema, which reads rows' runs at the same best point: rows runs at 115% of the steps for it,
    # gpa (no one's baseline) at 100% only, and the steps saved are those computed from these runs
    where = os.path.join(TMP, "methods_refs")
    arms = {k: v for k, v in METHODS.items() if k != "linefit"}
    cfg = make_config(where, arms=arms, beta2_grid=None, grid_extend=0, hybrid_args=None, long_runs="references")
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--jobs", "2")
    assert rc == 0, out + err
    res = os.path.join(where, "results", "alpha", "c1")
    assert sorted(os.listdir(os.path.join(res, "compare"))) == ["gpa", "rows", "rows_long"], os.listdir(os.path.join(res, "compare"))
    m = {r["arm"]: r for r in json.load(open(os.path.join(res, "summary.json")))["methods"]}
    finals = compare_finals(res)
    o, r, rl = finals("gpa", "val_loss_gpa"), finals("rows", "val_loss_ema"), finals("rows_long", "val_loss_ema")
    ratios = cl.step_ratios([(a, [b, c]) for (a, b), (_, c) in zip(r, rl)], o)
    sv = cl.one_sample_t([(a, x["saved"]) for a, x in ratios.items()], 0.0)
    assert m["gpa"]["against"] == "rows_ema" and abs(m["gpa"]["saved"]["mean"] - sv["mean"]) < 1e-9, m
    # any other value is refused with one line naming the config
    bad = make_config(os.path.join(TMP, "methods_refs_bad"), arms=arms, beta2_grid=None, hybrid_args=None,
                      long_runs="methods")
    rc, out, err = suite("--config", bad, "--dry-run")
    assert rc == 1 and "'long_runs' must be" in err and len(err.strip().splitlines()) == 1, (rc, err)


@test
def with_grid_grow_own_a_baseline_covers_the_grid_of_the_methods_meeting_it():
    # GPA's kept weights tilted towards high LRs: its best is the grid's top (4e-3), so gpa's grid grows to 8e-3
    # (worse: bracketed); rows, the runs of the baseline gpa meets (rows_ema), runs there too, though its own best
    # sits inside its grid; linefit, which meets rows but is no one's baseline, does not
    where = os.path.join(TMP, "methods_own")
    cfg = make_config(where, arms=METHODS, beta2_grid=None, grid_extend=1, hybrid_args=None, grid_grow="own")
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--phase", "grid", "--jobs", "2",
                         env={"FAKE_GPA_TILT": "2"})
    assert rc == 0, out + err
    grid = os.listdir(os.path.join(where, "results", "alpha", "c1", "grid"))
    assert "gpa_lr0.008" in grid and "rows_lr0.008" in grid and "linefit_lr0.008" not in grid, sorted(grid)
    assert len(started(out)) == 3 * 3 * 2 + 2 * 2, (len(started(out)), sorted(grid))


def readme_written(where, cfg, before, inside, after=""):
    """(exit status, the file's text after, or stderr on failure): a README.md in where with the verdict's marker
    lines around inside, rewritten by --methods over where's results with --readme"""
    readme = os.path.join(where, "README.md")
    with open(readme, "w") as f:
        f.write(before + "<!-- the methods' verdict: written by scripts/suite --methods ... --readme README.md -->\n"
                + inside + "<!-- end of the methods' verdict -->\n" + after)
    rc, out, err = suite("--config", cfg, "--methods", os.path.join(where, "results"), "--readme", readme)
    return rc, open(readme).read() if rc == 0 else err


@test
def a_method_with_several_baselines_meets_the_strongest():
    # gpa against [rows_c, rows_ema]: rows_c (llm.c's layout, no average) ends higher than rows_ema on every seed
    # (the fake: rows apart 0.03 lower, the EMA 0.02 lower), so gpa meets rows_ema; README's table says so
    where = os.path.join(TMP, "methods_two")
    arms = dict(METHODS, rows_c={"args": {"--rows": "contiguous"}},
                gpa=dict(METHODS["gpa"], against=["rows_c", "rows_ema"]))
    cfg = make_config(where, arms=arms, beta2_grid=None, grid_extend=0, hybrid_args=None)
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--jobs", "2")
    assert rc == 0, out + err
    s = json.load(open(os.path.join(where, "results", "alpha", "c1", "summary.json")))
    m = {r["arm"]: r for r in s["methods"]}
    assert m["gpa"]["against"] == "rows_ema" and m["gpa"]["candidates"] == ["rows_c", "rows_ema"], m["gpa"]
    assert m["linefit"]["against"] == "rows" and m["linefit"]["candidates"] == ["rows"], m["linefit"]
    report = open(os.path.join(where, "results", "alpha", "c1", "report.md")).read()
    assert "meets the strongest" in report and any(ln.startswith("| gpa |") and "| rows_ema |" in ln for ln in report.split("\n")), report
    rc, text = readme_written(where, cfg, "", "")
    assert rc == 0, text
    row = [ln for ln in text.split("\n") if ln.startswith("| `gpa`")]
    assert len(row) == 1 and "| `rows_c` or `rows_ema` |" in row[0] and "(rows_ema)" in row[0], row
    bad = make_config(os.path.join(TMP, "methods_two_bad"), arms=dict(arms, gpa=dict(arms["gpa"], against=["rows", "gpa"])),
                      hybrid_args=None)
    rc, out, err = suite("--config", bad, "--dry-run")
    assert rc == 1 and "\"against\" must name another arm" in err, err


@test
def a_method_that_met_a_weaker_baseline_has_not_met_the_goal():
    # gpa meets rows_c alone (llm.c's layout: the fake ends it 0.03 above rows apart) and saves steps against it on
    # both corpora, while linefit meets rows, scored alike (the raw weights) and stronger: gpa met a weaker baseline
    # than the trainer makes, so its goal is not met, and the table and README say why
    where = os.path.join(TMP, "methods_weaker")
    arms = dict(METHODS, rows_c={"args": {"--rows": "contiguous"}}, gpa=dict(METHODS["gpa"], against="rows_c"))
    cfg = make_config(where, arms=arms, beta2_grid=None, grid_extend=0, hybrid_args=None)
    for corpus in ("alpha", "beta"):
        rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", corpus, "--jobs", "2")
        assert rc == 0, out + err
    rc, out, err = suite("--config", cfg, "--methods", os.path.join(where, "results"))
    assert rc == 0, err
    row = [ln for ln in out.split("\n") if ln.startswith("| gpa | 2 |")]
    assert len(row) == 1 and "| alpha, beta |" in row[0] and row[0].endswith("| 2 | not met (a weaker baseline) |"), (row, out)
    assert "- gpa on alpha c1 met rows_c, which ended 0.0" in out and "above rows (scored alike)" in out, out
    line = [ln for ln in out.split("\n") if ln.startswith("| linefit | 2 |")]
    assert len(line) == 1 and line[0].endswith("| 0 | not met |"), line
    # and the margin against the cell's lowest baseline of any kind, as means: gpa's against rows, linefit's none
    note = [ln for ln in out.split("\n") if ln.startswith("- gpa on alpha c1: ")]
    assert len(note) == 1 and "against rows (" in note[0] and "the cell's lowest baseline of any kind" in note[0], out
    assert "- linefit on alpha c1: " not in out, out
    rc, text = readme_written(where, cfg, "", "")
    assert rc == 0, text
    row = [ln for ln in text.split("\n") if ln.startswith("| `gpa`")]
    assert len(row) == 1 and row[0].endswith("| not met (a weaker baseline) |"), row


@test
def methods_meet_their_baselines_cell_by_cell_and_over_cells():
    where = os.path.join(TMP, "methods")
    cfg = make_config(where, arms=METHODS, beta2_grid=None, grid_extend=0, hybrid_args=None)
    for corpus in ("alpha", "beta"):
        rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", corpus, "--jobs", "2")
        assert rc == 0, out + err
    res = os.path.join(where, "results", "alpha", "c1")
    s = json.load(open(os.path.join(res, "summary.json")))
    m = {r["arm"]: r for r in s["methods"]}
    assert sorted(m) == ["gpa", "linefit"] and m["gpa"]["against"] == "rows_ema" and m["linefit"]["against"] == "rows", m
    # the baseline a method meets runs at both lengths (rows_ema shares rows' folders: the same best point)
    assert sorted(os.listdir(os.path.join(res, "compare"))) == ["gpa", "gpa_long", "linefit", "linefit_long", "rows",
                                                               "rows_long"], os.listdir(os.path.join(res, "compare"))

    finals = compare_finals(res)
    # recomputed from the runs' metrics: gpa scored by val_loss_gpa against rows scored by val_loss_ema
    o, r, rl = finals("gpa", "val_loss_gpa"), finals("rows", "val_loss_ema"), finals("rows_long", "val_loss_ema")
    pt = cl.paired_t([(a, b[1]) for a, b in o], [(a, b[1]) for a, b in r])
    ratios = cl.step_ratios([(a, [b, c]) for (a, b), (_, c) in zip(r, rl)], o)
    sv = cl.one_sample_t([(a, x["saved"]) for a, x in ratios.items()], 0.0)
    assert abs(m["gpa"]["paired"]["mean"] - pt["mean"]) < 1e-9 and abs(m["gpa"]["saved"]["mean"] - sv["mean"]) < 1e-9, m
    # the fake: gpa's kept weights 0.05-0.052 lower, the EMA 0.02-0.026: gpa better on every seed; linefit 0.05 higher
    assert m["gpa"]["paired"]["wins"] == 3 and m["gpa"]["saved"]["mean"] > 0, m["gpa"]
    assert m["linefit"]["paired"]["mean"] > 0.04 and m["linefit"]["grid_worse"] == m["linefit"]["grid_compared"] == 3, m
    assert m["gpa"]["grid_worse"] == 0 and m["gpa"]["grid_compared"] == 3, m["gpa"]
    report = open(os.path.join(res, "report.md")).read()
    assert "## Each method against the baseline it meets" in report and "| linefit | 0.002 |" in report, report
    # and at every grid point: linefit's margin over rows, positive and significant at all three LRs, its best marked
    margins = report.split("## Each method against its baseline at every grid point")[1]
    table = [ln for ln in margins.split("linefit − rows (")[1].split("\n\n")[1].split("\n") if ln]
    pts = sorted(m["linefit"]["grid"], key=lambda g: g["lr"])
    assert table[0] == "| peak LR | — |" and len(table) == 2 + len(pts) == 5, table
    for g, ln in zip(pts, table[2:]):
        assert ln.startswith(f"| {cl.fmt_num(g['lr'])} | **{g['paired']['mean']:+.4f} ± "), (ln, g)
    assert sum("(m" in ln for ln in table) == 1 and sum("b)" in ln for ln in table) == 1, table
    # over the run: at the method's best point and its baseline's, the method − the baseline at every val step,
    # recomputed here from the grid runs' metrics (grid seeds 1, 2), each arm by its own score
    def curve(kind, lr, field):
        out = {}
        for seed in (1, 2):
            recs = [json.loads(ln) for ln in open(os.path.join(res, "grid", f"{kind}_lr{lr:g}", f"seed{seed}", "metrics.jsonl"))]
            out[seed] = {r["step"]: r[field] for r in recs if field in r and r["step"] > 0}
        return out
    over = {(o["arm"], o["lr"]): o for o in s["over_run"]}
    for arm, field, ref, ref_field in (("gpa", "val_loss_gpa", "rows_ema", "val_loss_ema"), ("linefit", "val_loss", "rows", "val_loss")):
        lrs = {m[arm]["lr"], s["best"][ref]}
        assert {lr for a, lr in over if a == arm} == lrs, (arm, sorted(over))
        for lr in lrs:
            o, a, b = over[(arm, lr)], curve(arm, lr, field), curve("rows", lr, ref_field)
            assert o["against"] == ref and o["steps"] == [5, 10] and o["lookahead_applied"] is None, o
            for st, d in zip(o["steps"], o["paired"]):
                want = sum(a[sd][st] - b[sd][st] for sd in (1, 2)) / 2
                assert abs(d["mean"] - want) < 1e-9, (arm, lr, st, d["mean"], want)
    table = report.split("## Over the run")[1]
    assert "| method − baseline | point | step 5 | step 10 | look-ahead applied |" in table, table
    assert sum(ln.startswith("| gpa − rows_ema |") for ln in table.split("\n")) == len({m["gpa"]["lr"], s["best"]["rows_ema"]}), table
    # the look-ahead's share, where a method's summaries count its steps (as the look-ahead's do): 4 of 10 steps
    for seed in (1, 2):
        path = os.path.join(res, "grid", f"linefit_lr{m['linefit']['lr']:g}", f"seed{seed}", "summary.json")
        j = json.load(open(path))
        j["hybrid"] = {"lookahead_steps": 4, "lookahead_gated_steps": 6}
        json.dump(j, open(path, "w"))
    rc, out, err = suite("--config", cfg, "--cell", "c1", "--corpus", "alpha", "--report-only")
    assert rc == 0, err
    line = [ln for ln in open(os.path.join(res, "report.md")) if ln.startswith("| linefit − rows |") and "(m" in ln]
    assert len(line) == 1 and line[0].rstrip().endswith("| 40% of the steps |"), line
    # over cells: one row per method and cell, the goal per method; the plot
    png = os.path.join(where, "methods.png")
    rc, out, err = suite("--config", cfg, "--methods", os.path.join(where, "results"), "--plot", png)
    assert rc == 0, err
    assert "| gpa | rows_ema | alpha | c1 |" in out and "| linefit | rows | beta | c1 |" in out, out
    lines = [ln for ln in out.split("\n") if ln.startswith("| gpa | 2 |") or ln.startswith("| linefit | 2 |")]
    assert len(lines) == 2 and "not met" in lines[1] and "6 of" not in lines[1], lines
    # c2 has not run (2 of the config's 4 cells): gpa's goal could still change, linefit's worse grid points are final
    assert lines[0].endswith("| met so far (2 of 4 cells) |") and lines[1].endswith("| not met |"), lines
    alpha = os.path.join(where, "alpha_only")
    shutil.copytree(os.path.join(where, "results", "alpha"), os.path.join(alpha, "alpha"))
    rc, out, err = suite("--config", cfg, "--methods", alpha)
    assert rc == 0, err
    goals = {ln.split(" | ")[0][2:]: ln.split(" | ")[-1] for ln in out.split("\n") if ln.startswith(("| gpa | 1 |", "| linefit | 1 |"))}
    assert goals == {"gpa": "not met so far (1 of 4 cells) |", "linefit": "not met |"}, goals
    assert os.path.getsize(png) > 1000
    rc, out, err = suite("--plot", png)
    assert rc == 1 and "goes with --methods" in err, err
    # README's shape: one row per method, one column per corpus, written between the marker lines alone
    rc, text = readme_written(where, cfg, "# x\n", "old\n", "after\n")
    assert rc == 0, text
    assert text.startswith("# x\n<!--") and text.endswith("<!-- end of the methods' verdict -->\nafter\n") and "old" not in text, text
    rows = [ln for ln in text.split("\n") if ln.startswith("| `")]
    assert "| method (c1) | meets | alpha | beta | grid points worse | goal |" in text, text
    assert len(rows) == 2 and rows[0].startswith("| `gpa` | `rows_ema` | **+") and rows[1].startswith("| `linefit` | `rows` | **−"), rows
    assert rows[1].endswith("| 6 of 6 | not met |"), rows  # worse at all 3 grid points on both corpora
    readme = os.path.join(where, "README.md")
    with open(readme, "w") as f:
        f.write("no markers\n")
    rc, out, err = suite("--config", cfg, "--methods", os.path.join(where, "results"), "--readme", readme)
    assert rc == 1 and "expected one line" in err and open(readme).read() == "no markers\n", err
    bad = make_config(os.path.join(TMP, "methods_bad"), arms=dict(METHODS, gpa=dict(METHODS["gpa"], against="nope")),
                      hybrid_args=None)
    rc, out, err = suite("--config", bad, "--dry-run")
    assert rc == 1 and "\"against\" must name another arm" in err, err


if __name__ == "__main__":
    run_tests([t for t in TESTS if t.__module__ == __name__], TMP)
