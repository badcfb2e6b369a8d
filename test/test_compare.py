#!/usr/bin/python3
"""
test/test_compare.py — tests of scripts/compare_hybrid and scripts/compare_pytorch (run by `make test`).

- With test/fake_trainer.py standing in for the trainer: a study runs in parallel, resumes without
  re-running finished runs, re-runs a run whose command changed, reports failures, and rejects bad configs;
  compare_pytorch passes on equal losses and fails past --tol.
- rho (the value of a Predict step, from the matched-length baselines) is recomputed here from the
  metrics.jsonl files with a small implementation of its own, and checked on a case with a known answer;
  so is the schedule length that ends at the target (every run fully decayed, baseline and hybrid families).
- The report's and CSV's numbers are recomputed here from the metrics.jsonl files with code of its own
  (not comparelib's): final val loss, target, time to target, backward passes, tokens, train time,
  mean/std, Welch p-values (formula + scipy's t distribution).
- With the real ./train_gpt2: configs/smoke.json end to end (report, CSV, PNGs, numbers), and
  compare_pytorch on a tiny model for 20 steps with tol 1e-3 against scripts/train_gpt2.py.
  A test whose dependency is missing is SKIPPED, naming the missing piece.
Prints 'N passed, N failed, N skipped'; exits 1 if any failed.
"""
import csv
import glob
import json
import math
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
HYBRID = os.path.join(ROOT, "scripts", "compare_hybrid")
PYTORCH = os.path.join(ROOT, "scripts", "compare_pytorch")
FAKE = os.path.join(ROOT, "test", "fake_trainer.py")
TRAINER = os.path.join(ROOT, "train_gpt2")
TMP = tempfile.mkdtemp(prefix="test_compare_")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import Skip, TESTS, run_tests, test  # noqa: E402


def sh(cmd, env=None, timeout=600):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=e, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


# ----------------------------------------------------------------------------
# independent recomputation of a study's numbers from its metrics.jsonl files

def run_numbers(path, target):
    recs = [json.loads(line) for line in open(path) if line.strip()]
    vals = sorted((r["step"], r.get("train_time_s") or 0.0, r["val_loss"]) for r in recs if r.get("val_loss") is not None)
    last = max((r for r in recs if r["step"] >= 1), key=lambda r: r["step"])
    hit = next(((s, t) for s, t, v in vals if target is not None and v <= target), None)
    ttt = hit[1] if hit else None
    btt = None if hit is None else (0 if hit[0] == 0 else next(r["backward"] for r in recs if r["step"] == hit[0]))
    return {"final": vals[-1][2], "ttt": ttt, "btt": btt, "train_time": last["train_time_s"], "backward": last["backward"],
            "tokens": last["tokens"], "predict": sum(1 for r in recs if r.get("phase") == "predict"),
            "predict_s": sum(r["ms"] for r in recs if r.get("phase") == "predict") / 1000.0}


def welch(a, b):
    from scipy import stats
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return None
    t = (statistics.mean(a) - statistics.mean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return 2 * stats.t.sf(abs(t), df)


def recompute(results, fixed_target=None):
    """{arm: {...}} from <results>/runs/*/seed*/ (finished runs only: those with a DONE file)."""
    finals = {}
    for d in glob.glob(os.path.join(results, "runs", "*", "seed*")):
        if os.path.exists(os.path.join(d, "DONE")):
            arm = os.path.basename(os.path.dirname(d))
            finals.setdefault(arm, {})[d] = run_numbers(os.path.join(d, "metrics.jsonl"), None)["final"]
    base = {a: statistics.mean(v.values()) for a, v in finals.items() if a.startswith("baseline")}
    best = min(base, key=base.get)
    target = fixed_target if fixed_target is not None else max(finals[best].values())
    out = {}
    for arm, dirs in finals.items():
        rs = [run_numbers(os.path.join(d, "metrics.jsonl"), target) for d in sorted(dirs)]
        out[arm] = {"runs": rs, "n": len(rs), "best": arm == best}
    ref = out[best]["runs"]
    for arm, o in out.items():
        rs = o["runs"]
        for k in ("final", "train_time", "backward", "tokens", "predict", "predict_s"):
            xs = [r[k] for r in rs]
            o[k] = (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else None)
        t = [r["ttt"] for r in rs if r["ttt"] is not None]
        o["reached"] = len(t)
        o["ttt"] = (statistics.mean(t), statistics.stdev(t) if len(t) > 1 else None) if t else (None, None)
        bt = [r["btt"] for r in rs if r["btt"] is not None]
        o["btt"] = (statistics.mean(bt), statistics.stdev(bt) if len(bt) > 1 else None) if bt else (None, None)
        o["p_final"] = None if o["best"] else welch([r["final"] for r in rs], [r["final"] for r in ref])
        o["p_ttt"] = None if o["best"] else welch(t, [r["ttt"] for r in ref if r["ttt"] is not None])
    return target, best, out


def parse_table(md, head_prefix="| arm | kind |"):
    """A table of report.md (the arm table by default) as {arm: {column: cell}}."""
    lines = md.split("\n")
    i = next(i for i, ln in enumerate(lines) if ln.startswith(head_prefix))
    head = [c.strip() for c in lines[i].strip("|").split("|")]
    rows = {}
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0].strip("*")] = dict(zip(head, cells))
    return rows


def close_to_cell(cell, value, what):
    """cell shows value rounded to its printed decimals (half a unit of the last digit, plus float slack)."""
    if value is None:
        check(cell in ("—", ""), f"{what}: expected no value, report shows '{cell}'")
        return
    m = re.fullmatch(r"(-?[\d.]+(?:e[-+]?\d+)?)x?", cell)
    check(m is not None, f"{what}: cannot parse '{cell}'")
    s = m.group(1)
    if "e" in s:
        check(math.isclose(float(s), value, rel_tol=5e-3), f"{what}: report {s}, recomputed {value}")
        return
    dec = len(s.split(".")[1]) if "." in s else 0
    check(abs(float(s) - value) <= 0.5 * 10 ** -dec + 1e-9 * abs(value),
          f"{what}: report {s}, recomputed {value}")


