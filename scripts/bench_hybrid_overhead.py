#!/usr/bin/python3
"""
scripts/bench_hybrid_overhead.py — `make bench`'s hybrid rows: what hybrid mode costs per step, next to the
baseline in the same run.

1. The trainer, per config: a baseline run, a `--hybrid` run (the look-ahead at beta0 0.5: every step a
   measured step, whose Full time is the look-ahead's whole cost, target <= 1.02x) and a `--hybrid
   --predict-steps 2 --full-steps 4` run (Predict runs along the drift), a `--hybrid gpa` and a `--hybrid
   linefit` run (each method of the table at its frozen defaults: GPA's fused pass every step, Linefit's
   sums every step and its jumps, which replace a step), and a `--ema 0.95` baseline (the average a method
   that keeps an average meets) and the look-ahead keeping the same EMA (timed against that baseline: the EMA
   is folded into its fused pass), same binary, data, seed and flags
   otherwise, interleaved in --rounds rounds (baseline, look-ahead, predict, ..., baseline, ...) so that a slow
   spell of a shared machine falls on every arm alike. From the runs' metrics.jsonl, the median step time
   per phase over the steps after --skip, pooled over rounds: the measured-step time (hybrid: its warm-up
   and Full steps, which both run the fused AdamW + drift + look-ahead pass) against the baseline's Full
   step, the Correct-step time against it (Correct steps that rolled their run back, which run a second
   forward, are counted apart), and the Predict-step time as a fraction of the baseline's Full step.
   Targets: Full and Correct <= 1.03x the baseline (look-ahead, GPA, Linefit: 1.02x), Predict <= 2% of a
   Full step at d6 B8 T256.
   The hybrid runs use --hybrid-warmup 4 --hybrid-cooldown 0 so that a short run has Predict and Correct
   steps to time (the first run waits for 10 measured losses: a config needs more than 12 steps to have
   one); these flags change no per-step work.
2. build/bench_hybrid at each config's depth: the passes alone (plain AdamW, AdamW fused with the drift
   and the look-ahead, Predict steps, the rollback, GPA's and Linefit's steps, both AdamW passes folding
   --ema) in bytes moved and GB/s against a bandwidth probe (a += s*b) in the same run with the same threads.
3. From both: each arm's step as its reference's Full step plus the difference of their update passes, the
   step's extra work timed pass by pass. On a shared machine the Full steps of part 1 move by several per cent
   between runs, more than the 2% a target asks; the passes, timed in turn within one process, move far less.
Prints the OpenBLAS core in use. As scripts/bench.py, every run is on the kernels a user who sets nothing gets:
the variables that override the choice (bench.KERNEL_VARS: OPENBLAS_CORETYPE, ...) are left out, with a note.
--arms times a subset (each with the arm it is timed against), e.g. more rounds of one pair in the same time:
  scripts/bench_hybrid_overhead.py --arms "hybrid lookahead --ema" --rounds 7 --micro ''
usage: scripts/bench_hybrid_overhead.py [--threads 2] [--configs d2:8:64:40,d6:8:256:16] [--rounds 3] [--skip 3]
       [--args "more trainer flags"] [--arms "NAME,..."]
"""
import argparse
import json
import shlex
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench import KERNEL_VARS, default_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# one micro batch per step (these configs) has no look-ahead by default (the gate cannot measure): the
# look-ahead arm asks for the default beta0 of runs whose gate measures
ARMS = [("baseline", []), ("hybrid lookahead", ["--hybrid", "--lookahead", "0.5"]),
        ("hybrid predict", ["--hybrid", "--lookahead", "0.5", "--predict-steps", "2", "--full-steps", "4"]),
        ("hybrid gpa", ["--hybrid", "gpa"]), ("hybrid linefit", ["--hybrid", "linefit"]),
        ("baseline --ema", ["--ema", "0.95"]),
        ("hybrid lookahead --ema", ["--hybrid", "--lookahead", "0.5", "--ema", "0.95"])]
# the arm each is timed against (else the baseline): the look-ahead keeping an EMA meets the baseline keeping it
AGAINST = {"hybrid lookahead --ema": "baseline --ema"}
# the drift family's (the arms with --lookahead); another method refuses them
TIMING_FLAGS = ["--hybrid-warmup", "4", "--hybrid-cooldown", "0"]


