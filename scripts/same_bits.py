#!/usr/bin/env python3
"""
Whether two trainers compute the same bits: a change meant to keep the numerics (a faster kernel, a fused
pass) must leave every number of a run as it was. Builds ./train_gpt2 at two commits (temporary git
worktrees, as scripts/bench_commits.py does), or takes two trainer binaries, runs the same short runs with
each, and compares
  - metrics.jsonl, every field but the timings (ms, train_time_s), line by line (a field only one trainer logs,
    a new one, is left out), and
  - every checkpoint: the weights (model_*.bin) byte for byte, the optimizer state (state_*.bin) byte for byte
    past its 1024-byte header (which holds the run's clock) up to the record of the run's flags, and that
    record flag by flag (a flag only one trainer has, a new one, is left out).
The logged losses alone are not enough: an ulp in one weight can leave every printed number the same for
many steps. The runs (d2 on the shipped data/default shards, B=4 T=64, a checkpoint every 4 steps): fp32,
8 steps; fp32 with gradient accumulation (2 micro batches), 8 steps; bf16, 8 steps; hybrid mode (2 micro
batches), 16 steps, in fp32 and in bf16: the look-ahead in every update, a Predict run at steps 11-12 and its
Correct step; and hybrid mode at 100x the learning rate with 6-step Predict runs, 24 steps, in fp32 and in
bf16, whose Correct step at 17 rolls its run back. A hybrid run that no longer covers what it is for fails. The bf16 runs
need a CPU with native bf16 and oneDNN in both builds (else they are said and skipped), or --bf16-reference:
their products computed by the trainer's test reference (LLMC_BF16_TEST_REFERENCE=1: an SGEMM on the bf16
operands widened), so that everything else of the bf16 path is compared bit for bit on any CPU (both
trainers must know that override). Same machine, same thread count (--threads, default 2).

usage: scripts/same_bits.py A B                       # two commits (HEAD: the checked-out commit, not the tree)
       scripts/same_bits.py --trainers PATH_A PATH_B   # two built trainers
       [--threads 2] [--only fp32] [--bf16-reference] # the runs whose name contains it; bf16 on any CPU
Prints a line per run, exits 0 when every run is the same, 1 when any differs or fails.
"""
import argparse
import contextlib
import glob
import json
import struct
import os
import shutil
import subprocess
import sys
import tempfile

from bench_commits import built_at, git

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = ("ms", "train_time_s")
BASE = ["-e", "d2", "-b", "4", "-t", "64", "-v", "4", "-m", "2", "-s", "0", "-n", "4", "--seed", "5"]
RUNS = [
    ("fp32", ["-x", "8", "--precision", "fp32"]),
    ("fp32, 2 micro batches", ["-x", "8", "--precision", "fp32", "-d", "512"]),
    ("bf16", ["-x", "8", "--precision", "bf16"]),
]
HYBRID = ["-x", "16", "-d", "512", "--hybrid", "--lookahead", "0.5", "--predict-steps", "2", "--full-steps", "2",
          "--hybrid-warmup", "3", "--noise-gate", "0", "--divergence-threshold", "3"]
RUNS += [("hybrid (look-ahead, Predict, Correct)", HYBRID + ["--precision", "fp32"]),
         ("hybrid, bf16", HYBRID + ["--precision", "bf16"])]
# a learning rate 100x the default and 6-step Predict runs: the run at steps 11-16 overshoots, and its Correct
# step (17) rolls it back
ROLLBACK = ["-x", "24", "-d", "512", "-l", "3e-2", "--hybrid", "--lookahead", "0.5", "--predict-steps", "6", "--full-steps", "2",
            "--hybrid-warmup", "3", "--noise-gate", "0", "--divergence-threshold", "0.5"]
RUNS += [("hybrid rollback", ROLLBACK + ["--precision", "fp32"]),
         ("hybrid rollback, bf16", ROLLBACK + ["--precision", "bf16"])]
NO_BF16 = ("has no native bf16", "has no oneDNN")  # the trainer's refusals of --precision bf16


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def metrics(path):
    """metrics.jsonl without the timings, one dict per line"""
    out = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            out.append({k: v for k, v in rec.items() if k not in TIMING})
    return out


def first_byte_diff(a, b, skip=0):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        da, db = fa.read(), fb.read()
    if len(da) != len(db):
        return f"sizes {len(da)} and {len(db)}"
    for i in range(skip, len(da)):
        if da[i] != db[i]:
            return f"byte {i}"
    return None


def state_diff(a, b):
    """None when two state files agree past the header: the bytes up to the record of the run's flags, then
    every flag both records hold (header slot 108: the record's bytes, at the end of the file)"""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        da, db = fa.read(), fb.read()
    ra, rb = (struct.unpack_from("<i", d, 108 * 4)[0] if len(d) >= 1024 else 0 for d in (da, db))
    body_a, body_b = da[1024:len(da) - ra], db[1024:len(db) - rb]
    if len(body_a) != len(body_b):
        return f"sizes {len(da)} and {len(db)} (records of {ra} and {rb} bytes)"
    for i, (x, y) in enumerate(zip(body_a, body_b)):
        if x != y:
            return f"byte {1024 + i}"
    flags_a, flags_b = (dict(line.split(" ", 1) for line in d[len(d) - r:].decode().splitlines() if " " in line)
                        for d, r in ((da, ra), (db, rb)))
    for flag in sorted(set(flags_a) & set(flags_b)):
        if flags_a[flag] != flags_b[flag]:
            return f"the record's {flag}: {flags_a[flag]} and {flags_b[flag]}"
    return None