def check_study(results, fixed_target=None, expect_runs=None):
    for f in ("report.md", "summary.csv", "runs.csv", "summary.json", "val_loss_vs_time.png", "val_loss_vs_step.png"):
        check(os.path.isfile(os.path.join(results, f)), f"{f} missing in {results}")
    for f in ("val_loss_vs_time.png", "val_loss_vs_step.png"):
        with open(os.path.join(results, f), "rb") as fh:
            check(fh.read(8) == b"\x89PNG\r\n\x1a\n", f"{f} is not a PNG")
        check(os.path.getsize(os.path.join(results, f)) > 5000, f"{f} is suspiciously small")
    target, best, arms = recompute(results, fixed_target)
    if expect_runs is not None:
        check(sum(o["n"] for o in arms.values()) == expect_runs, f"expected {expect_runs} finished runs")
    md = open(os.path.join(results, "report.md")).read()
    check(f"Target val loss: {target:.4f}" in md, f"report's target differs from the recomputed {target:.4f}")
    table = parse_table(md)
    check(set(table) == set(arms), f"report arms {sorted(table)} != run folders {sorted(arms)}")
    phase_table = parse_table(md[md.index("## Time per phase"):], "| arm |")
    with open(os.path.join(results, "summary.csv")) as f:
        csv_rows = {r["arm"]: r for r in csv.DictReader(f)}
    for arm, o in arms.items():
        row, c = table[arm], csv_rows[arm]
        check((row["arm"].startswith("**")) == o["best"], f"{arm}: best-baseline marking wrong")
        for col, key in (("final val loss", "final"), ("backward passes", "backward"), ("tokens", "tokens"),
                         ("train time (s)", "train_time"), ("time to target (s)", "ttt"),
                         ("backward to target", "btt")):
            parts = row[col].split(" ± ")
            close_to_cell(parts[0], o[key][0], f"{arm} {col} mean")
            if o[key][1] is not None:
                check(len(parts) == 2, f"{arm} {col}: std missing in '{row[col]}'")
                close_to_cell(parts[1], o[key][1], f"{arm} {col} std")
        if "predict" in phase_table[arm]:
            close_to_cell(phase_table[arm]["predict"].split(" (")[0], o["predict_s"][0], f"{arm} predict seconds")
            close_to_cell(phase_table[arm]["predict"].split(" (")[1].rstrip(")"), o["predict"][0], f"{arm} predict steps")
        check(row["reached"] == f"{o['reached']}/{o['n']}", f"{arm}: reached '{row['reached']}' != {o['reached']}/{o['n']}")
        close_to_cell(row["p (final val)"], o["p_final"], f"{arm} p final")
        close_to_cell(row["p (time)"], o["p_ttt"], f"{arm} p time")
        # the CSV holds the full-precision numbers
        for col, val in (("final_val_loss_mean", o["final"][0]), ("backward_mean", o["backward"][0]),
                         ("tokens_mean", o["tokens"][0]), ("train_time_s_mean", o["train_time"][0]),
                         ("time_to_target_mean", o["ttt"][0]), ("backward_to_target_mean", o["btt"][0]), ("p_final_val", o["p_final"]),
                         ("p_time_to_target", o["p_ttt"])):
            if val is None:
                check(c[col] == "", f"{arm} csv {col}: expected empty, got {c[col]}")
            else:
                check(math.isclose(float(c[col]), val, rel_tol=1e-9, abs_tol=1e-12),
                      f"{arm} csv {col}: {c[col]} != recomputed {val}")
    if "## Hybrid diagnostics" in md:  # from each run's summary.json
        diag = parse_table(md[md.index("## Hybrid diagnostics"):], "| arm |")
        for arm, row in diag.items():
            hs = [json.load(open(f)).get("hybrid") for f in glob.glob(os.path.join(results, "runs", arm, "seed*", "summary.json"))
                  if os.path.exists(os.path.join(os.path.dirname(f), "DONE"))]
            for col, key in (("% steps without backward", "pct_steps_without_backward"), ("rollbacks", "rollbacks"),
                             ("cos(update, drift)", "lookahead_cos")):
                close_to_cell(row[col], statistics.mean(h[key] for h in hs), f"{arm} {col}")
    return target, best, arms


def write_config(name, obj):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


FAKE_STUDY = {"name": "fake", "trainer": FAKE, "seeds": [1, 2, 3], "lr": 1e-3,
              "args": {"-x": 30, "-v": 5, "-b": 4, "-t": 32},
              "baseline": {"lr_mults": [0.5, 1, 2, 4]},
              "hybrid": {"lr_mults": [1]}, "arms": [{"name": "hybrid_predict2", "kind": "hybrid", "args": {"--predict-steps": 2}}]}


# ----------------------------------------------------------------------------
# runner, statistics, report and plots with the fake trainer

@test
def fake_study_runs_in_parallel_and_report_matches_jsonl():
    cfg = write_config("fake.json", FAKE_STUDY)
    res = os.path.join(TMP, "fake")
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--jobs", "2"])
    check(rc == 0, f"compare_hybrid failed ({rc}): {err}")
    check("18 to run" in out and out.count(" done ") == 18, "expected 18 runs to be run")
    target, best, arms = check_study(res, expect_runs=18)
    check(best == "baseline_lr2x", f"best baseline {best}")  # the fake's curves are best at 2x
    check(arms["hybrid_lr1x"]["predict"][0] > 0, "fake hybrid runs should have predict steps")


def finished_fake_study():
    """The fake study's config and results folder, run here unless an earlier test ran it."""
    cfg = write_config("fake.json", FAKE_STUDY)
    res = os.path.join(TMP, "fake")
    if not os.path.exists(os.path.join(res, "report.md")):
        sh([HYBRID, cfg, "--results", res, "--jobs", "2"])
    return cfg, res


@test
def hybrid_arms_are_paired_with_the_baseline_at_their_LR():
    # hybrid_lr1x and hybrid_predict2 (both at 1x) against baseline_lr1x, seed by seed; seed 2's hybrid run ends
    # 1.0 higher (FAKE_VAL_BUMP), so hybrid_lr1x - baseline_lr1x is +1/3 on average, and no other pairing exists
    cfg = write_config("samelr.json", dict(FAKE_STUDY, name="samelr", hybrid={"lr_mults": [1, 2]}))
    res = os.path.join(TMP, "samelr")
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--jobs", "2"], env={"FAKE_VAL_BUMP": "hybrid_lr1x/seed2"})
    check(rc == 0, f"compare_hybrid failed ({rc}): {err}")
    same = {r["arm"]: r for r in json.load(open(os.path.join(res, "summary.json")))["same_lr"]}
    check(sorted(same) == ["hybrid_lr1x", "hybrid_lr2x", "hybrid_predict2"], f"pairs {sorted(same)}")
    check(same["hybrid_lr2x"]["baseline"] == "baseline_lr2x", f"{same['hybrid_lr2x']}")
    check(all(same[a]["baseline"] == "baseline_lr1x" and same[a]["n"] == 3 for a in ("hybrid_lr1x", "hybrid_predict2")), f"{same}")
    vals = {(r["arm"], r["seed"]): r["final_val_loss"] for r in json.load(open(os.path.join(res, "summary.json")))["runs"]}
    want = sum(vals[("hybrid_lr1x", s)] - vals[("baseline_lr1x", s)] for s in (1, 2, 3)) / 3
    check(abs(same["hybrid_lr1x"]["mean"] - want) < 1e-9 and same["hybrid_lr1x"]["mean"] > 0.3, f"{same['hybrid_lr1x']}")
    check(same["hybrid_lr1x"]["wins"] <= 2, "seed 2 cannot be a win")
    report = open(os.path.join(res, "report.md")).read()
    check("## Against the baseline at the same LR" in report and "| hybrid_lr1x | baseline_lr1x | 0.001 |" in report,
          "the report's same-LR table")
    # the same pairs by setting and LR: the hybrid setting's row has both LRs, hybrid_predict2's only 1x
    grid = report.split("by setting")[1].split("\n\n")[1].split("\n")
    check(grid[0] == "| setting | 0.001 | 0.002 |", f"{grid[0]}")
    row = next(ln for ln in grid if ln.startswith("| hybrid |"))
    check(f"{same['hybrid_lr1x']['mean']:+.4f} (" in row and f"{same['hybrid_lr2x']['mean']:+.4f} (" in row, row)
    check(any(ln.startswith("| hybrid_predict2 |") and ln.endswith("| — |") for ln in grid), f"{grid}")