# the pass each arm's step runs instead of its reference's, and that reference's, as build/bench_hybrid's JSON
# line names them: the difference is the step's extra work, timed pass by pass
PASS_OF = {"hybrid lookahead": ("fused_ms", "adamw_ms"), "hybrid gpa": ("gpa_ms", "adamw_ms"),
           "hybrid linefit": ("linefit_ms", "adamw_ms"), "baseline --ema": ("adamw_ema_ms", "adamw_ms"),
           "hybrid lookahead --ema": ("fused_ema_ms", "adamw_ema_ms")}


def pass_ratios(full_ms, micro):
    """[(arm, reference's Full ms, extra ms, ratio)]: each arm's step as its reference's Full step plus the
    difference of their update passes (full_ms: {arm: its reference's median Full ms}; micro: the JSON line of
    build/bench_hybrid at the same depth)"""
    out = []
    for name, base in full_ms.items():
        if name not in PASS_OF or base is None or base <= 0:
            continue
        mine, ref = PASS_OF[name]
        if mine not in micro or ref not in micro:
            sys.exit(f"error: build/bench_hybrid's JSON has no {mine if mine not in micro else ref}")
        extra = micro[mine] - micro[ref]
        out.append((name, base, extra, (base + extra) / base))
    return out


def micro_json(text):
    """the last JSON line of build/bench_hybrid's output"""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    sys.exit("error: build/bench_hybrid printed no JSON line")


def against(name):
    """the arm `name` is timed against"""
    return AGAINST.get(name, "baseline")


def run_trainer(trainer, model, B, T, steps, flags, out, env, precision, extra):
    cmd = [trainer, "-e", model, "-b", B, "-t", T, "-x", str(steps), "-v", "0", "-s", "0", "-l", "1e-3", "-o", out,
           "--precision", precision] + extra
    cmd += flags + (TIMING_FLAGS if "--lookahead" in flags else [])
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}")
    return cmd


def phase_times(path, skip, by):
    """ms per phase over the steps after `skip`, appended to `by`; 'measured' pools warmup and full;
    Correct steps that rolled their run back go to 'rolled back'"""
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if m.get("ms") is None or m.get("phase") is None:
                continue
            if m.get("step", 0) <= skip:
                continue
            ph, ms = m["phase"], m["ms"]
            if ph == "correct" and m.get("rollback"):
                ph = "rolled back"
            by.setdefault(ph, []).append(ms)
            if ph in ("warmup", "full"):
                by.setdefault("measured", []).append(ms)
    return by


def medians(by):
    return {k: (statistics.median(v), len(v)) for k, v in by.items()}


def fmt(x, n):
    return f"{x:.2f} ({n})" if x is not None else "-"


