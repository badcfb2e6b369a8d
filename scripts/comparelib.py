"""
scripts/comparelib.py — what compare_hybrid and compare_pytorch share: reading study configs and
metrics.jsonl files, per-run and per-arm statistics, the Markdown report, and the plots.

Measurement rules (docs/experiments.md): time is the trainer's cumulative training time
(train_time_s, which excludes validation, sampling and checkpoint writing); the target validation loss
is fixed before any hybrid run is looked at (a number from the config, or the worst seed's final val loss
of the best baseline arm); time to target is read at the evaluation points the trainer logged (no
interpolation), and nothing here ever stops or steers a run.
Standard library, numpy, scipy and matplotlib only (Debian's packages, run with /usr/bin/python3).
"""
import json
import math
import os
import re
import struct
import sys

import numpy as np


class CompareError(Exception):
    """A user-facing error: printed as one line 'error: ...' and exit status 1."""


SHARD_MAGIC = 20240520  # llm.c's token shards: int32 header[256] = magic, version, token count, vocab, ...


def shard_header(path):
    """(token count, vocabulary) from an llm.c token shard's header; CompareError naming the file if it is none"""
    with open(path, "rb") as f:
        h = f.read(16)
    if len(h) < 16:
        raise CompareError(f"{path}: truncated shard header")
    magic, _, ntok, vocab = struct.unpack("<4i", h)
    if magic != SHARD_MAGIC:
        raise CompareError(f"{path}: not a token shard (magic {magic}, expected {SHARD_MAGIC})")
    return ntok, vocab


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


# ----------------------------------------------------------------------------
# study configs: JSON, or TOML (tomllib) for people who prefer it

STUDY_KEYS = {"name", "trainer", "results", "seeds", "lr", "args", "baseline", "hybrid", "arms",
              "target_val_loss", "description"}
RESERVED_FLAGS = {"-o", "--seed", "-l", "--hybrid", "-y"}  # set per run by the runner
KINDS = ("baseline", "hybrid")  # plus "matched": the shorter baselines of baseline.matched_fractions


def load_config(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise CompareError(f"{path}: cannot read config ({e.strerror})")
    try:
        if path.endswith(".toml"):
            import tomllib
            cfg = tomllib.loads(raw.decode("utf-8"))
        else:
            cfg = json.loads(raw.decode("utf-8"))
    except Exception as e:  # json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError
        raise CompareError(f"{path}: not a valid {'TOML' if path.endswith('.toml') else 'JSON'} config: {e}")
    if not isinstance(cfg, dict):
        raise CompareError(f"{path}: config must be an object")
    return validate_config(cfg, path)


def _check(cond, path, msg):
    if not cond:
        raise CompareError(f"{path}: {msg}")


def _check_args(args, path, where):
    _check(isinstance(args, dict), path, f"{where} must be an object of trainer flags")
    for k, v in args.items():
        _check(isinstance(k, str) and k.startswith("-"), path, f"{where}: '{k}' is not a flag (must start with '-')")
        _check(k not in RESERVED_FLAGS, path, f"{where}: flag {k} is set by compare_hybrid per run; remove it")
        _check(isinstance(v, (str, int, float, bool)) or v is None, path, f"{where}: flag {k} has a bad value {v!r}")


def validate_config(cfg, path="config"):
    unknown = set(cfg) - STUDY_KEYS
    _check(not unknown, path, f"unknown key(s) {sorted(unknown)}; known: {sorted(STUDY_KEYS)}")
    _check(isinstance(cfg.get("name"), str) and cfg["name"], path, "'name' (string) is required")
    seeds = cfg.get("seeds")
    _check(isinstance(seeds, list) and seeds and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds),
           path, "'seeds' must be a non-empty list of integers")
    _check(len(set(seeds)) == len(seeds), path, "'seeds' has duplicates")
    lr = cfg.get("lr")
    _check(isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0, path, "'lr' (positive number, the x1 peak LR) is required")
    cfg.setdefault("trainer", "./train_gpt2")
    cfg.setdefault("results", os.path.join("results", cfg["name"]))
    cfg.setdefault("args", {})
    _check_args(cfg["args"], path, "args")
    t = cfg.get("target_val_loss")
    _check(t is None or (isinstance(t, (int, float)) and not isinstance(t, bool)), path, "'target_val_loss' must be a number or null")
    for sec in ("baseline", "hybrid"):
        s = cfg.get(sec, {})
        _check(isinstance(s, dict), path, f"'{sec}' must be an object")
        allowed = {"lr_mults", "args", "matched_fractions", "matched_lr_mult"}
        _check(not (set(s) - allowed), path, f"'{sec}': unknown key(s) {sorted(set(s) - allowed)}")
        mults = s.get("lr_mults", [])
        _check(isinstance(mults, list) and all(isinstance(m, (int, float)) and m > 0 for m in mults), path,
               f"'{sec}.lr_mults' must be a list of positive numbers")
        _check_args(s.get("args", {}), path, f"{sec}.args")
        fr = s.get("matched_fractions", [])
        _check(isinstance(fr, list) and all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f < 1
                                            for f in fr), path, f"'{sec}.matched_fractions' must be a list of numbers in (0, 1)")
        _check(not fr or (isinstance(cfg["args"].get("-x"), int) and cfg["args"]["-x"] > 0), path,
               f"'{sec}.matched_fractions' needs the schedule length as an integer in args['-x']")
        mm = matched_mults(s)
        _check(not fr or (mm and all(isinstance(m, (int, float)) and not isinstance(m, bool) and m in mults for m in mm)),
               path, f"'{sec}.matched_lr_mult' must be one of '{sec}.lr_mults', or a list of them")
    for i, a in enumerate(cfg.get("arms", [])):
        where = f"arms[{i}]"
        _check(isinstance(a, dict), path, f"{where} must be an object")
        _check(not (set(a) - {"name", "kind", "lr_mult", "args"}), path,
               f"{where}: unknown key(s) {sorted(set(a) - {'name', 'kind', 'lr_mult', 'args'})}")
        _check(isinstance(a.get("name"), str) and a["name"].replace("_", "").replace("-", "").replace(".", "").isalnum(),
               path, f"{where}: 'name' must be letters, digits, '_', '-', '.'")
        _check(a.get("kind") in KINDS, path, f"{where}: 'kind' must be one of {KINDS}")
        _check(isinstance(a.get("lr_mult", 1), (int, float)) and a.get("lr_mult", 1) > 0, path, f"{where}: bad 'lr_mult'")
        _check_args(a.get("args", {}), path, f"{where}.args")
    arms = build_arms(cfg)
    _check(arms, path, "the study has no arms")
    names = [a["name"] for a in arms]
    _check(len(set(names)) == len(names), path, f"duplicate arm names: {sorted(n for n in set(names) if names.count(n) > 1)}")
    cfg["_arms"] = arms
    return cfg


def fmt_num(v):
    """Flag values as the trainer reads them: shortest exact-looking form (0.0006, not 0.0006000000000000001)."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def flags_to_argv(args):
    argv = []
    for k, v in args.items():
        if v is None or v is False:
            continue
        argv.append(k)
        if v is not True:
            argv.append(fmt_num(v))
    return argv


def mult_tag(m):
    return f"{m:g}x"


def matched_mults(sec):
    """The LR multiples of a section's shorter schedules: matched_lr_mult, a number or a list (default 1)."""
    mm = sec.get("matched_lr_mult", 1)
    return list(mm) if isinstance(mm, list) else [mm]