@test
def baseline_variants_are_paired_with_the_first_baseline_at_their_LR():
    # configs/studies/bf16_quality.json's shape: two baseline arms at one LR that differ in a flag. The second is
    # the variant, paired seed by seed with the first; the first is nobody's variant. Seed 2's variant run ends
    # 1.0 higher (FAKE_VAL_BUMP): variant - fp32 = +1/3, no wins (the other seeds are equal)
    cfg = write_config("variant.json", {"name": "variant", "trainer": FAKE, "seeds": [1, 2, 3], "lr": 1e-3,
                                        "args": {"-x": 30, "-v": 5, "-b": 4, "-t": 32},
                                        "arms": [{"name": "fp32", "kind": "baseline", "args": {"--precision": "fp32"}},
                                                 {"name": "bf16", "kind": "baseline", "args": {"--precision": "bf16"}}]})
    res = os.path.join(TMP, "variant")
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--jobs", "2"], env={"FAKE_VAL_BUMP": "bf16/seed2"})
    check(rc == 0, f"compare_hybrid failed ({rc}): {err}")
    same = json.load(open(os.path.join(res, "summary.json")))["same_lr"]
    check([(r["arm"], r["baseline"], r["n"]) for r in same] == [("bf16", "fp32", 3)], f"pairs {same}")
    check(abs(same[0]["mean"] - 1.0 / 3) < 1e-9 and same[0]["wins"] == 0, f"{same[0]}")
    report = open(os.path.join(res, "report.md")).read()
    check("| bf16 | fp32 | 0.001 | +0.3333 ± " in report, "the report's same-LR row of the variant")
    check(report.startswith("# Study `variant`: baselines\n"), "a study without hybrid arms is not titled baseline vs hybrid")


@test
def finished_runs_are_not_rerun_and_changed_ones_are():
    cfg, res = finished_fake_study()
    done = sorted(glob.glob(os.path.join(res, "runs", "*", "seed*", "DONE")))
    check(len(done) == 18, f"{len(done)} DONE files")
    mt = {d: os.path.getmtime(d) for d in done}
    rc, out, err = sh([HYBRID, cfg, "--results", res])
    check(rc == 0 and "18 already finished, 0 to run" in out and " start " not in out, f"re-run started runs: {out}")
    check(all(os.path.getmtime(d) == mt[d] for d in done), "DONE files were rewritten")
    # a run killed midway (no DONE) and a run whose recorded command differs are run again, nothing else
    os.remove(os.path.join(res, "runs", "baseline_lr1x", "seed2", "DONE"))
    dpath = os.path.join(res, "runs", "hybrid_predict2", "seed3", "DONE")
    d = json.load(open(dpath))
    d["cmd"][-1] = "999"
    json.dump(d, open(dpath, "w"))
    rc, out, err = sh([HYBRID, cfg, "--results", res])
    check(rc == 0, f"resume failed: {err}")
    started = sorted(re.findall(r"start (\S+)", out))
    check(started == ["baseline_lr1x/seed2", "hybrid_predict2/seed3"], f"resumed runs {started}")
    check("config changed" in out, "no note about the changed command")
    check_study(res, expect_runs=18)


@test
def an_environment_that_changes_the_numbers_is_part_of_each_run():
    # LLMC_BF16_TEST_REFERENCE (the trainer's bf16 products by its test reference) changes a run's numbers: a
    # study run under it records it in each run's command (and runs again the runs made without it), and
    # its report's Reproduce line sets it
    cfg = write_config("envref.json", dict(FAKE_STUDY, name="envref", seeds=[1], baseline={"lr_mults": [1]}, hybrid={},
                                           arms=[]))
    res = os.path.join(TMP, "envref")
    rc, out, err = sh([HYBRID, cfg, "--results", res], env={"LLMC_BF16_TEST_REFERENCE": ""})
    check(rc == 0 and "1 to run" in out, f"first run: {out} {err}")
    done = os.path.join(res, "runs", "baseline_lr1x", "seed1", "DONE")
    check(json.load(open(done))["cmd"][0] == FAKE, "a plain run's command starts with the trainer")
    rc, out, err = sh([HYBRID, cfg, "--results", res], env={"LLMC_BF16_TEST_REFERENCE": "1"})
    check(rc == 0 and "0 already finished, 1 to run" in out, f"the run without the variable counted as done: {out}")
    check(json.load(open(done))["cmd"][:2] == ["env", "LLMC_BF16_TEST_REFERENCE=1"], "the variable is not in the command")
    report = open(os.path.join(res, "report.md")).read()
    check("Reproduce: `LLMC_BF16_TEST_REFERENCE=1 scripts/compare_hybrid " in report, "Reproduce does not set the variable")
    rc, out, err = sh([HYBRID, cfg, "--results", res], env={"LLMC_BF16_TEST_REFERENCE": "1"})
    check(rc == 0 and "1 already finished, 0 to run" in out, f"the run under the variable ran again: {out}")


