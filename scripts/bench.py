#!/usr/bin/python3
"""
scripts/bench.py — `make bench`: tokens/s and MFU of full training steps of train_gpt2.c next to the PyTorch
reference (scripts/train_gpt2.py --bench, same model, batch and tokens) at its best, and the OpenBLAS SGEMM
peak (2048^3; the best of a measurement before and one after), all in this one run, for d12 4x64, d12 8x256
and d6 8x256. Then where train_gpt2's step time goes (llmc/cpu_profile.h).
PyTorch at its best: the same OpenBLAS kernel as ours (OPENBLAS_CORETYPE set to the core our programs run
on, unless set already) and the faster of torch threads x OpenBLAS threads N x N and 1 x N (1 x 1 leaves a
core idle; 1 x N was PyTorch's fastest on 2 cores), --torch-steps steps each (the slow part of the run).
Random-init models and random tokens (speed only). FLOPs/token = 6N + 6LCT; MFU = tok/s * FLOPs/token / peak.
usage: scripts/bench.py [--threads 2] [--steps 6] [--warmup 2] [--torch-steps 4]
                        [--configs d12:4:64,d12:8:256,d6:8:256] [--no-torch]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PHASES = ["gemm", "attention", "layernorm", "gelu", "crossentropy", "encoder", "grad_norm",
          "adamw", "other"]


def run_json(cmd, env):
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def torch_best(model, B, T, steps, threads, env, core):
    """the fastest PyTorch run over the thread settings; returns (best, all runs with their labels)"""
    tenv = dict(env)
    if "OPENBLAS_CORETYPE" not in os.environ and core:
        tenv["OPENBLAS_CORETYPE"] = core
    settings = sorted({(threads, threads), (1, threads)}, reverse=True)
    runs = []
    for th, blas in settings:
        e = dict(tenv, OMP_NUM_THREADS=str(th), OPENBLAS_NUM_THREADS=str(blas))
        r = run_json(["/usr/bin/python3", "scripts/train_gpt2.py", "--bench", str(steps), "-e", model, "-b", B,
                      "-t", T, "--threads", str(th)], e)
        r["label"] = f"{th}t/{blas}b"
        runs.append(r)
    return max(runs, key=lambda r: r["tok_s"]), runs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--torch-steps", type=int, default=4, help="PyTorch steps per setting (its first 2 are warm-up)")
    p.add_argument("--configs", default="d12:4:64,d12:8:256,d6:8:256")
    p.add_argument("--no-torch", action="store_true", help="train_gpt2 and the SGEMM peak only")
    a = p.parse_args()
    t_start = time.time()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    sg = run_json(["build/bench_sgemm", "2048", "5"], env)
    peak = sg["gflops"]
    print(f"BLAS: {sg['blas']}", flush=True)
    print(f"OpenBLAS SGEMM 2048^3, {a.threads} threads: {peak:.1f} GFLOP/s", flush=True)
    rows, profiles = [], []
    for spec in a.configs.split(","):
        model, B, T = spec.split(":")
        depth = model[1:]
        c = run_json(["build/bench_gpt2", depth, B, T, str(a.steps), str(a.warmup), str(peak)], env)
        profiles.append((f"{model} B={B} T={T}", c))
        if a.no_torch:
            best, runs = None, []
        else:
            best, runs = torch_best(model, B, T, a.torch_steps, a.threads, env, sg.get("core"))
        rows.append([f"{model} B={B} T={T}", c["tok_s"], c["mfu_pct"], best, c["flops_per_token"]])
        pt = " / ".join("%.1f (%s)" % (r["tok_s"], r["label"]) for r in runs)
        print(f"  {rows[-1][0]}: train_gpt2 {c['tok_s']:.1f} tok/s ({c['mfu_pct']:.1f}%)"
              + (f", PyTorch {pt}" if runs else ""), flush=True)
    # the peak again at the end: on a shared machine the best of the two is the closer estimate
    peak_end = run_json(["build/bench_sgemm", "2048", "5"], env)["gflops"]
    print(f"OpenBLAS SGEMM 2048^3 again: {peak_end:.1f} GFLOP/s", flush=True)
    if peak_end > peak:
        for r in rows:
            r[2] *= peak / peak_end
        peak = peak_end
    print()
    print("| config | train_gpt2 tok/s | MFU (% of SGEMM peak) | PyTorch best tok/s (threads torch/BLAS) "
          "| PyTorch MFU | train_gpt2 / PyTorch |")
    print("|---|---|---|---|---|---|")
    for name, ct, cm, best, fpt in rows:
        if best is None:
            print(f"| {name} | {ct:.1f} | {cm:.1f}% | - | - | - |")
            continue
        pm = 100.0 * best["tok_s"] * best["flops_per_token"] / (peak * 1e9)
        print(f"| {name} | {ct:.1f} | {cm:.1f}% | {best['tok_s']:.1f} ({best['label']}) | {pm:.1f}% "
              f"| {ct / best['tok_s']:.2f}x |")
    print(f"\nSGEMM peak {peak:.1f} GFLOP/s ({a.threads} threads); medians over {a.steps - a.warmup} steps "
          f"after {a.warmup} warm-up; FLOPs/token = 6N + 6LCT; {sg['blas']}; "
          f"PyTorch with OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', sg.get('core'))}")
    print("\nwhere train_gpt2's step time goes (ms per step, mean over the timed steps; % of the step):\n")
    print("| config | step ms | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for name, c in profiles:
        ph, total = c["phases_ms"], c["mean_ms"]
        cells = " | ".join(f"{ph[k]:.0f} ({100.0 * ph[k] / total:.0f}%)" for k in PHASES)
        print(f"| {name} | {total:.0f} | {cells} |")
    print(f"\nwait policy: OMP_WAIT_POLICY={profiles[0][1]['wait_policy'] or '(unset)'}"
          f" GOMP_SPINCOUNT={profiles[0][1]['spincount'] or '(unset)'}; bench took {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
