#!/usr/bin/env python3
"""
The step time of train_gpt2 at two commits, measured side by side: each commit's build/bench_gpt2 is built
in a temporary git worktree, then the two run interleaved per config and round, in the order A, B in even
rounds and B, A in odd ones, so that a machine whose speed drifts over minutes slows both alike and a drift
within a round favours neither. Prints, per config, the median over the rounds of each build's median step
ms, the ratio B / A of each round (its two runs side by side) with their median and range, whether the range
is on one side of 1 (resolved) or straddles it (not resolved: the machine's noise is larger than the
difference; more rounds or a quieter machine), and whether the two agree on the last step's loss as
bench_gpt2 prints it (6 decimals: a change meant to keep the numerics must print "same"; the trainer's own
runs, compared by scripts/same_bits.py, are the bit-exact check). Then, per config, where the difference
lies: each phase of a step (bench_gpt2's profile) as B's time minus A's, a share of A's step, per round
(median and range): a change that touches one pass (the optimizer's, say) shows there at that pass's
scale, while the products, which dominate a step, carry most of a VM's noise; a phase whose range holds
0 shows no difference this machine can see.

Use it for a speed change's before/after on one machine (compare only what one run measures); `make
bench` gives the absolute figures of one build. Needs a quiet machine.

usage: scripts/bench_commits.py A B [--configs d12:4:64,d6:8:256] [--precision auto] [--rounds 3]
                                    [--steps 8] [--threads 2]
A, B: commits (anything `git rev-parse` takes; HEAD for the checked-out one, which is built from its
commit, not the working tree). --precision auto (the default): bf16 where the CPU lists avx512_bf16 (AMX CPUs
have it too), fp32 elsewhere: a rule of this script's own, so that both commits time the same precision (the
trainer's --precision auto measures both at start-up and may pick fp32 on such a CPU: pass the precision it
picks, from its start-up table, where they differ).
"""
import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench import run_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(*args):
    r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