def build_arms(cfg):
    """The study's arms, each {name, kind, lr_mult, lr, argv}; argv lacks -o and --seed."""
    arms = []
    base_lr = float(cfg["lr"])

    def add(name, kind, mult, extra):
        args = dict(cfg.get("args", {}))
        args.update(extra)
        args["-l"] = base_lr * mult
        plain = kind in ("baseline", "matched")
        if not plain:
            args["--hybrid"] = 1
        arms.append({"name": name, "kind": kind, "lr_mult": mult, "lr": base_lr * mult, "argv": flags_to_argv(args)})

    b = cfg.get("baseline", {})
    for m in b.get("lr_mults", []):
        add(f"baseline_lr{mult_tag(m)}", "baseline", m, b.get("args", {}))
    def add_shorter(sec, prefix, kind, full_prefix):
        # the same schedule shape (own warm-up, windows and full decay) over fewer steps: the points of
        # the curve "final val loss vs steps" that rho and the decayed steps to target are read from
        for mm in matched_mults(sec) if sec.get("matched_fractions") else []:
            for f in sec["matched_fractions"]:
                steps = int(round(f * cfg["args"]["-x"]))
                add(f"{prefix}{mult_tag(mm)}_x{int(round(100 * f))}", kind, mm, dict(sec.get("args", {}), **{"-x": steps}))
                arms[-1]["full_arm"] = f"{full_prefix}{mult_tag(mm)}"

    add_shorter(b, "matched_lr", "matched", "baseline_lr")
    h = cfg.get("hybrid", {})
    for m in h.get("lr_mults", []):
        add(f"hybrid_lr{mult_tag(m)}", "hybrid", m, h.get("args", {}))
    add_shorter(h, "hybrid_lr", "hybrid", "hybrid_lr")
    for a in cfg.get("arms", []):
        extra = dict(cfg.get(a["kind"], {}).get("args", {}))
        extra.update(a.get("args", {}))
        add(a["name"], a["kind"], a.get("lr_mult", 1), extra)
    return arms


# ----------------------------------------------------------------------------
# metrics.jsonl (format in docs/formats.md) and per-run summaries

def read_metrics(path):
    """All records of a metrics.jsonl, in file order. Raises CompareError on a malformed line."""
    recs = []
    try:
        f = open(path)
    except OSError as e:
        raise CompareError(f"{path}: cannot read ({e.strerror})")
    with f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise CompareError(f"{path}:{i}: not JSON ({e.msg})")
            if not isinstance(r, dict) or not isinstance(r.get("step"), int):
                raise CompareError(f"{path}:{i}: record without an integer 'step'")
            recs.append(r)
    if not recs:
        raise CompareError(f"{path}: empty")
    return recs


def val_points(recs):
    """[(step, train_time_s, val_loss)] in step order; the step-0 'init' line counts as time 0."""
    pts = []
    for r in recs:
        v = r.get("val_loss")
        if v is None:
            continue
        t = r.get("train_time_s")
        pts.append((r["step"], 0.0 if t is None else float(t), float(v)))
    pts.sort(key=lambda p: p[0])
    return pts


def noise_terms(gb, gbb, b, bb):
    """One step's unbiased estimates (S, G2) of the noise's trace and of the true gradient's squared norm,
    from the norms of one micro batch's gradient (gb, over b tokens) and of the step's (gbb, bb tokens),
    as the trainer computes them (llmc/run.h run_noise_terms)."""
    gb2, gbb2 = float(gb) ** 2, float(gbb) ** 2
    return (gb2 - gbb2) / (1.0 / b - 1.0 / bb), (bb * gbb2 - b * gb2) / (bb - b)


def step_shape(steps):
    """(tokens per step, backward passes per step) of a run from the cumulative counters of two
    neighbouring measured steps; (None, None) if no two are found."""
    byk = {r["step"]: r for r in steps}
    for r in steps:
        prev = byk.get(r["step"] - 1)
        if prev is not None and r.get("phase") != "predict" and r.get("tokens") and prev.get("tokens") is not None \
                and r.get("backward") and prev.get("backward") is not None and r["backward"] > prev["backward"]:
            return r["tokens"] - prev["tokens"], r["backward"] - prev["backward"]
    return None, None


def gns_second_half(steps):
    """(gradient noise scale in tokens, tokens per step) of a run from its per-step records: the ratio of
    the two unbiased estimates (noise_terms) summed over the steps past half the run, as the trainer's
    summary does (docs/formats.md); (None, tokens per step) with one micro batch per step."""
    last = max(r["step"] for r in steps)
    full = [r for r in steps if r.get("phase") != "predict" and r.get("grad_norm_micro1") is not None
            and r.get("grad_norm") is not None and not r.get("skipped")]
    tps, micro = step_shape(steps)
    if not full or tps is None or micro < 2:
        return None, tps
    bb = float(tps)
    b = bb / micro
    ss = g2 = 0.0
    for r in full:
        if r["step"] <= last // 2:
            continue
        s, g = noise_terms(r["grad_norm_micro1"], r["grad_norm"], b, bb)
        ss += s
        g2 += g
    return (ss / g2 if g2 > 0 and ss > 0 else None), tps  # a sum <= 0: too little noise to measure


def summarize_run(recs, target=None):
    steps = [r for r in recs if r["step"] >= 1]
    if not steps:
        raise CompareError("no training steps in metrics")
    last = max(steps, key=lambda r: r["step"])
    pts = val_points(recs)
    if not pts:
        raise CompareError("no val_loss in metrics (run with -v > 0)")
    fstep, _, fval = pts[-1]
    phase_steps, phase_time = {}, {}
    for r in steps:
        ph = r.get("phase") or "full"
        phase_steps[ph] = phase_steps.get(ph, 0) + 1
        phase_time[ph] = phase_time.get(ph, 0.0) + float(r.get("ms") or 0.0) / 1000.0
    s = {
        "steps": last["step"],
        "final_val_loss": fval,
        "final_val_step": fstep,
        "train_time_s": float(last.get("train_time_s") or 0.0),
        "backward": last.get("backward"),
        "tokens": last.get("tokens"),
        "predict_steps": phase_steps.get("predict", 0),
        "phase_steps": phase_steps,
        "phase_time_s": phase_time,
        "time_to_target_s": None,
        "step_to_target": None,
        "backward_to_target": None,
    }
    s["gns"], s["tokens_per_step"] = gns_second_half(steps)
    if target is not None:
        for st, t, v in pts:
            if v <= target:
                s["time_to_target_s"], s["step_to_target"] = t, st
                s["backward_to_target"] = next((r.get("backward") for r in recs if r["step"] == st), None) if st else 0
                break
    return s