@test
def copied_results_folder_is_reported_not_rerun():
    # the recorded commands name the old -o folders; a copy elsewhere is the same runs
    cfg, res = finished_fake_study()
    copy = os.path.join(TMP, "fake_copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(res, copy)
    for f in glob.glob(os.path.join(copy, "*.csv")) + glob.glob(os.path.join(copy, "report.md")):
        os.remove(f)
    rc, out, err = sh([HYBRID, cfg, "--results", copy, "--report-only"])
    check(rc == 0 and "18 already finished, 0 to run" in out, f"copied folder not reported: {out} {err}")
    check(open(os.path.join(copy, "summary.csv")).read() == open(os.path.join(res, "summary.csv")).read(),
          "the copy's summary differs from the original's")
    # any other flag still counts as another command
    dpath = os.path.join(copy, "runs", "baseline_lr1x", "seed1", "DONE")
    d = json.load(open(dpath))
    d["cmd"][d["cmd"].index("-o") - 1] = "999"
    json.dump(d, open(dpath, "w"))
    rc, out, err = sh([HYBRID, cfg, "--results", copy, "--report-only"])
    check(rc == 0 and "17 already finished, 1 to run" in out, f"a changed flag was not noticed: {out}")


@test
def failed_run_is_reported_and_exit_is_nonzero():
    cfg = write_config("fake.json", FAKE_STUDY)
    res = os.path.join(TMP, "fail")
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--jobs", "2"], env={"FAKE_TRAINER_FAIL": "hybrid_predict2/seed2"})
    check(rc == 1, f"exit status {rc}, expected 1")
    check("1 run(s) failed: hybrid_predict2/seed2" in err, f"stderr: {err}")
    check(os.path.exists(os.path.join(res, "runs", "hybrid_predict2", "seed2", "FAILED")), "no FAILED marker")
    md = open(os.path.join(res, "report.md")).read()
    check("Finished runs: 17/18 (missing: hybrid_predict2/seed2)" in md, "report does not list the missing run")
    check_study(res, expect_runs=17)
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--report-only"])
    check(rc == 0 and " start " not in out, "--report-only must run nothing and succeed")


@test
def fixed_target_from_config():
    cfg = write_config("fixed.json", dict(FAKE_STUDY, seeds=[1, 2], target_val_loss=3.5))
    res = os.path.join(TMP, "fixed")
    rc, out, err = sh([HYBRID, cfg, "--results", res])
    check(rc == 0, err)
    target, best, arms = check_study(res, fixed_target=3.5, expect_runs=12)
    check(arms["baseline_lr1x"]["reached"] == 2, "every 1x run should reach 3.5")


@test
def toml_config_gives_the_same_arms():
    path = os.path.join(TMP, "fake.toml")
    with open(path, "w") as f:
        f.write(f'name = "toml"\ntrainer = "{FAKE}"\nseeds = [1, 2]\nlr = 1e-3\n'
                '[args]\n"-x" = 10\n"-v" = 5\n[baseline]\nlr_mults = [1, 2]\n'
                '[hybrid]\nlr_mults = [1]\n')
    res = os.path.join(TMP, "toml")
    rc, out, err = sh([HYBRID, path, "--results", res])
    check(rc == 0, err)
    check(sorted(os.listdir(os.path.join(res, "runs"))) == ["baseline_lr1x", "baseline_lr2x", "hybrid_lr1x"],
          "arms from TOML")
    check_study(res, expect_runs=6)


# ----------------------------------------------------------------------------
# rho: recomputed here from the metrics.jsonl files, with an implementation of its own

def rho_recompute(results):
    """{arm: [(seed, rho, break_even)]}: per seed, (Full steps, final val) of the matched and full-length
    baselines; a non-increasing fit (merge the first violating neighbours until none is left); the steps for
    the hybrid's final val loss linear in log-steps (the end segments extended); rho = (that - Full steps) / Predict."""
    cfg = json.load(open(os.path.join(results, "summary.json")))["config"]
    full = "baseline_lr%gx" % cfg["baseline"].get("matched_lr_mult", 1)

    def run(d):
        recs = [json.loads(ln) for ln in open(os.path.join(d, "metrics.jsonl")) if ln.strip()]
        steps = [r for r in recs if r["step"] >= 1]
        pred = [r for r in steps if r.get("phase") == "predict"]
        last = max(steps, key=lambda r: r["step"])
        fin = max((r for r in recs if r.get("val_loss") is not None), key=lambda r: r["step"])["val_loss"]
        full_ms = [r["ms"] for r in steps if r.get("phase") == "full"]
        be = None
        if pred and full_ms:  # Predict time plus the Correct steps' excess over a Full step, per Predict step
            f = sum(full_ms) / len(full_ms)
            corr = [r["ms"] for r in steps if r.get("phase") == "correct"]
            be = (sum(r["ms"] for r in pred) + max(sum(corr) - f * len(corr), 0.0)) / len(pred) / f
        measured = len(steps) - len(pred)
        return last["backward"] / (last["backward"] / measured), len(pred), fin, be

    curves, hyb = {}, {}
    for d in glob.glob(os.path.join(results, "runs", "*", "seed*")):
        arm, seed = os.path.basename(os.path.dirname(d)), int(os.path.basename(d)[4:])
        n, npred, fin, be = run(d)
        if arm == full or arm.startswith("matched_"):
            curves.setdefault(seed, []).append([n, fin])
        elif arm.startswith("hybrid_"):
            hyb.setdefault(arm, []).append((seed, n, npred, fin, be))
    out = {}
    for arm, rows in hyb.items():
        for seed, n, npred, fin, be in sorted(rows):
            pts = sorted(curves[seed])
            groups = [[p[1]] for p in pts]
            while True:
                k = next((i for i in range(len(groups) - 1)
                          if statistics.mean(groups[i]) < statistics.mean(groups[i + 1])), None)
                if k is None:
                    break
                groups[k:k + 2] = [groups[k] + groups[k + 1]]
            ys = [statistics.mean(g) for g in groups for _ in g]
            xs = [math.log(p[0]) for p in pts]
            segs = [(i, ys[i], ys[i + 1]) for i in range(len(xs) - 1) if ys[i] > ys[i + 1]]
            seg = next((s for s in segs if s[1] >= fin >= s[2]), segs[-1] if fin < ys[-1] else segs[0])
            i, y0, y1 = seg
            need = math.exp(xs[i] + (y0 - fin) / (y0 - y1) * (xs[i + 1] - xs[i]))
            out.setdefault(arm, []).append((seed, (need - n) / npred, be))
    return out


def check_rho(results, expect=None):
    """The report's and CSV's rho equal rho_recompute's; expect: {arm: known mean rho}."""
    from scipy import stats
    md = open(os.path.join(results, "report.md")).read()
    check("## Value of a Predict step (rho)" in md, "report has no rho section")
    table = parse_table(md[md.index("## Value of a Predict step"):], "| arm | rho")
    with open(os.path.join(results, "summary.csv")) as f:
        csv_rows = {r["arm"]: r for r in csv.DictReader(f)}
    with open(os.path.join(results, "runs.csv")) as f:
        run_rows = {(r["arm"], int(r["seed"])): r for r in csv.DictReader(f)}
    got = rho_recompute(results)
    check(set(got) == set(table), f"rho arms {sorted(table)} != hybrid run folders {sorted(got)}")
    for arm, rows in got.items():
        rhos = [r for _, r, _ in rows]
        mean = statistics.mean(rhos)
        ci = stats.t.ppf(0.975, len(rhos) - 1) * statistics.stdev(rhos) / math.sqrt(len(rhos))
        for seed, r, _ in rows:
            check(math.isclose(float(run_rows[(arm, seed)]["rho"]), r, rel_tol=1e-9, abs_tol=1e-9),
                  f"{arm} seed {seed}: runs.csv rho {run_rows[(arm, seed)]['rho']} != recomputed {r}")
        check(math.isclose(float(csv_rows[arm]["rho_mean"]), mean, rel_tol=1e-9, abs_tol=1e-9), f"{arm} csv rho_mean")
        check(math.isclose(float(csv_rows[arm]["rho_ci95"]), ci, rel_tol=1e-6, abs_tol=1e-9), f"{arm} csv rho_ci95")
        cell = table[arm]["rho (95% CI)"].split(" ± ")
        close_to_cell(cell[0].lstrip("+"), mean, f"{arm} rho")
        close_to_cell(cell[1], ci, f"{arm} rho CI")
        close_to_cell(table[arm]["break-even rho"], statistics.mean(b for _, _, b in rows), f"{arm} break-even rho")
        if expect and arm in expect:
            check(math.isclose(mean, expect[arm], rel_tol=1e-6), f"{arm}: rho {mean}, known answer {expect[arm]}")
    return got


RHO_STUDY = dict(FAKE_STUDY, baseline={"lr_mults": [1, 2], "matched_fractions": [0.7, 0.8, 0.9], "matched_lr_mult": 2},
                 hybrid={"lr_mults": [2]}, arms=[])


def write_run(d, steps, predict_at, final_val, accum, norms=None):
    """A synthetic metrics.jsonl: Full steps of 10 ms, Predict steps of 1 ms, `accum` backward passes per Full step;
    norms(step) -> (first micro batch's gradient norm, the step's) adds those fields."""
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 0, "phase": "init", "val_loss": 10.0}) + "\n")
        backward, t = 0, 0.0
        for s in range(1, steps + 1):
            pred = s in predict_at
            backward += 0 if pred else accum
            t += 0.001 if pred else 0.010
            r = {"step": s, "phase": "predict" if pred else "full", "ms": 1.0 if pred else 10.0, "train_time_s": t,
                 "backward": backward, "tokens": backward * 128, "loss": None if pred else 5.0}
            if norms is not None and not pred:
                r["grad_norm_micro1"], r["grad_norm"] = norms(s)
            if s == steps:
                r["val_loss"] = final_val
            f.write(json.dumps(r) + "\n")


