#!/usr/bin/python3
"""
scripts/vocab_sweep.py — which vocabulary size N gives the lowest val bits per byte in the same CPU time?

The default corpus at learned vocabularies of N tokens (data/prepare_small.sh N: data/smallN) and at
GPT-2's 50257 (data/default), models d2, d4, d6, each trained for the same training time on one thread.
Wall-clock time on a shared 2-core machine is noisy, the loss at a fixed step count is not, so the sweep
separates the two:

  time    short timing runs (one thread, two side by side as in the sweep itself, the configurations
          interleaved, every one measured twice): user+sys CPU ms per training step, from the rusage of
          a 12-step run minus that of a 2-step run (less sensitive to a shared machine than wall time).
  run     one run per (N, depth) with -x = BUDGET / (its ms per step): every run gets the same training
          time, the cosine schedule ends where the budget does, and its losses are deterministic.
  report  table (val bits per byte at the budget) and plot into docs/results/vocab_sweep/.

usage: scripts/vocab_sweep.py [time|run|report|all] [--budget SECONDS] [--jobs 2] [--out results/vocab_sweep]
Everything else is fixed below (B=8, T=128, peak LR 2e-3, 5% warm-up, cosine to 10%, weight decay 0.1).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCABS = [257, 512, 1024, 2048, 4096, 8192, 50257]
DEPTHS = [2, 4, 6]
TIMING_STEPS = 12      # the first 2 steps (cold caches, page faults) are left out of the median
VAL_EVALS = 2          # val loss at the start, half way and at the end of every run,
VAL_BYTES = 40960      # on the first ~40 KB of the val text, whatever the vocabulary: the same text for all


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def data_for(n):
    """(train glob, tokenizer file) of vocabulary n; prepares data/small<n> if it is missing."""
    if n == 50257:
        return "data/default/train_*.bin", "data/gpt2_tokenizer.bin"
    d = f"data/small{n}"
    if not os.path.exists(os.path.join(ROOT, d, "train_000000.bin")):
        subprocess.run(["data/prepare_small.sh", str(n), d], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return f"{d}/train_*.bin", f"{d}/vocab/tokenizer.bin"


def val_batches(n):
    """batches of 8 x 128 tokens that hold about VAL_BYTES of val text at vocabulary n"""
    def tokens(path):
        return (os.path.getsize(os.path.join(ROOT, path)) - 1024) // 2
    data_for(257)
    bytes_per_token = tokens("data/small257/val_000000.bin") / tokens(data_for(n)[0].replace("train_*", "val_000000"))
    return max(1, round(VAL_BYTES / (1024 * bytes_per_token)))


def train(n, depth, steps, outdir, extra):
    """one single-thread run; returns its metrics.jsonl lines and the user+sys CPU seconds it took"""
    train_glob, tok = data_for(n)
    cmd = ["./train_gpt2", "-i", train_glob, "--tokenizer", tok, "-e", f"d{depth}", "-b", "8", "-t", "128",
           "-x", str(steps), "-s", "0", "--precision", "fp32", "-o", outdir] + extra  # the sweep ran in fp32
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(os.path.join(ROOT, outdir + ".log"), "w") as log:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)   # this child's own rusage, whatever runs beside it
        p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {p.returncode} (see {outdir}.log)")
    with open(os.path.join(ROOT, outdir, "metrics.jsonl")) as f:
        lines = [json.loads(x) for x in f]
    return lines, ru.ru_utime + ru.ru_stime


def phase_time(args):
    """CPU ms per step: user+sys of a TIMING_STEPS run minus that of a 2-step run (start-up cancels),
    one thread, two runs side by side; the configurations in order, then reversed."""
    os.makedirs(os.path.join(ROOT, args.out, "timing"), exist_ok=True)
    configs = [(n, d) for d in DEPTHS for n in VOCABS]
    order = configs + configs[::-1]          # interleaved: every configuration early once and late once
    def one(i_cfg):
        i, (n, d) = i_cfg
        out = f"{args.out}/timing/n{n}_d{d}_{i}"
        lines, cpu_long = train(n, d, TIMING_STEPS, out, ["-v", "0", "-l", "1e-3"])
        _, cpu_short = train(n, d, 2, out + "_short", ["-v", "0", "-l", "1e-3"])
        wall = [x["ms"] for x in lines if x.get("step", 0) > 2 and "ms" in x]
        return (n, d, 1000.0 * (cpu_long - cpu_short) / (TIMING_STEPS - 2), statistics.median(wall))
    with ThreadPoolExecutor(args.jobs) as ex:
        res = list(ex.map(one, enumerate(order)))
    timing = {}
    for n, d, cpu_ms, wall_ms in res:
        t = timing.setdefault(f"{n} d{d}", {"cpu_ms": [], "wall_ms": []})
        t["cpu_ms"].append(cpu_ms)
        t["wall_ms"].append(wall_ms)
    summary = {k: {"ms_per_step": statistics.mean(v["cpu_ms"]), "cpu_ms": v["cpu_ms"], "wall_ms": v["wall_ms"]}
               for k, v in timing.items()}
    with open(os.path.join(ROOT, args.out, "timing.json"), "w") as f:
        json.dump({"jobs": args.jobs, "threads": 1, "steps_per_run": TIMING_STEPS,
                   "ms_per_step": "user+sys CPU ms per step, mean of the two measurements", "per_config": summary},
                  f, indent=1)
    for k, v in summary.items():
        print(f"timing {k:>12}: {v['ms_per_step']:8.1f} CPU ms/step ({', '.join(f'{x:.0f}' for x in v['cpu_ms'])}); "
              f"wall {', '.join(f'{x:.0f}' for x in v['wall_ms'])}", flush=True)


def load_timing(args):
    p = os.path.join(ROOT, args.out, "timing.json")
    if not os.path.exists(p):
        fail(f"{p}: no timing yet (run the time phase first)")
    with open(p) as f:
        return json.load(f)["per_config"]


def plan(args, timing):
    runs = []
    for d in DEPTHS:
        for n in VOCABS:
            ms = timing[f"{n} d{d}"]["ms_per_step"]
            steps = max(20, int(args.budget * 1000.0 / ms))
            runs.append({"n": n, "depth": d, "ms_per_step": ms, "steps": steps})
    return runs


def phase_run(args):
    timing = load_timing(args)
    runs = plan(args, timing)
    if args.only is not None:   # in the order given
        want = args.only.split(",")
        runs = sorted([r for r in runs if f"{r['n']}:{r['depth']}" in want], key=lambda r: want.index(f"{r['n']}:{r['depth']}"))
    def one(r):
        out = f"{args.out}/runs/n{r['n']}_d{r['depth']}"
        if os.path.exists(os.path.join(ROOT, out)):   # done, or under way in another sweep process
            return r
        os.makedirs(os.path.join(ROOT, args.out, "runs"), exist_ok=True)
        s = r["steps"]
        extra = ["-l", "2e-3", "-u", str(max(1, s // 20)), "-q", "0.1", "-k", "cosine", "-c", "0.1",
                 "-v", str(max(1, s // VAL_EVALS)), "-m", str(val_batches(r["n"]))]
        t = time.time()
        train(r["n"], r["depth"], s, out, extra)
        print(f"run N={r['n']:>5} d{r['depth']}: {s} steps in {time.time() - t:.0f} s wall", flush=True)
        return r
    with ThreadPoolExecutor(args.jobs) as ex:
        list(ex.map(one, runs))


def phase_report(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    timing = load_timing(args)
    runs = plan(args, timing)
    docs = os.path.join(ROOT, "docs/results/vocab_sweep")
    os.makedirs(docs, exist_ok=True)
    table, curves = {}, {}
    for r in runs:
        out = os.path.join(ROOT, args.out, "runs", f"n{r['n']}_d{r['depth']}")
        try:
            with open(os.path.join(out, "summary.json")) as f:
                s = json.load(f)
            with open(os.path.join(out, "metrics.jsonl")) as f:
                lines = [json.loads(x) for x in f]
        except OSError:
            print(f"report: no run N={r['n']} d{r['depth']} yet", file=sys.stderr)
            continue
        vals = [(x["step"], x["val_bpb"]) for x in lines if x.get("val_bpb") is not None]
        curves[(r["n"], r["depth"])] = [(st * r["ms_per_step"] / 1000.0, b) for st, b in vals]
        table[(r["n"], r["depth"])] = {"steps": r["steps"], "ms": r["ms_per_step"], "bpb": s["val_bpb"],
                                       "val_loss": s["val_loss"], "train_time_s": s["train_time_s"],
                                       "tokens": s["tokens"]}
    rows = ["| N | " + " | ".join(f"d{d}: val bits/byte (steps, ms/step)" for d in DEPTHS) + " |",
            "|---:|" + "---|" * len(DEPTHS)]
    for n in VOCABS:
        cells = []
        for d in DEPTHS:
            t = table.get((n, d))
            cells.append(f"**{t['bpb']:.3f}** ({t['steps']}, {t['ms']:.0f})" if t else "—")
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    best = min(table.items(), key=lambda kv: kv[1]["bpb"]) if table else None
    md = "\n".join(rows) + "\n"
    if best:
        md += f"\nLowest: N = {best[0][0]}, d{best[0][1]}: {best[1]['bpb']:.3f} bits per byte.\n"
    with open(os.path.join(docs, "table.md"), "w") as f:
        f.write(md)
    with open(os.path.join(ROOT, args.out, "timing.json")) as f, open(os.path.join(docs, "timing.json"), "w") as g:
        g.write(f.read())
    with open(os.path.join(docs, "runs.json"), "w") as f:
        json.dump({"budget_s": args.budget, "runs": [dict(n=k[0], depth=k[1], **v) for k, v in sorted(table.items())]},
                  f, indent=1)
    print(md)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax = axes[0]
    for d, mk in zip(DEPTHS, "os^"):
        xs = [n for n in VOCABS if (n, d) in table]
        ax.plot(xs, [table[(n, d)]["bpb"] for n in xs], marker=mk, label=f"d{d}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(VOCABS)
    ax.set_xticklabels([str(n) for n in VOCABS])
    ax.set_xlabel("vocabulary size N")
    ax.set_ylabel("val bits per byte")
    ax.set_title(f"after {args.budget:.0f} CPU-seconds of training steps, one thread")
    ax.legend()
    ax.grid(alpha=0.3)
    ax = axes[1]
    cmap = plt.get_cmap("viridis")
    for i, n in enumerate(VOCABS):
        for d, ls in zip(DEPTHS, ["-", "--", ":"]):
            c = curves.get((n, d))
            if c:
                ax.plot([t for t, _ in c], [b for _, b in c], ls, color=cmap(i / (len(VOCABS) - 1)),
                        label=f"N={n}" if d == DEPTHS[0] else None)
    ax.set_xlabel("training CPU time, s (steps x CPU ms per step)")
    ax.set_ylabel("val bits per byte")
    ax.set_ylim(1.0, 4.0)
    ax.set_title("val curves (solid d2, dashed d4, dotted d6)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(docs, "vocab_sweep.png"), dpi=110)
    print(f"report: {docs}/table.md, runs.json, vocab_sweep.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", nargs="?", default="all", choices=["time", "run", "report", "all"])
    ap.add_argument("--budget", type=float, default=60.0, help="training CPU seconds per run, one thread")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", help="run only these configurations, N:depth,N:depth,... (default: all)")
    ap.add_argument("--out", default="results/vocab_sweep")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(ROOT, "train_gpt2")):
        fail("./train_gpt2 missing: run make -j2 first")
    if args.phase in ("time", "all"):
        phase_time(args)
    if args.phase in ("run", "all"):
        phase_run(args)
    if args.phase in ("report", "all"):
        phase_report(args)


if __name__ == "__main__":
    main()