HYBRID_DIAG = (("pct_steps_without_backward", "% steps without backward", 1),
               ("lookahead_steps", "look-ahead steps", 1), ("lookahead_gated_steps", "steps the noise gate closed", 1),
               ("lookahead_mean_beta", "mean look-ahead beta", 3), ("lookahead_jumps", "grad-norm jumps", 1),
               ("lookahead_caps", "block caps", 1), ("lookahead_cos", "cos(update, drift)", 3),
               ("predict_runs", "Predict runs", 1), ("rollbacks", "rollbacks", 1),
               ("decide_ms_per_step", "hybrid ms/step", 4))


def read_hybrid_summary(run_dir):
    """The trainer's hybrid diagnostics (summary.json's "hybrid" object), or None (baseline, or no file)."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            h = json.load(f).get("hybrid")
    except (OSError, ValueError, AttributeError):
        return None
    return h if isinstance(h, dict) else None


def mean_std(xs):
    xs = [float(x) for x in xs if x is not None]
    if not xs:
        return None, None, 0
    a = np.asarray(xs, dtype=np.float64)
    return float(a.mean()), (float(a.std(ddof=1)) if len(a) > 1 else None), len(a)


def welch_p(a, b):
    """Two-sided Welch t-test p-value; None when either side has < 2 values or both have zero variance."""
    a = [float(x) for x in a if x is not None]
    b = [float(x) for x in b if x is not None]
    if len(a) < 2 or len(b) < 2:
        return None
    if np.var(a) == 0 and np.var(b) == 0:
        return None
    from scipy import stats
    p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return None if math.isnan(p) else p


def analyze(arms, runs, fixed_target=None):
    """arms: study arms (build_arms order); runs: {(arm, seed): {"recs": [...], "wall_s": s}} for finished runs.
    Returns (target info, per-run rows, per-arm rows)."""
    pre = {k: summarize_run(v["recs"]) for k, v in runs.items()}
    best, best_mean = None, None
    for a in arms:
        if a["kind"] != "baseline":
            continue
        m, _, n = mean_std([pre[k]["final_val_loss"] for k in pre if k[0] == a["name"]])
        if n and (best_mean is None or m < best_mean):
            best, best_mean = a["name"], m
    if fixed_target is not None:
        target = {"value": float(fixed_target), "rule": "fixed by the config (target_val_loss)", "best_baseline": best}
    elif best is not None:
        worst = max(pre[k]["final_val_loss"] for k in pre if k[0] == best)
        target = {"value": worst, "best_baseline": best,
                  "rule": f"worst seed's final val loss of the best baseline ({best}), so every seed of it reaches it"}
    else:
        target = {"value": None, "best_baseline": None, "rule": "no finished baseline run and no fixed target"}
    run_rows = []
    for a in arms:
        for k in sorted(k for k in runs if k[0] == a["name"]):
            s = summarize_run(runs[k]["recs"], target["value"])
            s.update({"arm": a["name"], "kind": a["kind"], "seed": k[1], "lr": a["lr"],
                      "wall_s": runs[k].get("wall_s"), "hybrid": runs[k].get("hybrid")})
            run_rows.append(s)
    by_arm = {a["name"]: [r for r in run_rows if r["arm"] == a["name"]] for a in arms}
    ref = by_arm.get(best, [])
    arm_rows = []
    for a in arms:
        rs = by_arm[a["name"]]
        row = {"arm": a["name"], "kind": a["kind"], "lr": a["lr"], "n": len(rs),
               "seeds": [r["seed"] for r in rs], "best_baseline": a["name"] == best}
        for key in ("final_val_loss", "train_time_s", "backward", "tokens", "wall_s", "predict_steps", "steps", "gns"):
            row[key + "_mean"], row[key + "_std"], _ = mean_std([r[key] for r in rs])
        ttt = [r["time_to_target_s"] for r in rs if r["time_to_target_s"] is not None]
        row["time_to_target_mean"], row["time_to_target_std"], row["reached"] = mean_std(ttt)
        row["backward_to_target_mean"], row["backward_to_target_std"], _ = mean_std(
            [r["backward_to_target"] for r in rs if r["time_to_target_s"] is not None])
        row["p_final_val"] = None if a["name"] == best else welch_p([r["final_val_loss"] for r in rs],
                                                                     [r["final_val_loss"] for r in ref])
        row["p_time_to_target"] = None if a["name"] == best else welch_p(
            ttt, [r["time_to_target_s"] for r in ref if r["time_to_target_s"] is not None])
        arm_rows.append(row)
    bref = next((r for r in arm_rows if r["best_baseline"]), None)
    for row in arm_rows:
        ok = (bref is not None and bref["time_to_target_mean"] and row["time_to_target_mean"]
              and row["reached"] == row["n"] and bref["reached"] == bref["n"])
        row["speedup"] = bref["time_to_target_mean"] / row["time_to_target_mean"] if ok else None
    add_rho(arms, run_rows, arm_rows)
    add_decayed_steps(arms, run_rows, arm_rows, target["value"])
    return target, run_rows, arm_rows


# ----------------------------------------------------------------------------
# rho, the value of a Predict step in Full steps (docs/experiments.md)
#
# Per seed, the matched-length baselines (and the full-length one at the same LR) give points
# (Full steps, final val loss). The curve through them is made non-increasing (pool-adjacent-violators:
# a shorter schedule that ends lower than a longer one is noise, and a non-monotone curve has no
# inverse) and interpolated linearly in log(steps): loss falls roughly linearly in log-steps over a
# 70-100% range, and a log axis does not favour the long end. Off either end the nearest segment is
# extended (flagged "extrapolated"). Steps = backward passes / micro batches per step, so rho is in Full
# steps whatever -d is. The same seed's baselines are used (same init and data order: paired).

def _nonincreasing(ys):
    """Least-squares non-increasing fit (pool adjacent violators), equal weights."""
    blocks = []  # [sum, count]
    for y in ys:
        blocks.append([y, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            s_, n_ = blocks.pop()
            blocks[-1][0] += s_
            blocks[-1][1] += n_
    out = []
    for s_, n_ in blocks:
        out += [s_ / n_] * n_
    return out


def steps_for_loss(points, loss):
    """points [(steps, final val loss)] of baselines; the steps a baseline needs to end at `loss`
    (linear in log-steps on the non-increasing fit), and whether that was extrapolated. None if < 2 lengths."""
    pts = sorted(points)
    xs = [math.log(p[0]) for p in pts]
    ys = _nonincreasing([p[1] for p in pts])
    if len(xs) < 2 or xs[0] == xs[-1]:
        return None, None
    for i in range(len(xs) - 1):
        if ys[i] >= loss >= ys[i + 1] and ys[i] > ys[i + 1]:
            return math.exp(xs[i] + (ys[i] - loss) / (ys[i] - ys[i + 1]) * (xs[i + 1] - xs[i])), False
    # off the ends: extend the end segment on the side of `loss` (first/last with a non-zero slope)
    segs = [(i, i + 1) for i in range(len(xs) - 1) if ys[i] > ys[i + 1]]
    if not segs:
        return None, None
    i, j = segs[-1] if loss < ys[-1] else segs[0]
    return math.exp(xs[i] + (ys[i] - loss) / (ys[i] - ys[j]) * (xs[j] - xs[i])), True


def t_ci95(xs):
    """Half-width of the two-sided 95% t-interval of the mean; None for < 2 values."""
    xs = [float(x) for x in xs if x is not None]
    if len(xs) < 2:
        return None
    from scipy import stats
    return float(stats.t.ppf(0.975, len(xs) - 1) * np.std(xs, ddof=1) / math.sqrt(len(xs)))


def full_steps_of(run):
    """Steps with a backward pass, and backward passes per such step (the micro batches)."""
    measured = run["steps"] - run["predict_steps"]
    return measured, (run["backward"] / measured if measured and run["backward"] else None)


def break_even(run):
    """What a Predict step costs in Full steps: its own time plus what its run's Correct step costs beyond a
    Full step (the value test's probe forward), per Predict step, over the mean Full-step time; None
    without Full and Predict steps."""
    steps, t = run["phase_steps"], run["phase_time_s"]
    if not steps.get("full") or not steps.get("predict"):
        return None
    full = t.get("full", 0.0) / steps["full"]
    extra = t.get("correct", 0.0) - full * steps.get("correct", 0)
    return (t.get("predict", 0.0) + max(extra, 0.0)) / steps["predict"] / full if full > 0 else None


def family_curves(run_rows, names):
    """{seed: [(Full steps, final val loss)]} of the runs of the arms `names` (a family of schedule lengths)."""
    curves = {}
    for r in run_rows:
        if r["arm"] in names and r["backward"]:
            curves.setdefault(r["seed"], []).append((full_steps_of(r)[0], r["final_val_loss"]))
    return curves


def add_rho(arms, run_rows, arm_rows):
    """rho per hybrid run and per arm (mean, 95% CI over seeds), and the break-even rho of the arm."""
    matched = [a for a in arms if a["kind"] == "matched"]
    if not matched:
        return
    full = matched[0]["full_arm"]  # with several matched LRs, the first listed one's family
    curve = family_curves(run_rows, {a["name"] for a in matched if a["full_arm"] == full} | {full})
    for r in run_rows:
        if r["kind"] == "hybrid":
            measured, accum = full_steps_of(r)
            need, extra = steps_for_loss(curve.get(r["seed"], []), r["final_val_loss"])
            ok = need is not None and r["predict_steps"] > 0
            r["rho_steps_needed"], r["rho_extrapolated"] = need, extra
            r["rho"] = (need - measured) / r["predict_steps"] if ok else None
            r["break_even_rho"] = break_even(r)
    for row in arm_rows:
        rs = [r for r in run_rows if r["arm"] == row["arm"] and r.get("rho") is not None]
        if row["kind"] != "hybrid":
            continue
        row["rho_mean"], row["rho_std"], row["rho_n"] = mean_std([r["rho"] for r in rs])
        row["rho_ci95"] = t_ci95([r["rho"] for r in rs])
        row["rho_extrapolated"] = sum(1 for r in rs if r["rho_extrapolated"])
        row["break_even_rho"], _, _ = mean_std([r["break_even_rho"] for r in run_rows if r["arm"] == row["arm"]])


# ----------------------------------------------------------------------------
# steps to the target, every run fully decayed
#
# "Time to target" reads the first evaluation at or below the target in the middle of a run; but a run
# stopped there would not have decayed its learning rate, so a schedule that crosses the target late
# in its own decay is not evidence that a shorter schedule would reach it. The fair question is how
# long a schedule must be for its *final* val loss to reach the target. A family = a full-length arm and
# its shorter, fully decayed runs (baseline.matched_fractions / hybrid.matched_fractions, same LR);
# per seed, its points (Full steps, final val loss) give, through the same non-increasing fit and
# log-step interpolation as rho, the schedule length that ends at the target (extended beyond the
# lengths run, and flagged, when the target lies outside them).

def add_decayed_steps(arms, run_rows, arm_rows, target):
    """Per family (keyed by its full-length arm): schedule length to the target per seed, mean/std over
    seeds, and for hybrid families the fraction of steps saved against the baseline family and Welch's p."""
    fams = {}
    for a in arms:
        if a.get("full_arm"):
            fams.setdefault(a["full_arm"], {a["full_arm"]}).add(a["name"])
    if target is None or not fams:
        return
    per_fam = {}
    for full, names in fams.items():
        pts = family_curves(run_rows, names)
        for r in run_rows:
            if r["arm"] == full:
                need, extra = steps_for_loss(pts.get(r["seed"], []), target)
                r["decayed_steps_to_target"], r["decayed_extrapolated"] = need, extra
        per_fam[full] = [r for r in run_rows if r["arm"] == full and r.get("decayed_steps_to_target") is not None]
    # the reference: the best baseline's family where it has shorter runs, else the first baseline family
    base_fams = [f for f in per_fam for a in arms if a["name"] == f and a["kind"] == "baseline"]
    best = next((r["arm"] for r in arm_rows if r["best_baseline"]), None)
    base = best if best in base_fams else (base_fams[0] if base_fams else None)
    for row in arm_rows:
        if row["arm"] not in per_fam:
            continue
        rs = per_fam[row["arm"]]
        xs = [r["decayed_steps_to_target"] for r in rs]
        row["decayed_steps_mean"], row["decayed_steps_std"], row["decayed_n"] = mean_std(xs)
        row["decayed_extrapolated"] = sum(1 for r in rs if r["decayed_extrapolated"])
        row["decayed_vs"], row["decayed_fewer_steps"], row["p_decayed"] = None, None, None
        if base is not None and row["arm"] != base and per_fam[base]:
            bx = [r["decayed_steps_to_target"] for r in per_fam[base]]
            bm, _, _ = mean_std(bx)
            row["decayed_vs"] = base
            row["decayed_fewer_steps"] = 1.0 - row["decayed_steps_mean"] / bm if xs and bm else None
            row["p_decayed"] = welch_p(xs, bx)


# ----------------------------------------------------------------------------
# paired statistics over seeds (the held-out suite, scripts/suite)
#
# The seed is the unit: two arms run on the same seeds (same init, same data order) are compared seed by
# seed, and a seed counts once, whatever machines or numerics it ran on. Every function takes its values
# as (seed, value) pairs and refuses a seed given twice; pairing uses the seeds both sides have.

def by_seed(pairs, what="values"):
    """{seed: value} of [(seed, value)], refusing a seed given twice (CompareError)."""
    out = {}
    for seed, v in pairs:
        if seed in out:
            raise CompareError(f"{what}: seed {seed} given twice (the seed is the unit: one value per seed)")
        out[seed] = float(v)
    return out


def paired_t(a_pairs, b_pairs, what="paired"):
    """Paired t-test of a - b over the seeds both have: {"n", "seeds", "mean", "sd", "ci95" (half-width),
    "t", "p" (two-sided), "p_less" (one-sided, mean < 0), "p_greater" (mean > 0), "wins" (seeds with
    a < b)}; p-values None for < 2 seeds or zero spread."""
    from scipy import stats
    a, b = by_seed(a_pairs, what), by_seed(b_pairs, what)
    seeds = sorted(set(a) & set(b))
    d = [a[s] - b[s] for s in seeds]
    r = {"n": len(d), "seeds": seeds, "mean": None, "sd": None, "ci95": None, "t": None, "p": None,
         "p_less": None, "p_greater": None, "wins": sum(1 for x in d if x < 0)}
    if not d:
        return r
    r["mean"] = float(np.mean(d))
    if len(d) < 2:
        return r
    r["sd"] = float(np.std(d, ddof=1))
    r["ci95"] = float(stats.t.ppf(0.975, len(d) - 1) * r["sd"] / math.sqrt(len(d)))
    if r["sd"] > 0:
        r["t"] = r["mean"] / (r["sd"] / math.sqrt(len(d)))
        r["p"] = float(2 * stats.t.sf(abs(r["t"]), len(d) - 1))
        r["p_less"] = float(stats.t.cdf(r["t"], len(d) - 1))
        r["p_greater"] = float(stats.t.sf(r["t"], len(d) - 1))
    return r


def same_lr_pairs(arm_rows, run_rows):
    """Each hybrid arm, and each baseline variant (a baseline arm after the first at its peak LR and length:
    other flags, another precision), against the first baseline arm of the same peak LR and length, paired by
    seed on the final val loss: [{"arm", "baseline", "lr", **paired_t}]. The question a user who did not tune
    the LR asks: does turning hybrid mode (or the variant's flags) on at my LR cost?"""
    def final_pairs(arm):
        return [(r["seed"], r["final_val_loss"]) for r in run_rows if r["arm"] == arm and r.get("final_val_loss") is not None]
    steps = {r["arm"]: r.get("steps_mean") for r in arm_rows}
    bases = [r for r in arm_rows if r["kind"] == "baseline"]
    out = []
    for r in arm_rows:
        if r["kind"] not in ("hybrid", "baseline"):
            continue
        b = next((x for x in bases if math.isclose(x["lr"], r["lr"], rel_tol=1e-9) and steps.get(x["arm"]) == steps.get(r["arm"])), None)
        if b is None or b["arm"] == r["arm"]:
            continue
        out.append({"arm": r["arm"], "baseline": b["arm"], "lr": r["lr"],
                    **paired_t(final_pairs(r["arm"]), final_pairs(b["arm"]), what=f"{r['arm']} - {b['arm']}")})
    return out


def same_lr_grid(arm_rows, same):
    """same_lr_pairs as a grid: a row per setting (an arm's name without its `_lr<mult>x`), a column per peak LR;
    each cell hybrid - baseline (wins), p where < 0.1. With the baseline's final val loss on top. Markdown lines
    (none where fewer than two LRs)."""
    lrs = sorted({r["lr"] for r in same})
    if len(lrs) < 2:
        return []
    fam = lambda arm: re.sub(r"_lr[0-9.]+x$", "", arm)  # noqa: E731
    paired = {r["arm"] for r in same}  # the variants: the baseline row shows the baselines they are paired with
    base = {r["lr"]: r["final_val_loss_mean"] for r in arm_rows if r["kind"] == "baseline" and r["arm"] not in paired}
    rows = {}
    for r in same:
        if r["mean"] is not None:
            rows.setdefault(fam(r["arm"]), {})[r["lr"]] = r
    L = ["Arm − baseline at the same LR by setting (seeds where the arm ends lower in brackets; p where below 0.1):", "",
         "| setting | " + " | ".join(fmt_num(x) for x in lrs) + " |", "|---|" + "---|" * len(lrs),
         "| baseline's final val loss | " + " | ".join("—" if base.get(x) is None else f"{base[x]:.4f}" for x in lrs) + " |"]
    for name, cells in rows.items():
        out = []
        for x in lrs:
            r = cells.get(x)
            if r is None:
                out.append("—")
                continue
            p = f", p = {fmt_p(r['p'])}" if r["p"] is not None and r["p"] < 0.1 else ""
            out.append(f"{r['mean']:+.4f} ({r['wins']}){p}")
        L.append(f"| {name} | " + " | ".join(out) + " |")
    return L + [""]


def one_sided_t(pairs, threshold, alternative="greater", what="values"):
    """One-sample t-test of the seeds' values against `threshold`: {"n", "mean", "sd", "ci95", "t", "p"},
    p one-sided for H1 mean > threshold ("greater") or mean < threshold ("less"); None for < 2 seeds or
    zero spread."""
    from scipy import stats
    if alternative not in ("greater", "less"):
        raise CompareError(f"one_sided_t: alternative must be 'greater' or 'less', got {alternative!r}")
    xs = list(by_seed(pairs, what).values())
    r = {"n": len(xs), "mean": float(np.mean(xs)) if xs else None, "sd": None, "ci95": None, "t": None, "p": None,
         "threshold": float(threshold), "alternative": alternative}
    if len(xs) < 2:
        return r
    r["sd"] = float(np.std(xs, ddof=1))
    r["ci95"] = float(stats.t.ppf(0.975, len(xs) - 1) * r["sd"] / math.sqrt(len(xs)))
    if r["sd"] > 0:
        r["t"] = (r["mean"] - threshold) / (r["sd"] / math.sqrt(len(xs)))
        r["p"] = float(stats.t.sf(r["t"], len(xs) - 1) if alternative == "greater" else stats.t.cdf(r["t"], len(xs) - 1))
    return r


def one_sample_t(pairs, mu=0.0, what="values"):
    """Two-sided one-sample t-test of the seeds' values against mu: paired_t of the values against mu on every
    seed, so {"n", "seeds", "mean" (of value - mu), "sd", "ci95", "t", "p" (two-sided), "p_less", "p_greater",
    "wins"}; p None for < 2 seeds or zero spread."""
    pairs = list(pairs)
    return paired_t(pairs, [(s, mu) for s, _ in pairs], what)


def step_ratios(base_pairs, other_pairs, what="step ratio"):
    """Per seed, how many steps a baseline schedule needs to end at the other arm's final val loss, over
    the other arm's steps. base_pairs: [(seed, [(steps, final val loss), ...])], the baseline at two or
    more schedule lengths (each fully decayed; e.g. 100% and 115% of the steps); other_pairs: [(seed,
    (steps, final val loss))]. Through steps_for_loss (non-increasing fit, linear in log-steps, the end
    segment extended and flagged beyond the lengths run). Returns {seed: {"ratio", "saved" (1 - 1/ratio:
    the fraction of the baseline's steps the other arm saves; < 0: it needs more), "needed",
    "extrapolated"}}, for the seeds both sides have."""
    base, other = {}, {}
    for seed, pts in base_pairs:
        if seed in base:
            raise CompareError(f"{what}: seed {seed} given twice (the seed is the unit: one curve per seed)")
        base[seed] = list(pts)
    for seed, pt in other_pairs:
        if seed in other:
            raise CompareError(f"{what}: seed {seed} given twice (the seed is the unit: one run per seed)")
        other[seed] = pt
    out = {}
    for seed in sorted(set(base) & set(other)):
        steps, loss = other[seed]
        need, extra = steps_for_loss(base[seed], loss)
        if need is None:
            continue
        ratio = need / float(steps)
        out[seed] = {"ratio": ratio, "saved": 1.0 - 1.0 / ratio, "needed": need, "extrapolated": extra}
    return out


# ----------------------------------------------------------------------------
# report: CSV, JSON, Markdown

RUN_CSV_COLS = ["arm", "kind", "seed", "lr", "steps", "final_val_loss", "final_val_step",
                "time_to_target_s", "step_to_target", "backward_to_target", "train_time_s", "wall_s", "backward", "tokens", "predict_steps",
                "rho", "rho_steps_needed", "rho_extrapolated", "break_even_rho",
                "decayed_steps_to_target", "decayed_extrapolated", "gns", "tokens_per_step"]
ARM_CSV_COLS = ["arm", "kind", "lr", "n", "best_baseline", "final_val_loss_mean", "final_val_loss_std",
                "reached", "time_to_target_mean", "time_to_target_std", "backward_to_target_mean", "backward_to_target_std", "speedup", "p_final_val", "p_time_to_target",
                "backward_mean", "backward_std", "tokens_mean", "tokens_std", "train_time_s_mean", "train_time_s_std",
                "wall_s_mean", "wall_s_std", "predict_steps_mean", "steps_mean", "gns_mean", "gns_std",
                "rho_mean", "rho_ci95", "rho_n", "rho_extrapolated", "break_even_rho",
                "decayed_steps_mean", "decayed_steps_std", "decayed_n", "decayed_extrapolated", "decayed_vs",
                "decayed_fewer_steps", "p_decayed"]


def _csv_val(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_csv(path, rows, cols):
    with open(path + ".tmp", "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join(_csv_val(r.get(c)) for c in cols) + "\n")
    os.replace(path + ".tmp", path)


def write_text(path, text):
    """text to path, atomically (temp file + rename)"""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def write_json(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def fmt_ms(m, s, prec):
    """'m ± s' with prec decimals; 'm' alone for a single value; '—' for none."""
    if m is None:
        return "—"
    if s is None:
        return f"{m:.{prec}f}"
    return f"{m:.{prec}f} ± {s:.{prec}f}"


def fmt_speedup(x):
    return "—" if x is None else f"{x:.2f}x"


def fmt_p(p):
    return "—" if p is None else f"{p:.3g}"


def markdown_report(cfg, target, arm_rows, run_rows, plots, command, missing, same):
    """report.md's text; same: same_lr_pairs(arm_rows, run_rows)"""
    L = []
    kinds = {r["kind"] for r in arm_rows}
    L.append(f"# Study `{cfg['name']}`: " + ("baseline vs hybrid" if "hybrid" in kinds else "baselines"))
    L.append("")
    if cfg.get("description"):
        L += [cfg["description"], ""]
    L.append(f"Reproduce: `{command}`")
    L.append("")
    L.append(f"- Trainer `{cfg['trainer']}`, flags common to every run: `{' '.join(flags_to_argv(cfg.get('args', {})))}`; "
             f"x1 peak LR {fmt_num(float(cfg['lr']))}; seeds {', '.join(map(str, cfg['seeds']))}.")
    nexp = len(cfg["_arms"]) * len(cfg["seeds"])
    L.append(f"- Finished runs: {len(run_rows)}/{nexp}" + (f" (missing: {', '.join(missing)})" if missing else "") + ".")
    tv = target["value"]
    L.append(f"- Target val loss: {'—' if tv is None else f'{tv:.4f}'} — {target['rule']}.")
    L.append("- Time = the trainer's cumulative training time (`train_time_s`: Full, Predict, Correct steps and the "
             "hybrid bookkeeping; no validation, sampling or checkpointing). Time to target = `train_time_s` at the "
             "first evaluation whose val loss ≤ target (evaluation points only, no interpolation); mean over the "
             "seeds that reached it (`reached`).")
    L.append("- mean ± sample std over seeds; p = two-sided Welch t-test against the best baseline "
             "(final val loss; time to target over the seeds that reached it). Speed-up = best baseline's mean time "
             "to target / the arm's, shown only when every seed of both reached the target. Backward to target = backward "
             "passes (micro batches) done by then: a measure of compute that the shared machine's timing noise does not touch.")
    L.append("")
    L.append("| arm | kind | peak LR | final val loss | time to target (s) | reached | speed-up | p (final val) | "
             "p (time) | backward to target | backward passes | tokens | train time (s) | wall time (s) | predict steps |")
    L.append("|" + "---|" * 15)
    for r in arm_rows:
        name = f"**{r['arm']}**" if r["best_baseline"] else r["arm"]
        L.append(f"| {name} | {r['kind']} | {fmt_num(r['lr'])} | {fmt_ms(r['final_val_loss_mean'], r['final_val_loss_std'], 4)} | "
                 f"{fmt_ms(r['time_to_target_mean'], r['time_to_target_std'], 2)} | {r['reached']}/{r['n']} | "
                 f"{fmt_speedup(r['speedup'])} | "
                 f"{fmt_p(r['p_final_val'])} | {fmt_p(r['p_time_to_target'])} | "
                 f"{fmt_ms(r['backward_to_target_mean'], r['backward_to_target_std'], 0)} | "
                 f"{fmt_ms(r['backward_mean'], r['backward_std'], 0)} | {fmt_ms(r['tokens_mean'], r['tokens_std'], 0)} | "
                 f"{fmt_ms(r['train_time_s_mean'], r['train_time_s_std'], 2)} | {fmt_ms(r['wall_s_mean'], r['wall_s_std'], 1)} | "
                 f"{fmt_ms(r['predict_steps_mean'], None, 1)} |")
    L.append("")
    L.append("The best baseline is in **bold**.")
    L.append("")
    if same:
        L.append("## Against the baseline at the same LR")
        L.append("")
        L.append("Each hybrid arm (and each baseline variant: a baseline arm after the first at its LR and length) minus "
                 "the first baseline of the same peak LR and length, final val loss paired by seed "
                 "(mean, 95% t-interval half-width, two-sided p; wins = seeds where the arm ends lower): what turning "
                 "hybrid mode (or the variant's flags) on costs or gains at an LR nobody tuned for it. **worse**: higher with p < 0.05.")
        L.append("")
        L.append("| arm | baseline | peak LR | arm − baseline | p | wins |")
        L.append("|---|---|---|---|---|---|")
        for r in same:
            if r["mean"] is None:
                continue
            worse = r["p"] is not None and r["p"] < 0.05 and r["mean"] > 0
            ci = "" if r["ci95"] is None else f" ± {r['ci95']:.4f}"
            L.append(f"| {r['arm']} | {r['baseline']} | {fmt_num(r['lr'])} | {r['mean']:+.4f}{ci}{' **worse**' if worse else ''} | "
                     f"{fmt_p(r['p'])} | {r['wins']}/{r['n']} |")
        L.append("")
        L += same_lr_grid(arm_rows, same)
    gns_rows = [r for r in arm_rows if r.get("gns_mean") is not None]
    if gns_rows:
        tps = sorted({rr["tokens_per_step"] for rr in run_rows if rr.get("tokens_per_step")})
        L.append("## The regime: gradient noise scale")
        L.append("")
        L.append(f"Tokens per step: {', '.join(map(str, tps))}. The gradient noise scale B_noise of each run over its "
                 "second half (the ratio of the two estimates summed over the steps past half the run, from each "
                 "step's first-micro-batch and accumulated gradient norms in metrics.jsonl); a step of many more "
                 "tokens than B_noise gains little per token from its size. mean ± std over seeds, in tokens:")
        L.append("")
        L.append("| arm | B_noise, second half (tokens) |")
        L.append("|---|---|")
        for r in gns_rows:
            L.append(f"| {r['arm']} | {fmt_ms(r['gns_mean'], r['gns_std'], 0)} |")
        L.append("")
    rho_rows = [r for r in arm_rows if "rho_mean" in r and r["predict_steps_mean"]]  # arms with Predict steps
    if rho_rows:
        lens = sorted({r["steps"] for r in run_rows if r["kind"] == "matched"})
        L.append("## Value of a Predict step (rho)")
        L.append("")
        L.append(f"Baselines at the same LR with shorter schedules ({', '.join(map(str, lens))} steps and the full length, "
                 "each with its own warm-up and full decay) give final val loss against Full steps (backward passes / "
                 "micro batches per step). Per seed, that curve (made non-increasing, linear in log-steps between "
                 "neighbouring lengths, the end segment extended beyond them) gives the Full steps a baseline needs to "
                 "reach the hybrid run's final val loss; rho = (that - the hybrid's Full steps) / its Predict steps. "
                 "rho > 0: a Predict step is worth something; rho > break-even (the Predict steps' time plus what the "
                 "Correct steps took beyond a Full step, per Predict step, over the mean Full-step time in the hybrid "
                 "run): hybrid saves time. mean ± 95% t-interval over seeds. Where the value test rolled its probe "
                 "runs back (before it passed: they measure, they do not train), rho is ~0 by construction; the "
                 "value test's own estimate is in the hybrid diagnostics below.")
        L.append("")
        L.append("| arm | rho (95% CI) | seeds | extrapolated | break-even rho | final val loss | p (final val) | "
                 "time to target (s) | speed-up |")
        L.append("|" + "---|" * 9)
        for r in rho_rows:
            rho = "—" if r["rho_mean"] is None else (f"{r['rho_mean']:+.3f}" + (f" ± {r['rho_ci95']:.3f}" if r["rho_ci95"] is not None else ""))
            be = "—" if r["break_even_rho"] is None else f"{r['break_even_rho']:.3f}"
            L.append(f"| {r['arm']} | {rho} | {r['rho_n']} | {r['rho_extrapolated']} | {be} | "
                     f"{fmt_ms(r['final_val_loss_mean'], r['final_val_loss_std'], 4)} | {fmt_p(r['p_final_val'])} | "
                     f"{fmt_ms(r['time_to_target_mean'], r['time_to_target_std'], 2)} ({r['reached']}/{r['n']}) | "
                     f"{fmt_speedup(r['speedup'])} |")
        L.append("")
    dec_rows = [r for r in arm_rows if "decayed_steps_mean" in r]
    if dec_rows:
        L.append("## Steps to the target, every run fully decayed")
        L.append("")
        L.append("Time to target above reads a run's first evaluation at or below the target, often late in its own "
                 "LR decay; a run stopped there would not have decayed, so that is not the length of a schedule that "
                 "reaches the target. Here each family (a full-length arm and its shorter schedules at the same LR, "
                 "each with its own warm-up and full decay) gives, per seed, final val loss against Full steps; through "
                 "the same non-increasing fit and log-step interpolation as rho, the schedule length whose final val "
                 "loss is the target. Extrapolated: the target lies outside the lengths run (the end segment extended). "
                 "Fewer steps = 1 − the family's mean / the baseline family's; p = two-sided Welch t-test of the per-seed lengths.")
        L.append("")
        L.append("| family (full-length arm) | kind | lengths (steps) | steps to the target | seeds | extrapolated | "
                 "fewer steps than | p |")
        L.append("|" + "---|" * 8)
        for r in dec_rows:
            names = {r["arm"]} | {a["name"] for a in cfg["_arms"] if a.get("full_arm") == r["arm"]}
            lens = sorted({x["steps"] for x in run_rows if x["arm"] in names})
            vs = "—" if r["decayed_vs"] is None else (
                "—" if r["decayed_fewer_steps"] is None else f"{100 * r['decayed_fewer_steps']:+.1f}% ({r['decayed_vs']})")
            L.append(f"| {r['arm']} | {r['kind']} | {', '.join(map(str, lens))} | "
                     f"{fmt_ms(r['decayed_steps_mean'], r['decayed_steps_std'], 0)} | {r['decayed_n']} | "
                     f"{r['decayed_extrapolated']} | {vs} | {fmt_p(r['p_decayed'])} |")
        L.append("")
    for title, p in plots:
        L.append(f"![{title}]({p})")
        L.append("")
    phases = [ph for ph in ("init", "warmup", "full", "predict", "correct")
              if any(ph in r["phase_time_s"] for r in run_rows)]
    phases += sorted({ph for r in run_rows for ph in r["phase_time_s"]} - set(phases))
    L.append("## Time per phase")
    L.append("")
    L.append("Training seconds spent in each phase (sum of the steps' `ms`), mean over seeds; steps per phase in brackets.")
    L.append("")
    L.append("| arm | " + " | ".join(phases) + " |")
    L.append("|" + "---|" * (len(phases) + 1))
    for a in cfg["_arms"]:
        rs = [r for r in run_rows if r["arm"] == a["name"]]
        if not rs:
            continue
        cells = []
        for ph in phases:
            t, _, _ = mean_std([r["phase_time_s"].get(ph, 0.0) for r in rs])
            n, _, _ = mean_std([r["phase_steps"].get(ph, 0) for r in rs])
            cells.append(f"{t:.2f} ({n:.0f})")
        L.append(f"| {a['name']} | " + " | ".join(cells) + " |")
    L.append("")
    diag = [a for a in cfg["_arms"] if any(r["hybrid"] for r in run_rows if r["arm"] == a["name"])]
    if diag:
        L.append("## Hybrid diagnostics")
        L.append("")
        L.append("From each run's `summary.json` (the trainer's hybrid summary), mean over seeds.")
        L.append("")
        L.append("| arm | " + " | ".join(t for _, t, _ in HYBRID_DIAG) + " |")
        L.append("|" + "---|" * (len(HYBRID_DIAG) + 1))
        for a in diag:
            rs = [r["hybrid"] for r in run_rows if r["arm"] == a["name"] and r["hybrid"]]
            cells = []
            for key, _, prec in HYBRID_DIAG:
                m, _, n = mean_std([h.get(key) for h in rs if isinstance(h.get(key), (int, float))])
                cells.append(fmt_ms(m, None, prec))
            L.append(f"| {a['name']} | " + " | ".join(cells) + " |")
        L.append("")
    L.append("## Runs")
    L.append("")
    L.append("| arm | seed | final val loss (step) | time to target (s) | train time (s) | backward | tokens | predict steps | wall (s) |")
    L.append("|" + "---|" * 9)
    for r in run_rows:
        ttt = "not reached" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.2f} (step {r['step_to_target']})"
        wall = "—" if r["wall_s"] is None else f"{r['wall_s']:.1f}"
        L.append(f"| {r['arm']} | {r['seed']} | {r['final_val_loss']:.4f} ({r['final_val_step']}) | {ttt} | "
                 f"{r['train_time_s']:.2f} | {r['backward']} | {r['tokens']} | {r['predict_steps']} | {wall} |")
    L.append("")
    return "\n".join(L)


# ----------------------------------------------------------------------------
# plots: val loss vs training seconds and vs step, one line per arm (mean over seeds, band = min..max
# over seeds), with a strip below showing where each hybrid arm took Predict steps (its first seed)

def _arm_curve(recs_by_seed):
    """Mean curve over seeds at the evaluation steps every seed has: steps, mean time, mean/min/max val."""
    per_seed = [{st: (t, v) for st, t, v in val_points(recs)} for recs in recs_by_seed]
    common = sorted(set.intersection(*(set(d) for d in per_seed)))
    steps = np.array(common, dtype=np.float64)
    times = np.array([[d[st][0] for st in common] for d in per_seed])
    vals = np.array([[d[st][1] for st in common] for d in per_seed])
    return steps, times.mean(0), vals.mean(0), vals.min(0), vals.max(0)


def _predict_spans(recs, xkey):
    """Merged [x0, x1) spans of Predict steps; a step covers (previous step's x, its x]."""
    recs = sorted((r for r in recs if r["step"] >= 0), key=lambda r: r["step"])
    spans, prev_x = [], 0.0
    for r in recs:
        x = float(r["step"]) if xkey == "step" else float(r.get("train_time_s") or 0.0)
        if r["step"] >= 1 and r.get("phase") == "predict":
            if spans and abs(spans[-1][1] - prev_x) < 1e-12:
                spans[-1][1] = x
            else:
                spans.append([prev_x, x])
        prev_x = x
    return [(a, b - a) for a, b in spans]


def arm_styles(arms):
    import matplotlib.pyplot as plt
    base = [a for a in arms if a["kind"] == "baseline"]
    short = [a for a in arms if a["kind"] == "matched"]
    other = [a for a in arms if a["kind"] not in ("baseline", "matched")]
    st = {}
    for i, a in enumerate(base):
        st[a["name"]] = dict(color=plt.cm.Blues(0.45 + 0.5 * i / max(1, len(base) - 1)), ls="-")
    for i, a in enumerate(short):
        st[a["name"]] = dict(color=plt.cm.Greys(0.35 + 0.4 * i / max(1, len(short) - 1)), ls=":")
    palette = ["tab:red", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    for i, a in enumerate(other):
        st[a["name"]] = dict(color=palette[i % len(palette)], ls="-")
    return st


def plot_study(arms, runs_recs, target, outdir):
    """Two PNGs (x = training seconds, x = step), each with the whole run on the left (every curve and band
    in full) and its last 40% zoomed on the right (a strictly narrower y-range, on the better arms); the
    legend sits right of the plots, outside the data; below each, one row per hybrid arm marking its
    Predict steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    styles = arm_styles(arms)
    curves = {}
    for a in arms:
        seeds = sorted(s for (n, s) in runs_recs if n == a["name"])
        if seeds:
            curves[a["name"]] = _arm_curve([runs_recs[(a["name"], s)] for s in seeds])
    hyb = [a for a in arms if a["kind"] == "hybrid" and a["name"] in curves]
    nstrip = len(hyb)
    out = []
    for xkey, xlabel, fname in (("time", "training time (s, train_time_s)", "val_loss_vs_time.png"),
                                ("step", "step", "val_loss_vs_step.png")):
        fig, axes = plt.subplots(2 if nstrip else 1, 2, sharex="col", figsize=(15, 5.5 + 0.25 * nstrip),
                                 gridspec_kw={"height_ratios": [5, max(0.6, 0.3 * nstrip)]} if nstrip else None,
                                 squeeze=False)
        xmax = max(float((c[1] if xkey == "time" else c[0]).max()) for c in curves.values())
        full_lo = min(float(c[3].min()) for c in curves.values())
        full_hi = max(float(c[4].max()) for c in curves.values())
        if target.get("value") is not None:
            full_lo = min(full_lo, float(target["value"]))
        for col, x0 in ((0, None), (1, 0.6 * xmax)):
            ax = axes[0][col]
            lo, hi = math.inf, -math.inf
            for a in arms:
                if a["name"] not in curves:
                    continue
                steps, t, m, vmin, vmax = curves[a["name"]]
                x = t if xkey == "time" else steps
                n = sum(1 for (nm, _) in runs_recs if nm == a["name"])
                ax.plot(x, m, label=f"{a['name']} (n={n})", lw=1.6, marker="." if col else None, **styles[a["name"]])
                if n > 1:
                    ax.fill_between(x, vmin, vmax, color=styles[a["name"]]["color"], alpha=0.18, lw=0)
                sel = x >= (x0 if x0 is not None else -math.inf)
                if sel.any():
                    lo = min(lo, float(vmin[sel].min()))
                    hi = max(hi, float(vmax[sel].max()))
            if target.get("value") is not None:
                ax.axhline(target["value"], color="k", lw=0.8, ls=":", label=f"target {target['value']:.4f}")
                lo = min(lo, float(target["value"]))
            if x0 is None:
                lo, hi = full_lo, full_hi
            else:  # zoom on the better arms: up to the upper quartile of the final values, narrower than the whole
                q3 = float(np.percentile([c[2][-1] for c in curves.values()], 75))
                hi = min(hi, q3 + 0.5 * (q3 - lo), lo + 0.5 * (full_hi - full_lo))
            if math.isfinite(lo) and hi > lo:
                pad = 0.04 * (hi - lo)
                ax.set_ylim(lo - pad, hi + pad)
            if x0 is not None:
                ax.set_xlim(x0, xmax * 1.02)
            else:
                ax.set_xlim(0, xmax * 1.02)
            ax.grid(alpha=0.3)
            what = "training time" if xkey == "time" else "step"
            ax.set_title(f"val loss vs {what}, whole run (mean over seeds; band = min..max)" if col == 0
                         else "last 40%, zoomed", fontsize=10)
            if col == 0:
                ax.set_ylabel("val loss")
            else:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
            bottom = axes[1][col] if nstrip else ax
            if xkey == "step":
                bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
            if nstrip:
                # a Predict step is a few ms of a run of seconds: draw each mark at least 0.5% of the panel wide
                x_lo, x_hi = ax.get_xlim()
                min_w = 0.005 * (x_hi - x_lo)
                sx = axes[1][col]
                for i, a in enumerate(hyb):
                    seed = min(s for (n, s) in runs_recs if n == a["name"])
                    spans = [(x - max(0.0, min_w - w) / 2, max(w, min_w))
                             for x, w in _predict_spans(runs_recs[(a["name"], seed)], xkey)]
                    sx.broken_barh(spans, (i + 0.1, 0.8), facecolors=styles[a["name"]]["color"], alpha=0.9, lw=0)
                sx.set_yticks([i + 0.5 for i in range(nstrip)])
                sx.set_yticklabels([a["name"] for a in hyb] if col == 0 else [], fontsize=6)
                sx.set_ylim(0, nstrip)
                sx.grid(axis="x", alpha=0.3)
                if col == 0:
                    sx.set_ylabel("Predict steps\n(first seed)", fontsize=7)
            bottom.set_xlabel(xlabel)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, fname), dpi=100, bbox_inches="tight")
        plt.close(fig)
        out.append((f"val loss vs {'training time' if xkey == 'time' else 'step'}", fname))
    return out
