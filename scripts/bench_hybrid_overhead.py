#!/usr/bin/python3
"""
scripts/bench_hybrid_overhead.py — `make bench`'s hybrid rows: what hybrid mode costs per step, next to the
baseline in the same run.

1. The trainer, per config: a baseline run, a `--hybrid` run (ema direction), a `--hybrid --direction
   adam` run and a `--hybrid --lookahead 0.5` run (every step a measured step: its Full time is the
   look-ahead's whole cost, target <= 1.02x), same binary, data, seed and flags otherwise, interleaved in --rounds rounds (baseline, ema,
   adam, baseline, ...) so that a slow spell of a shared machine falls on every arm alike. From the
   runs' metrics.jsonl, the median step time per phase over the steps after --skip, pooled over rounds:
   the Full-step time (hybrid: its warm-up and Full steps, which both run the fused AdamW + statistics
   pass) against the baseline's, the Correct-step time against it, and the Predict-step time as a
   fraction of the baseline's Full step. The value test's work (hybrid/value.h; a step's "probe_ms": its
   probe forwards, and before the test has passed the undo of a probe run and the Correct step's second
   forward) is taken out of the Predict and Correct times and shown in a column of its own, per probed
   run: it is the test's price, paid on probed runs only. Targets: Full and Correct <= 1.03x the
   baseline (look-ahead: 1.02x), Predict <= 2% of a Full step at d6 B8 T256.
   The hybrid runs use --hybrid-warmup 4 --confidence-threshold 0 so that a short run has Predict and
   Correct steps to time; these flags change no per-step work.
2. build/bench_hybrid at each config's depth: the passes alone (plain AdamW, AdamW fused with the
   statistics, Predict steps) in bytes moved and GB/s against a bandwidth probe (a += s*b) in the same
   run with the same threads.
Prints the OpenBLAS core in use (set OPENBLAS_CORETYPE where Debian's OpenBLAS picks a slow kernel).
usage: scripts/bench_hybrid_overhead.py [--threads 2] [--configs d2:8:64:40,d6:8:256:10] [--rounds 3] [--skip 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ARMS = [("baseline", []), ("hybrid ema", ["--hybrid"]), ("hybrid adam", ["--hybrid", "--direction", "adam"]),
        ("hybrid lookahead", ["--hybrid", "--lookahead", "0.5"])]
TIMING_FLAGS = ["--hybrid-warmup", "4", "--confidence-threshold", "0"]


def run_trainer(trainer, model, B, T, steps, flags, out, env):
    cmd = [trainer, "-e", model, "-b", B, "-t", T, "-x", str(steps), "-v", "0", "-s", "0", "-l", "1e-3", "-o", out]
    cmd += flags + (TIMING_FLAGS if flags else [])
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}")
    return cmd


def phase_times(path, skip, by, probe_runs):
    """ms per phase over the steps after `skip`, less their probe forwards, appended to `by`;
    'measured' pools warmup and full. probe_runs[0] += the value test's ms over the whole run,
    probe_runs[1] += its probed runs (a short bench run never passes the test: every run is probed,
    one Correct step each)"""
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if m.get("ms") is None or m.get("phase") is None:
                continue
            ph, probe = m["phase"], m.get("probe_ms") or 0.0
            probe_runs[0] += probe
            probe_runs[1] += ph == "correct"
            if m.get("step", 0) <= skip:
                continue
            ms = m["ms"] - probe
            by.setdefault(ph, []).append(ms)
            if ph in ("warmup", "full"):
                by.setdefault("measured", []).append(ms)
    return by


def medians(by):
    return {k: (statistics.median(v), len(v)) for k, v in by.items()}


def fmt(x, n):
    return f"{x:.2f} ({n})" if x is not None else "-"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--configs", default="d2:8:64:40,d6:8:256:10", help="model:B:T:steps per run,...")
    p.add_argument("--rounds", type=int, default=3, help="runs per arm, interleaved")
    p.add_argument("--skip", type=int, default=3, help="steps left out of the medians (warm-up)")
    p.add_argument("--trainer", default="./train_gpt2")
    p.add_argument("--micro", default="build/bench_hybrid", help="the passes' bench ('' to skip)")
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    env.setdefault("OMP_WAIT_POLICY", "passive")  # as the trainer runs itself
    tmp = tempfile.mkdtemp(prefix="bench_hybrid_")
    rows, micro = [], []
    try:
        for spec in a.configs.split(","):
            model, B, T, steps = spec.split(":")
            times = {name: {} for name, _ in ARMS}
            probe_runs = {name: [0.0, 0] for name, _ in ARMS}
            for rnd in range(a.rounds):
                for name, flags in ARMS:
                    out = os.path.join(tmp, f"{model}_{name.replace(' ', '_')}_{rnd}")
                    cmd = run_trainer(a.trainer, model, B, T, int(steps), flags, out, env)
                    phase_times(os.path.join(out, "metrics.jsonl"), a.skip, times[name], probe_runs[name])
            res = {name: medians(by) for name, by in times.items()}
            for name, (ms, n) in probe_runs.items():
                if n:
                    res[name]["probe"] = (ms / n, n)
            for name, flags in ARMS:
                print(f"  {model} B={B} T={T} {name} ({a.rounds} runs of {steps} steps): " +
                      ", ".join(f"{k} {v[0]:.2f} ms ({v[1]})" for k, v in sorted(res[name].items())), flush=True)
            base = res["baseline"].get("full", (None, 0))[0]
            for name, _ in ARMS[1:]:
                r = res[name]
                full, nf = r.get("measured", (None, 0))
                corr, nc = r.get("correct", (None, 0))
                pred, npr = r.get("predict", (None, 0))
                probe, npb = r.get("probe", (None, 0))
                rows.append((f"{model} B={B} T={T}", name, base, res["baseline"]["full"][1], full, nf, corr, nc,
                             pred, npr, probe, npb))
            if a.micro:
                r = subprocess.run([a.micro, model[1:], "9"], env=env, cwd=ROOT, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"error: {a.micro} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
                micro.append(r.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("| config | arm | baseline Full ms | hybrid Full ms | x baseline | Correct ms | x baseline | "
          "Predict ms | Predict / baseline Full | value test ms per probed run | per run / baseline Full |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for cfg, name, base, nb, full, nf, corr, nc, pred, npr, probe, npb in rows:
        ratio = lambda x: f"{x / base:.3f}x" if x is not None and base else "-"
        frac = lambda x: f"{100.0 * x / base:.2f}%" if x is not None and base else "-"
        print(f"| {cfg} | {name} | {fmt(base, nb)} | {fmt(full, nf)} | {ratio(full)} | {fmt(corr, nc)} | "
              f"{ratio(corr)} | {fmt(pred, npr)} | {frac(pred)} | {fmt(probe, npb)} | {frac(probe)} |")
    print(f"\nmedian ms per step (steps counted in brackets) after step {a.skip} of each run, {a.rounds} interleaved "
          f"runs per arm; {a.threads} threads; Predict and Correct without the value test's work (its probe "
          "forwards on probed runs, and before the test has passed the undo of each probe run), shown as its "
          "mean per probed run over every step of the runs (probed runs counted in brackets): "
          "targets: Full and Correct <= 1.03x (look-ahead: Full <= 1.02x), Predict <= 2% of a Full step at d6 B8 T256")
    for text in micro:
        print()
        print(text.strip())


if __name__ == "__main__":
    main()