@test
def rho_in_report_equals_recomputation_from_jsonl():
    cfg = write_config("rho.json", RHO_STUDY)
    res = os.path.join(TMP, "rho")
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--jobs", "2"])
    check(rc == 0, f"compare_hybrid failed ({rc}): {err}")
    check(sorted(os.listdir(os.path.join(res, "runs"))) == ["baseline_lr1x", "baseline_lr2x", "hybrid_lr2x",
          "matched_lr2x_x70", "matched_lr2x_x80", "matched_lr2x_x90"], f"matched-length arms: {sorted(os.listdir(os.path.join(res, 'runs')))}")
    check("-x 21 " in open(os.path.join(res, "runs", "matched_lr2x_x70", "seed1", "cmd.txt")).read(), "70% of 30 steps")
    check_study(res, expect_runs=18)
    check_rho(res)
    # known answer: final val = 5 - ln(steps) on the baselines (exactly linear in log-steps), 2 micro batches per
    # step; the hybrid takes 6 Predict steps of 30 (24 Full) and ends where a baseline of 27 steps ends (rho 0.5),
    # on seed 3 where one of 33 steps would (beyond the longest baseline: extrapolated, rho 1.5). Seed 2's 90% run
    # ends above its 80% run (noise): pooled, the 80-90% points both get 5 - (ln 24 + ln 27)/2.
    for (arm, seed), (n, fin) in {("baseline_lr2x", s): (30, 5 - math.log(30)) for s in (1, 2, 3)}.items():
        write_run(os.path.join(res, "runs", arm, f"seed{seed}"), n, set(), fin, 2)
    for pct, n in ((70, 21), (80, 24), (90, 27)):
        for s in (1, 2, 3):
            fin = 5 - math.log(24) if (s == 2 and pct == 90) else (5 - math.log(27) if (s == 2 and pct == 80) else 5 - math.log(n))
            write_run(os.path.join(res, "runs", f"matched_lr2x_x{pct}", f"seed{s}"), n, set(), fin, 2)
    pooled = 5 - (math.log(24) + math.log(27)) / 2
    need2 = math.exp(math.log(27) + (pooled - (5 - math.log(28))) / (pooled - (5 - math.log(30))) * (math.log(30) - math.log(27)))
    for s, fin in ((1, 5 - math.log(27)), (2, 5 - math.log(28)), (3, 5 - math.log(33))):
        write_run(os.path.join(res, "runs", "hybrid_lr2x", f"seed{s}"), 30, {5, 9, 13, 17, 19, 21}, fin, 2)
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--report-only"])
    check(rc == 0, f"--report-only failed: {err}")
    expect = (0.5 + (need2 - 24) / 6 + 1.5) / 3
    got = check_rho(res, {"hybrid_lr2x": expect})
    check(abs(got["hybrid_lr2x"][0][1] - 0.5) < 1e-9 and abs(got["hybrid_lr2x"][2][1] - 1.5) < 1e-9,
          f"known per-seed rho 0.5 and 1.5: {got}")
    check(abs(got["hybrid_lr2x"][0][2] - 0.1) < 1e-9, "break-even rho = 1 ms / 10 ms")
    with open(os.path.join(res, "runs.csv")) as f:
        ext = {int(r["seed"]): r["rho_extrapolated"] for r in csv.DictReader(f) if r["arm"] == "hybrid_lr2x"}
    check(ext == {1: "False", 2: "False", 3: "True"}, f"extrapolation flags {ext}")


DECAYED_STUDY = dict(FAKE_STUDY, baseline={"lr_mults": [1, 2], "matched_fractions": [0.8, 0.9], "matched_lr_mult": [1, 2]},
                     hybrid={"lr_mults": [1], "matched_fractions": [0.8, 0.9]}, arms=[])