def compare(dir_a, dir_b):
    """None when the two run folders hold the same numbers, else what differs first"""
    ma, mb = metrics(os.path.join(dir_a, "metrics.jsonl")), metrics(os.path.join(dir_b, "metrics.jsonl"))
    for i, (ra, rb) in enumerate(zip(ma, mb)):
        shared = set(ra) & set(rb)  # a field only one trainer logs (a new one) is left out, as the record's flags are
        must = {"step", "loss"} & (set(ra) | set(rb))  # but not these
        if any(ra[k] != rb[k] for k in shared) or not must <= shared:
            keys = sorted(k for k in shared if ra.get(k) != rb.get(k)) or ["step/loss missing"]
            return f"metrics.jsonl line {i + 1} (step {ra.get('step')}): {', '.join(keys)}"
    if len(ma) != len(mb):
        return f"metrics.jsonl: {len(ma)} and {len(mb)} lines"
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(dir_a, "*.bin")))
    if names != sorted(os.path.basename(p) for p in glob.glob(os.path.join(dir_b, "*.bin"))):
        return "different checkpoint files"
    checked = 0
    for name in names:
        if name.startswith("model_"):
            d = first_byte_diff(os.path.join(dir_a, name), os.path.join(dir_b, name))
        elif name.startswith("state_"):
            d = state_diff(os.path.join(dir_a, name), os.path.join(dir_b, name))
        else:
            continue  # hybrid_*.bin: hybrid mode's state, with its timings
        if d:
            return f"{name}: {d}"
        checked += 1
    if checked == 0:
        return "no checkpoints written"
    return None


def run(trainer, flags, out, threads, reference=False):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("LLMC_BF16_TEST_REFERENCE", None)
    if reference:
        env["LLMC_BF16_TEST_REFERENCE"] = "1"
    return subprocess.run([trainer] + BASE + flags + ["-o", out], cwd=ROOT, env=env, capture_output=True, text=True)


def compare_runs(names, trainers, tmp, a):
    """each run with both trainers, compared; 0 when all are the same, 1 otherwise"""
    print(f"A = {names[0]}, B = {names[1]}; {a.threads} threads; d2 B=4 T=64 on data/default")
    bad = 0
    for i, (label, flags) in enumerate(RUNS):
        if a.only and a.only not in label:
            continue
        dirs = [os.path.join(tmp, f"run{i}_{w}") for w in "ab"]
        bf16 = "bf16" in flags
        if bf16 and a.bf16_reference:
            label += " (reference products)"
        rs = [run(t, flags, d, a.threads, bf16 and a.bf16_reference) for t, d in zip(trainers, dirs)]
        refused = [any(s in r.stderr for s in NO_BF16) for r in rs]
        if bf16 and all(refused):
            print(f"  {label}: skipped ({rs[0].stderr.strip().splitlines()[-1]})")
            continue
        failed = [f"{n} exit {r.returncode}: {r.stderr.strip()[-300:]}" for n, r in zip("AB", rs) if r.returncode != 0]
        if failed:
            print(f"  {label}: FAILED ({'; '.join(failed)})")
            bad += 1
            continue
        d = compare(*dirs)
        if d is None and "--hybrid" in flags:
            recs = [json.loads(x) for x in open(os.path.join(dirs[0], "metrics.jsonl"))]
            phases = [r.get("phase") for r in recs]
            if "predict" not in phases or "correct" not in phases:
                d = "no Predict run and Correct step to compare (the run no longer covers them)"
            elif "rollback" in label and not any(r.get("rollback") == 1 for r in recs):
                d = "no rollback to compare (the run no longer covers one)"
        print(f"  {label}: " + ("same (metrics and checkpoints)" if d is None else f"DIFFERS: {d}"))
        bad += d is not None
    print("same bits" if bad == 0 else f"{bad} run(s) differ or failed")
    return 1 if bad else 0

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("commits", nargs="*", help="A B: two commits")
    p.add_argument("--trainers", nargs=2, metavar=("PATH_A", "PATH_B"), help="two built trainers instead")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", help="the runs whose name contains this (e.g. fp32)")
    p.add_argument("--bf16-reference", action="store_true",
                   help="the bf16 runs with their products by the test reference (any CPU; both trainers must know it)")
    a = p.parse_args()
    if bool(a.trainers) == (len(a.commits) == 2) or (a.commits and len(a.commits) != 2):
        die("give two commits, or --trainers PATH_A PATH_B")
    if a.trainers:
        for t in a.trainers:
            if not os.access(t, os.X_OK):
                die(f"{t}: not an executable trainer")
        names, trainers = a.trainers, contextlib.nullcontext([os.path.abspath(t) for t in a.trainers])
    else:
        names = [git("rev-parse", "--short", c) for c in a.commits]
        trainers = built_at(names, "train_gpt2")
    tmp = tempfile.mkdtemp(prefix="same_bits_")
    try:
        with trainers as paths:
            return compare_runs(names, paths, tmp, a)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