def select_arms(spec):
    """ARMS in their order, restricted to the names in `spec` (comma-separated) and the arms they are timed
    against; all of them when `spec` is empty"""
    if not spec:
        return list(ARMS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    known = [name for name, _ in ARMS]
    for n in names:
        if n not in known:
            sys.exit(f"error: flag --arms: no arm '{n}' (arms: {', '.join(known)})")
    want = set(names) | {against(n) for n in names}
    return [(name, flags) for name, flags in ARMS if name in want]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--configs", default="d2:8:64:40,d6:8:256:16", help="model:B:T:steps per run,...")
    p.add_argument("--rounds", type=int, default=3, help="runs per arm, interleaved")
    p.add_argument("--skip", type=int, default=3, help="steps left out of the medians (warm-up)")
    p.add_argument("--trainer", default="./train_gpt2")
    p.add_argument("--precision", default="auto", help="the trainer's --precision (auto: what it picks here)")
    p.add_argument("--micro", default="build/bench_hybrid", help="the passes' bench ('' to skip)")
    p.add_argument("--args", default="", help="more trainer flags for every run, e.g. the study model's data "
                   "and vocabulary: \"-i 'data/small1024/train_*.bin' --vocab data/small1024/vocab\"")
    p.add_argument("--arms", default="", help="only these arms, comma-separated (default: all): "
                   + "; ".join(name for name, _ in ARMS))
    a = p.parse_args()
    arms = select_arms(a.arms)
    env = default_env(dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads)))
    overrides = [f"{k}={os.environ[k]}" for k in KERNEL_VARS if k in os.environ]
    if overrides:
        print(f"note: left out of every run ({' '.join(overrides)}): the trainer picks its own kernels", flush=True)
    env.setdefault("OMP_WAIT_POLICY", "passive")  # as the trainer runs itself
    tmp = tempfile.mkdtemp(prefix="bench_hybrid_")
    rows, micro, by_pass = [], [], []
    try:
        for spec in a.configs.split(","):
            model, B, T, steps = spec.split(":")
            times = {name: {} for name, _ in arms}
            for rnd in range(a.rounds):
                for name, flags in arms:
                    out = os.path.join(tmp, f"{model}_{name.replace(' ', '_').replace('-', '')}_{rnd}")
                    run_trainer(a.trainer, model, B, T, int(steps), flags, out, env, a.precision, shlex.split(a.args))
                    phase_times(os.path.join(out, "metrics.jsonl"), a.skip, times[name])
            res = {name: medians(by) for name, by in times.items()}
            for name, _ in arms:
                print(f"  {model} B={B} T={T} {name} ({a.rounds} runs of {steps} steps): " +
                      ", ".join(f"{k} {v[0]:.2f} ms ({v[1]})" for k, v in sorted(res[name].items())), flush=True)
            for name, _ in arms:
                if name == "baseline" or against(name) not in res:
                    continue  # the reference, or an arm whose reference did not run (it ran as another's)
                base, nbase = res[against(name)].get("full", (None, 0))
                r = res[name]
                full, nf = r.get("measured", (None, 0))
                corr, nc = r.get("correct", (None, 0))
                pred, npr = r.get("predict", (None, 0))
                back, nback = r.get("rolled back", (None, 0))
                label = name if name not in AGAINST else f"{name} (against {against(name)})"
                rows.append((f"{model} B={B} T={T}", label, base, nbase, full, nf, corr, nc, pred, npr, back, nback))
            if a.micro:
                r = subprocess.run([a.micro, model[1:], "9"], env=env, cwd=ROOT, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"error: {a.micro} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
                micro.append(r.stdout)
                refs = {name: res[against(name)].get("full", (None, 0))[0] for name, _ in arms if name != "baseline"}
                by_pass += [(f"{model} B={B} T={T}",) + row for row in pass_ratios(refs, micro_json(r.stdout))]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("| config | arm | baseline Full ms | hybrid Full ms | x baseline | Correct ms | x baseline | "
          "Predict ms | Predict / baseline Full | rolled-back Correct ms | x baseline |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for cfg, name, base, nb, full, nf, corr, nc, pred, npr, back, nback in rows:
        ratio = lambda x: f"{x / base:.3f}x" if x is not None and base else "-"
        frac = lambda x: f"{100.0 * x / base:.2f}%" if x is not None and base else "-"
        print(f"| {cfg} | {name} | {fmt(base, nb)} | {fmt(full, nf)} | {ratio(full)} | {fmt(corr, nc)} | "
              f"{ratio(corr)} | {fmt(pred, npr)} | {frac(pred)} | {fmt(back, nback)} | {ratio(back)} |")
    print(f"\nmedian ms per step (steps counted in brackets) after step {a.skip} of each run, {a.rounds} interleaved "
          f"runs per arm; {a.threads} threads; --precision {a.precision}; hybrid Full: its warm-up and Full steps (the fused AdamW + drift + "
          "look-ahead pass); Correct: those kept, rolled-back ones (a second forward) apart: "
          "targets: Full and Correct <= 1.03x (look-ahead, GPA, Linefit: Full <= 1.02x), Predict <= 2% of a Full step at d6 B8 T256")
    for text in micro:
        print()
        print(text.strip())
    if by_pass:
        print("\n| config | arm | reference's Full ms | its pass − the reference's (ms) | x the reference, from the passes |")
        print("|---|---|---|---|---|")
        for cfg, name, base, extra, ratio in by_pass:
            print(f"| {cfg} | {name} | {base:.2f} | {extra:+.2f} | {ratio:.3f}x |")
        print("\nthe step's extra work timed pass by pass (build/bench_hybrid, each pass in turn): the Full steps "
              "above move by several per cent between runs on a shared machine, the passes by far less; "
              "Linefit's is its recording step (its other steps run plain AdamW's work)")


if __name__ == "__main__":
    main()