@test
def decayed_steps_to_target_have_a_known_answer():
    """Steps to the target with every run fully decayed: per seed, final val = c - ln(steps) on each family
    (exactly linear in log-steps), so the schedule length that ends at the target is exp(c - target)."""
    cfg = write_config("decayed.json", DECAYED_STUDY)
    res = os.path.join(TMP, "decayed")
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--jobs", "2"])
    check(rc == 0, f"compare_hybrid failed ({rc}): {err}")
    check(sorted(os.listdir(os.path.join(res, "runs"))) == ["baseline_lr1x", "baseline_lr2x", "hybrid_lr1x", "hybrid_lr1x_x80",
          "hybrid_lr1x_x90", "matched_lr1x_x80", "matched_lr1x_x90", "matched_lr2x_x80", "matched_lr2x_x90"],
          f"arms: {sorted(os.listdir(os.path.join(res, 'runs')))}")
    cmd = open(os.path.join(res, "runs", "hybrid_lr1x_x90", "seed1", "cmd.txt")).read()
    check("-x 27 " in cmd and "--hybrid 1" in cmd and "-l 0.001 " in cmd, f"hybrid at 90% of 30 steps: {cmd}")
    # baseline family (LR x2) c = 5, 5.01, 5.02 by seed; the hybrid family 0.05 lower, seed 3 0.3 lower (its
    # length to the target then lies below the shortest run: extrapolated); the LR x1 family ends worse (not
    # the best baseline, though listed first: the reference must be the best baseline's family)
    base_c = {1: 5.0, 2: 5.01, 3: 5.02}
    hyb_c = {1: 4.95, 2: 4.96, 3: 4.72}
    for s in (1, 2, 3):
        for arm, n, c in (("baseline_lr1x", 30, 5.1), ("matched_lr1x_x80", 24, 5.1), ("matched_lr1x_x90", 27, 5.1),
                          ("baseline_lr2x", 30, base_c[s]), ("matched_lr2x_x80", 24, base_c[s]), ("matched_lr2x_x90", 27, base_c[s]),
                          ("hybrid_lr1x", 30, hyb_c[s]), ("hybrid_lr1x_x80", 24, hyb_c[s]), ("hybrid_lr1x_x90", 27, hyb_c[s])):
            write_run(os.path.join(res, "runs", arm, f"seed{s}"), n, set(), c - math.log(n), 1)
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--report-only"])
    check(rc == 0, f"--report-only failed: {err}")
    target, best, _ = check_study(res, expect_runs=27)
    check(best == "baseline_lr2x" and math.isclose(target, 5.02 - math.log(30)), f"best {best}, target {target}")
    b = [math.exp(base_c[s] - target) for s in (1, 2, 3)]
    h = [math.exp(hyb_c[s] - target) for s in (1, 2, 3)]
    check(math.isclose(b[2], 30.0) and h[2] < 24 < min(h[:2]), "the known answer is not the case it is meant to be")
    with open(os.path.join(res, "runs.csv")) as f:
        runs = {(r["arm"], int(r["seed"])): r for r in csv.DictReader(f)}
    for arm, want in (("baseline_lr2x", b), ("hybrid_lr1x", h)):
        for s in (1, 2, 3):
            got = float(runs[(arm, s)]["decayed_steps_to_target"])
            check(math.isclose(got, want[s - 1], rel_tol=1e-9), f"{arm} seed {s}: {got} steps, known answer {want[s - 1]}")
            ext = runs[(arm, s)]["decayed_extrapolated"]
            check(ext == ("True" if (arm, s) == ("hybrid_lr1x", 3) else "False"), f"{arm} seed {s}: extrapolated {ext}")
    with open(os.path.join(res, "summary.csv")) as f:
        arms = {r["arm"]: r for r in csv.DictReader(f)}
    fewer = 1 - statistics.mean(h) / statistics.mean(b)
    p = welch(h, b)
    c = arms["hybrid_lr1x"]
    check(math.isclose(float(c["decayed_steps_mean"]), statistics.mean(h), rel_tol=1e-9), "csv decayed_steps_mean")
    check(math.isclose(float(c["decayed_fewer_steps"]), fewer, rel_tol=1e-9), f"csv fewer steps {c['decayed_fewer_steps']} != {fewer}")
    check(math.isclose(float(c["p_decayed"]), p, rel_tol=1e-6), f"csv p {c['p_decayed']} != {p}")
    check(c["decayed_vs"] == "baseline_lr2x" and c["decayed_extrapolated"] == "1", "csv: vs / extrapolated count")
    lr1 = arms["baseline_lr1x"]  # the other baseline family, against the best one: 30 e^0.08 > 30 steps (extrapolated)
    check(math.isclose(float(lr1["decayed_steps_mean"]), 30 * math.exp(5.1 - 5.02), rel_tol=1e-9), f"lr x1 family: {lr1['decayed_steps_mean']}")
    check(lr1["decayed_vs"] == "baseline_lr2x" and lr1["decayed_extrapolated"] == "3", "lr x1 family against the best baseline's")
    check(arms["baseline_lr2x"]["decayed_vs"] == "", "the reference family is not compared with itself")
    md = open(os.path.join(res, "report.md")).read()
    table = parse_table(md[md.index("## Steps to the target, every run fully decayed"):], "| family")
    check(set(table) == {"baseline_lr1x", "baseline_lr2x", "hybrid_lr1x"}, f"families {sorted(table)}")
    row = table["hybrid_lr1x"]
    check(row["lengths (steps)"] == "24, 27, 30", f"lengths {row['lengths (steps)']}")
    close_to_cell(row["steps to the target"].split(" ± ")[0], statistics.mean(h), "hybrid steps to the target")
    close_to_cell(row["steps to the target"].split(" ± ")[1], statistics.stdev(h), "hybrid steps std")
    close_to_cell(row["fewer steps than"].split("%")[0].lstrip("+"), 100 * fewer, "fewer steps %")
    close_to_cell(row["p"], p, "p decayed")