def build(commit, where, target):
    git("worktree", "add", "--detach", where, commit)
    r = subprocess.run(["make", "-j2", target], cwd=where, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: building {target} at {commit} failed: {r.stderr.strip()[-500:]}")
    return os.path.join(where, target)


@contextlib.contextmanager
def built_at(commits, target):
    """target (a make target: build/bench_gpt2, train_gpt2) built at each commit in a temporary git worktree;
    yields the binaries' paths, removes the worktrees after (scripts/same_bits.py builds its trainers so too)"""
    tmp = tempfile.mkdtemp(prefix="llmc_commits_")
    trees = [os.path.join(tmp, f"tree{i}") for i in range(len(commits))]
    try:
        yield [build(c, w, target) for c, w in zip(commits, trees)]
    finally:
        for w in trees:
            if os.path.isdir(w):
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", w], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def cpu_has_bf16(cpuinfo="/proc/cpuinfo"):
    """the CPU lists avx512_bf16 (what the trainer's --precision auto looks for)"""
    try:
        with open(cpuinfo) as f:
            return any(line.startswith("flags") and "avx512_bf16" in line.split() for line in f)
    except OSError:
        return False


def resolve_precision(asked, has_bf16):
    """the precision to time: auto is bf16 where the CPU has it, else fp32; bf16 asked on a CPU without it is an
    error before anything is built"""
    if asked == "auto":
        return "bf16" if has_bf16 else "fp32"
    if asked == "bf16" and not has_bf16:
        sys.exit("error: --precision bf16: this CPU has no native bf16 (avx512_bf16 or AMX); time fp32 here")
    return asked


def step(binary, spec, a, env):
    depth, B, T = spec[0][1:], spec[1], spec[2]
    d = run_json([binary, depth, B, T, str(a.steps), "2", "0", a.precision], env)
    return d["median_ms"], d["loss"], d.get("phases_ms", {})


def round_order(r):
    """the builds in the order round r runs them: A first in even rounds, B first in odd ones"""
    return ("a", "b") if r % 2 == 0 else ("b", "a")


def ratios(ms_a, ms_b):
    """per-round B / A (each round's two runs side by side): (median, lowest, highest, resolved), resolved when
    every round's ratio is on the same side of 1"""
    rs = [b / a for a, b in zip(ms_a, ms_b)]
    return statistics.median(rs), min(rs), max(rs), max(rs) < 1.0 or min(rs) > 1.0


def phase_shares(steps_a, phases_a, phases_b):
    """per phase (those both builds profile): (median, lowest, highest) over rounds of (B's phase ms - A's) /
    A's mean step ms in that round, in per cent of a step; the profile's phases are means over the timed
    steps, so each round's differences add up to B's mean step minus A's"""
    out = {}
    names = [n for n in phases_a[0] if all(n in p for p in phases_a + phases_b)]
    for n in names:
        d = [100.0 * (pb[n] - pa[n]) / s for s, pa, pb in zip(steps_a, phases_a, phases_b)]
        out[n] = (statistics.median(d), min(d), max(d))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--configs", default="d12:4:64,d12:8:256,d6:8:256")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=8, help="steps per run, the first 2 not timed")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    if a.rounds < 1 or a.steps < 3:
        sys.exit("error: --rounds must be >= 1 and --steps >= 3")
    a.precision = resolve_precision(a.precision, cpu_has_bf16())
    specs = []
    for s in a.configs.split(","):
        parts = s.split(":")
        if len(parts) != 3 or not parts[0].startswith("d") or not all(x.isdigit() for x in [parts[0][1:]] + parts[1:]):
            sys.exit(f"error: --configs: '{s}' is not dN:B:T")
        specs.append(parts)
    ca, cb = git("rev-parse", "--short", a.a), git("rev-parse", "--short", a.b)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    with built_at([ca, cb], "build/bench_gpt2") as (ba, bb):
        ms = {(i, w): [] for i in range(len(specs)) for w in "ab"}
        phases = {(i, w): [] for i in range(len(specs)) for w in "ab"}
        mean_step = {i: [] for i in range(len(specs))}
        loss = {}
        binaries = {"a": ba, "b": bb}
        for r in range(a.rounds):
            for i, spec in enumerate(specs):
                for w in round_order(r):
                    t, l, ph = step(binaries[w], spec, a, env)
                    ms[(i, w)].append(t)
                    phases[(i, w)].append(ph)
                    if w == "a":
                        mean_step[i].append(sum(ph.values()) or t)
                    loss[(i, w)] = l
            print(f"round {r + 1} of {a.rounds} done", file=sys.stderr, flush=True)
        print(f"median step ms over {a.rounds} interleaved rounds of {a.steps} steps ({a.steps - 2} timed), "
              f"{a.precision}, {a.threads} threads; A = {ca}, B = {cb}\n")
        print("| config | rows B·T | A ms | B ms | B / A (median of rounds) | rounds' range | loss |")
        print("|---|---|---|---|---|---|---|")
        for i, (d, B, T) in enumerate(specs):
            ma, mb = statistics.median(ms[(i, "a")]), statistics.median(ms[(i, "b")])
            med, lo, hi, resolved = ratios(ms[(i, "a")], ms[(i, "b")])
            same = "same" if loss[(i, "a")] == loss[(i, "b")] else f"{loss[(i, 'a')]} vs {loss[(i, 'b')]}"
            rng = f"{lo:.3f}-{hi:.3f}" + ("" if resolved or a.rounds < 2 else " (not resolved)")
            print(f"| {d} B={B} T={T} | {int(B) * int(T)} | {ma:.0f} | {mb:.0f} | {med:.3f} | {rng} | {same} |")
        if not all(phases[(i, w)][0] for i in range(len(specs)) for w in "ab"):
            return  # a build whose bench_gpt2 has no profile
        print(f"\nwhere the difference lies: per phase, B's ms minus A's as a % of A's step, median over the "
              f"{a.rounds} rounds [lowest, highest]\n")
        names = list(phase_shares(mean_step[0], phases[(0, "a")], phases[(0, "b")]))
        print("| config | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for i, (d, B, T) in enumerate(specs):
            sh = phase_shares(mean_step[i], phases[(i, "a")], phases[(i, "b")])
            cells = [f"{sh[n][0]:+.2f} [{sh[n][1]:+.2f}, {sh[n][2]:+.2f}]" if n in sh else "—" for n in names]
            print(f"| {d} B={B} T={T} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