@test
def noise_scale_of_the_second_half_has_a_known_answer():
    """The report's B_noise: 4 micro batches of 128 tokens per step; each step's norms are the expected ones for
    a true gradient G2 and a noise trace S (|G_b|^2 = G2 + S/b): S/G2 = 100 tokens over the first half, then
    1000 (seed 1) or 2000 (seed 2) over the second; the whole run's sums would give neither. A run whose noise sum
    is negative has no noise scale (not a negative one)."""
    cfg = write_config("gns.json", FAKE_STUDY)
    res = os.path.join(TMP, "gns")
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--jobs", "2"])
    check(rc == 0, f"compare_hybrid failed ({rc}): {err}")
    b, bb = 128.0, 512.0

    def norms(seed):
        def f(step):
            g2, S = (10.0, 1000.0) if step <= 15 else (1.0, 1000.0 * seed)
            return math.sqrt(g2 + S / b), math.sqrt(g2 + S / bb)
        return f
    arms = sorted(os.listdir(os.path.join(res, "runs")))
    for arm in arms:
        for seed in sorted(os.listdir(os.path.join(res, "runs", arm))):
            k = int(seed[4:])
            # seed 3: the first arm's step norms say less noise than none (|G_b| < |G_Bb|), the others' are absent
            noiseless = (lambda s: (1.0, 1.1)) if arm == arms[0] else None
            write_run(os.path.join(res, "runs", arm, seed), 30, set(), 4.0, 4, norms(k) if k <= 2 else noiseless)
    rc, out, err = sh([HYBRID, cfg, "--results", res, "--report-only"])
    check(rc == 0, f"--report-only failed: {err}")
    with open(os.path.join(res, "runs.csv")) as f:
        runs = {(r["arm"], int(r["seed"])): r for r in csv.DictReader(f)}
    for (arm, seed), r in runs.items():
        check(r["tokens_per_step"] == "512", f"{arm} seed {seed}: tokens per step {r['tokens_per_step']}")
        if seed <= 2:
            check(math.isclose(float(r["gns"]), 1000.0 * seed, rel_tol=1e-9), f"{arm} seed {seed}: gns {r['gns']}")
        else:
            check(r["gns"] == "", f"{arm} seed {seed}: no norms or a negative noise sum, no noise scale ({r['gns']})")
    with open(os.path.join(res, "summary.csv")) as f:
        summ = {r["arm"]: r for r in csv.DictReader(f)}
    for arm in arms:
        check(math.isclose(float(summ[arm]["gns_mean"]), 1500.0, rel_tol=1e-9), f"{arm}: gns_mean {summ[arm]['gns_mean']}")
    md = open(os.path.join(res, "report.md")).read()
    check("## The regime: gradient noise scale" in md and "Tokens per step: 512." in md, "the report's regime section")
    table = parse_table(md[md.index("## The regime"):], "| arm | B_noise")
    close_to_cell(table[arms[0]]["B_noise, second half (tokens)"].split(" ± ")[0], 1500.0, "report B_noise")


@test
def bad_configs_give_one_line_errors():
    cases = [(dict(FAKE_STUDY, colour="red"), "unknown key"),
             (dict(FAKE_STUDY, seeds=[]), "seeds"),
             (dict(FAKE_STUDY, args={"-x": 3, "-l": 0.1}), "-l is set by compare_hybrid"),
             (dict(FAKE_STUDY, lr="fast"), "'lr'"),
             (dict(FAKE_STUDY, baseline={"lr_mults": [1], "matched_fractions": [0.8, 1.2]}), "matched_fractions"),
             (dict(FAKE_STUDY, baseline={"lr_mults": [1], "matched_fractions": [0.8], "matched_lr_mult": 3}), "matched_lr_mult"),
             (dict(FAKE_STUDY, hybrid={"lr_mults": [1], "matched_fractions": [0.9], "matched_lr_mult": 2}), "hybrid.matched_lr_mult"),
             (dict(FAKE_STUDY, hybrid={"lr_mults": [1], "matched_fractions": [1.5]}), "hybrid.matched_fractions")]
    for i, (c, want) in enumerate(cases):
        rc, out, err = sh([HYBRID, write_config(f"bad{i}.json", c), "--results", os.path.join(TMP, "bad")])
        check(rc == 1 and err.startswith("error: ") and want in err and err.count("\n") == 1,
              f"case {want}: rc {rc}, stderr {err!r}")
    with open(os.path.join(TMP, "broken.json"), "w") as f:
        f.write("{not json")
    rc, out, err = sh([HYBRID, os.path.join(TMP, "broken.json")])
    check(rc == 1 and "not a valid JSON config" in err, f"broken JSON: {err!r}")
    rc, out, err = sh([HYBRID, os.path.join(TMP, "absent.json")])
    check(rc == 1 and "cannot read config" in err, f"missing file: {err!r}")


@test
def committed_configs_load_and_pass_only_their_trainers_flags():
    """Every study in configs/ and configs/studies/ is a reproduction command in the docs: it must still load, and every flag its
    arms pass must be one its trainer lists in -h (a renamed or removed flag breaks them here, not for a
    reader). A trainer that is not built here (./train_gpt2cu without nvcc) has its configs checked against
    the CPU trainer's flags minus the CPU-only --precision, the one flag the two CLIs do not share."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import comparelib as cl
    flag_re = re.compile(r"^\s*(-[a-zA-Z]{1,2}|--[a-z0-9-]+) ", re.M)

    def flags_of(binary):
        rc, out, err = sh([binary, "-h"])
        check(rc == 0, f"{binary} -h: exit {rc}")
        return set(flag_re.findall(out + err))

    need_trainer(hybrid=True)
    known = {"./train_gpt2": flags_of(TRAINER)}
    cu = os.path.join(ROOT, "train_gpt2cu")
    known["./train_gpt2cu"] = flags_of(cu) if os.access(cu, os.X_OK) else known["./train_gpt2"] - {"--precision"}
    check("--hybrid" in known["./train_gpt2"] and "-x" in known["./train_gpt2"], "flag list of -h not parsed")
    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "*.json")) + glob.glob(os.path.join(ROOT, "configs", "*.toml")) +
                   glob.glob(os.path.join(ROOT, "configs", "studies", "*.json")))
    check(len(paths) >= 10, f"only {len(paths)} configs found")
    for path in paths:
        cfg = cl.load_config(path)  # fills in the default trainer
        flags = known.get(cfg["trainer"])
        check(flags is not None, f"{path}: unknown trainer {cfg['trainer']}")
        for arm in cfg["_arms"]:
            bad = [x for x in arm["argv"] if re.match(r"^--?[a-zA-Z]", x) and x not in flags]
            check(not bad, f"{os.path.relpath(path, ROOT)}: arm {arm['name']} passes {bad}, not flags of {cfg['trainer']}")


@test
def compare_pytorch_detects_differences_with_fakes():
    ref = os.path.join(TMP, "fake_ref")
    with open(ref, "w") as f:
        f.write(f'#!/bin/sh\nFAKE_LOSS_OFFSET="${{REF_OFFSET:-0}}" exec {FAKE} "$@"\n')
    os.chmod(ref, 0o755)
    shards = make_shards()
    base = [PYTORCH, "--trainer", FAKE, "--reference", ref, "-i", shards[0], "-j", shards[1], "-x", "20"]
    rc, out, err = sh(base + ["--out", os.path.join(TMP, "cmp_same")])
    check(rc == 0 and "largest |train loss diff| = 0.000e+00" in out and "PASS" in out, f"equal runs: {out}{err}")
    check(os.path.isfile(os.path.join(TMP, "cmp_same", "compare_pytorch.png")), "no plot")
    rc, out, err = sh(base + ["--out", os.path.join(TMP, "cmp_off")], env={"REF_OFFSET": "-0.002"})
    check(rc == 1 and "largest |train loss diff| = 2.000e-03" in out and "exceeds tol" in err, f"offset runs: {out}{err}")
    rc, out, err = sh(base + ["--out", os.path.join(TMP, "cmp_off2"), "--tol", "3e-3"], env={"REF_OFFSET": "-0.002"})
    check(rc == 0, f"offset within tol must pass: {out}{err}")


# ----------------------------------------------------------------------------
# with the real trainer

def make_shards():
    """Small train/val shards (llm.c format) of a repetitive token stream, so that a tiny model learns."""
    d = os.path.join(TMP, "shards")
    if not os.path.isdir(d):
        os.makedirs(d)
        import random
        rng = random.Random(5)
        words = [[rng.randrange(50000) for _ in range(rng.randrange(1, 5))] for _ in range(300)]
        for name, n in (("train_000000.bin", 40000), ("val_000000.bin", 8000)):
            toks = []
            while len(toks) < n:
                toks += [50256] + [t for _ in range(rng.randrange(5, 40)) for t in rng.choice(words)]
            toks = toks[:n]
            with open(os.path.join(d, name), "wb") as f:
                f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
                f.write(struct.pack(f"<{n}H", *toks))
    return os.path.join(d, "train_*.bin"), os.path.join(d, "val_*.bin")


def need_trainer(hybrid=False):
    if not os.access(TRAINER, os.X_OK):
        raise Skip("./train_gpt2 is not built (trainer branch not merged, or `make` not run)")
    if hybrid:
        rc, out, err = sh([TRAINER, "-h"])
        if "--hybrid" not in out + err:
            raise Skip("./train_gpt2 has no --hybrid flag yet (hybrid branch not merged)")


@test
def compare_pytorch_tiny_model_20_steps_tol_1e3():
    need_trainer()
    if not os.path.isfile(os.path.join(ROOT, "scripts", "train_gpt2.py")):
        raise Skip("scripts/train_gpt2.py is missing (ref branch not merged)")
    tr, va = make_shards()
    out_dir = os.path.join(TMP, "cmp_real")
    rc, out, err = sh([PYTORCH, "-i", tr, "-j", va, "--depth", "1", "-b", "4", "-t", "32", "-x", "20",
                       "--tol", "1e-3", "--out", out_dir], env={"OMP_NUM_THREADS": "2"})
    print("    " + "\n    ".join(ln for ln in out.split("\n") if ln.startswith("largest")))
    check(rc == 0 and "PASS" in out, f"compare_pytorch failed ({rc}): {out[-2000:]}{err[-2000:]}")
    m = re.search(r"largest \|train loss diff\| = (\S+) at step \d+ over 20 steps", out)
    check(m is not None and float(m.group(1)) <= 1e-3, "the largest difference is not reported over 20 steps")


@test
def smoke_config_end_to_end():
    need_trainer(hybrid=True)
    cfg = json.load(open(os.path.join(ROOT, "configs", "smoke.json")))
    for k in ("-i", "-j"):
        pat = cfg["args"].get(k, "data/default/train_*.bin" if k == "-i" else "data/default/val_*.bin")
        if not glob.glob(os.path.join(ROOT, pat)):
            raise Skip(f"no shard matches {pat} (data branch not merged)")
    res = os.path.join(TMP, "smoke")
    t0 = time.time()
    rc, out, err = sh([HYBRID, os.path.join(ROOT, "configs", "smoke.json"), "--results", res])
    check(rc == 0, f"smoke study failed ({rc}): {out[-3000:]}{err[-2000:]}")
    target, best, arms = check_study(res, fixed_target=cfg.get("target_val_loss"),
                                     expect_runs=len(cfg["seeds"]) * len(os.listdir(os.path.join(res, "runs"))))
    print(f"    smoke study: {sum(o['n'] for o in arms.values())} runs in {time.time() - t0:.0f}s, target {target:.4f}, "
          f"best baseline {best}, predict steps per hybrid arm: "
          + ", ".join(f"{a}={o['predict'][0]:.0f}" for a, o in sorted(arms.items()) if not a.startswith("baseline")))
    for a, o in arms.items():  # the flag off means no Predict step at all
        check(not a.startswith("baseline") or o["predict"][0] == 0, f"{a}: a baseline run took Predict steps")


@test
def noise_gate_replay_repeats_the_trainer():
    """scripts/noise_gate_replay.py on a hybrid run (2 micro batches per step) gives the trainer's own
    closed-step count and running noise scale, at ratios where the gate stays open, toggles, stays closed,
    with the default window (no cool-down) and with a cool-down (--hybrid-cooldown / --cooldown)"""
    need_trainer(hybrid=True)
    tr, va = make_shards()
    partial = 0
    for ratio, cooldown in (("0.5", "0"), ("8", "0"), ("64", "0"), ("100000", "0"), ("8", "0.3")):
        d = os.path.join(TMP, f"gate_{ratio}_{cooldown}")
        rc, out, err = sh([TRAINER, "-i", tr, "-j", va, "-e", "d1", "-b", "2", "-t", "16", "-d", "64", "-x", "60",
                           "-v", "0", "-s", "0", "-o", d, "--hybrid", "--lookahead", "0.5", "--noise-gate", ratio,
                           "--hybrid-cooldown", cooldown],
                          env={"OMP_NUM_THREADS": "1"})
        check(rc == 0, f"trainer failed ({rc}): {err[-1000:]}")
        h = json.load(open(os.path.join(d, "summary.json")))["hybrid"]
        rc, out, err = sh(["/usr/bin/python3", os.path.join(ROOT, "scripts", "noise_gate_replay.py"), d, "--ratio", ratio,
                           "--cooldown", cooldown])
        check(rc == 0, f"replay failed ({rc}): {err}")
        m = re.search(r"closed on (\d+) of (\d+) steps; highest running B_noise in it \S+, at the end (\S+) tokens", out)
        check(m is not None, f"replay output: {out}")
        closed, window, end = int(m.group(1)), int(m.group(2)), float(m.group(3))
        check(closed == h["lookahead_gated_steps"], f"ratio {ratio}: replay {closed} closed steps, trainer {h['lookahead_gated_steps']}")
        check(window == h["lookahead_gated_steps"] + h["lookahead_steps"], f"ratio {ratio}: window {window} steps")
        check(abs(end - h["noise_scale_running"]) <= 1.0, f"ratio {ratio}: replay B_noise {end}, trainer {h['noise_scale_running']}")
        partial += 0 < closed < window
    check(partial > 0, "no ratio toggled the gate: the comparison would not test the window's per-step decisions")


if __name__ == "__main__":
    run_tests(TESTS, TMP)
