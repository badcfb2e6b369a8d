#!/usr/bin/python3
"""
scripts/bench.py — `make bench`: tokens/s and MFU of full training steps of train_gpt2.c next to the PyTorch
reference (scripts/train_gpt2.py --bench, same model, batch and tokens) at its best, and the OpenBLAS SGEMM
peak (2048^3), all in this one run, for d12 4x64, d12 8x256 and d6 8x256. Then where train_gpt2's step time
goes (llmc/cpu_profile.h).
The peak is measured at the start, at the end, and right before and after each config's timed run: each
row's MFU (and floors) is against the better of the two probes beside it, the peak the machine showed while
that row ran. On a shared machine the peak moves (a VM whose cores another tenant also drives: one
avx512_bf16 Xeon read its bf16 peak at about 500 and about 1,000 GFLOP/s minutes apart), and when the probes of
one run differ by more than PEAK_SPREAD the bench says so: its MFU figures are then a property of the
machine's load as much as of the code, and only ratios measured side by side (bf16 / fp32 in one row,
scripts/bench_commits.py) compare.
The kernels are those a user gets who sets nothing: every program runs without the variables that override
the choice our programs make (llmc/cpu_blas.h: OPENBLAS_CORETYPE, and its marker and test hook) or oneDNN's
(ONEDNN_MAX_CPU_ISA, DNNL_MAX_CPU_ISA). Where the environment sets one, the bench says so and measures the
SGEMM (and bf16) peak under it too, next to the default's; the tables stay on the default.
PyTorch at its best: the same OpenBLAS kernel as ours (OPENBLAS_CORETYPE set to the core our programs run
on) and the faster of torch threads x OpenBLAS threads N x N and 1 x N (1 x 1 leaves a
core idle; 1 x N was PyTorch's fastest on 2 cores), --torch-steps steps each (the slow part of the run).
Random-init models and random tokens (speed only). FLOPs/token = 6N + 6LCT; MFU = tok/s * FLOPs/token / peak.
bf16 (where train_gpt2 was built with oneDNN): the same configs with --precision bf16 right after each fp32
run, their MFU against the bf16 matmul peak (oneDNN, 2048^3, fp32 out, same threads, the better of B read as
it is and B packed as the trainer packs its weights: bench_sgemm ... bf16),
and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) at its best thread setting as their peer. The
bf16 rows also give each step's MFU against the probes bench_gpt2 runs itself right before and after that
step (the better of the two), the median over the steps: the peak paired with each step's own seconds.
Each profile row also against its floor: per phase, max(the bytes it must move / the memory bandwidth, its
products' FLOPs / the matmul peak of its precision), the bandwidth measured in this run too (bench_sgemm ...
bandwidth: a += s*b, before and after, the better counts), the bytes and FLOPs from bench_gpt2
(phase_floors); docs/benchmark.md, "Against the floor".
usage: scripts/bench.py [--threads 2] [--steps 6] [--warmup 2] [--torch-steps 4]
                        [--configs d12:4:64,d12:8:256,d6:8:256] [--no-torch] [--no-bf16] [--peaks-only] [--sgemm-n 2048]
                        [--bw-mib 0]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# what overrides the kernel choice: OpenBLAS's core (llmc/cpu_blas.h sets it only where unset; its re-exec
# marker and test hook, inherited, stop the choice too), oneDNN's ISA cap (the bf16 matmuls) and the test
# reference that replaces oneDNN's products (llmc/cpu_dnnl.h); the Makefile's BENCH_ENV lists the same for
# the benches it runs itself
KERNEL_VARS = ["OPENBLAS_CORETYPE", "LLMC_BLAS_REEXEC", "LLMC_BLAS_TEST_CORE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
               "LLMC_BF16_TEST_REFERENCE", "LLMC_PRECISION_TEST_PROBE"]
PEAK_SPREAD = 1.15  # the probes' max / min above which a run's MFU is flagged as the machine's load, not the code's
PHASES = ["gemm", "attention", "layernorm", "gelu", "crossentropy", "encoder", "grad_norm",
          "adamw", "other"]


def run_json(cmd, env):
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_json_or_none(cmd, env):
    """run_json, or None when the command fails (bf16 where the build or the CPU has none)"""
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"note: {' '.join(cmd)}: {r.stderr.strip()[-200:]}", flush=True)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def vs_floor(ms, floor_ms):
    """a profile cell against its floor: "time / floor (ratio x)", both in ms (two digits at least)"""
    fmt = lambda x: f"{x:.1f}" if x >= 0.95 else f"{x:.2g}"
    return f"{fmt(ms)} / {fmt(floor_ms)} ({ms / floor_ms:.1f}x)" if floor_ms > 0 else f"{fmt(ms)} / - (-)"


def peak_spread_note(name, probes):
    """one line when a peak's probes in this run differ by more than PEAK_SPREAD (max / min), else None"""
    lo, hi = min(probes), max(probes)
    if lo <= 0 or hi / lo <= PEAK_SPREAD:
        return None
    return (f"warning: the {name} peak moved during this run: {lo:.1f} to {hi:.1f} GFLOP/s over {len(probes)} probes "
            f"({hi / lo:.2f}x; a shared machine's load). Each row's MFU is against the peak measured beside it, but "
            f"MFU from this run is not a property of the code; compare ratios measured side by side.")


def local_peak(c, pk):
    """a bench_gpt2 result against the peak pk measured beside it: MFU = tok/s * FLOPs/token / pk"""
    c["peak"] = pk
    c["mfu_pct"] = 100.0 * c["tok_s"] * c["flops_per_token"] / (pk * 1e9)


def default_env(env):
    """env without the variables that override the kernel choice: the kernels of a user who sets nothing"""
    return {k: v for k, v in env.items() if k not in KERNEL_VARS}


def auto_pick(depth, B, T, env):
    """what ./train_gpt2 --precision auto picks at this config (one step; its start-up table): the precision,
    and its probe's fp32 and bf16 ms of a step's linear products and the probe's own seconds (None where it
    did not measure: no native bf16 or no oneDNN)"""
    r = subprocess.run(["./train_gpt2", "-e", f"d{depth}", "-b", B, "-t", T, "-x", "1", "-v", "0", "-s", "0"], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench: ./train_gpt2 --precision auto at d{depth} B={B} T={T} failed: {r.stderr.strip()}")
    pick = re.search(r"^\| precision +\| (\S+) \((.*?)\) *\|", r.stdout, re.M)
    probe = re.search(r"^\| auto: products +\| fp32 ([\d.]+), bf16 ([\d.]+) ms/step \(probe ([\d.]+) s\)", r.stdout, re.M)
    return {"precision": pick.group(1), "why": pick.group(2),
            "probe": tuple(float(x) for x in probe.groups()) if probe else None}


def torch_best(model, B, T, steps, threads, env, core, autocast="off"):
    """the fastest PyTorch run over the thread settings; returns (best, all runs with their labels)"""
    tenv = dict(env)
    if core:
        tenv["OPENBLAS_CORETYPE"] = core
    settings = sorted({(threads, threads), (1, threads)}, reverse=True)
    runs = []
    for th, blas in settings:
        e = dict(tenv, OMP_NUM_THREADS=str(th), OPENBLAS_NUM_THREADS=str(blas))
        r = run_json(["/usr/bin/python3", "scripts/train_gpt2.py", "--bench", str(steps), "-e", model, "-b", B,
                      "-t", T, "--threads", str(th), "--autocast", autocast], e)
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
    p.add_argument("--no-bf16", action="store_true", help="fp32 rows only")
    p.add_argument("--peaks-only", action="store_true", help="the kernels and their peaks, then stop")
    p.add_argument("--sgemm-n", type=int, default=2048, help="the peaks' matrix size (n^3)")
    p.add_argument("--bw-mib", type=int, default=0, help="the bandwidth probe's arrays, MiB each (0: 4x the "
                   "last-level cache, at least 256)")
    a = p.parse_args()
    t_start = time.time()
    base = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    env = default_env(base)  # every measured run below: the kernels the trainer picks when nothing is set
    overrides = [f"{k}={os.environ[k]}" for k in KERNEL_VARS if k in os.environ]
    n = str(a.sgemm_n)
    sg = run_json(["build/bench_sgemm", n, "5"], env)
    peak = sg["gflops"]
    print(f"BLAS: {sg['blas']}: the trainer's own choice (nothing set)", flush=True)
    print(f"OpenBLAS SGEMM {n}^3, {a.threads} threads: {peak:.1f} GFLOP/s", flush=True)
    sg16 = None if a.no_bf16 else run_json_or_none(["build/bench_sgemm", n, "5", "bf16"], env)
    peak16 = sg16["gflops"] if sg16 else 0.0
    if sg16:
        print(f"{sg16['blas']} {n}^3, {a.threads} threads: {peak16:.1f} GFLOP/s (B as it is "
              f"{sg16.get('gflops_plain', peak16):.1f}, B packed {sg16.get('gflops_packed', peak16):.1f})", flush=True)
    bw = run_json(["build/bench_sgemm", str(a.bw_mib), "5", "bandwidth"], env)
    print(f"memory bandwidth (a += s*b over 2 x {bw['mib']} MiB, {a.threads} threads): {bw['gbs']:.1f} GB/s", flush=True)
    over, over16 = None, None
    if overrides:  # what this environment would run on instead: measured, reported, not used below
        print(f"the environment overrides the kernel choice ({' '.join(overrides)}); measured too, but every run "
              f"below uses the trainer's own choice:", flush=True)
        over = run_json(["build/bench_sgemm", n, "5"], base)
        print(f"  override: BLAS: {over['blas']}, SGEMM {n}^3: {over['gflops']:.1f} GFLOP/s", flush=True)
        over16 = None if not sg16 else run_json_or_none(["build/bench_sgemm", n, "5", "bf16"], base)
        if over16:
            print(f"  override: {over16['blas']} {n}^3: {over16['gflops']:.1f} GFLOP/s", flush=True)
    if a.peaks_only:
        return
    rows, rows16, profiles, autos = [], [], [], []
    probes, probes16 = [peak], [peak16] if sg16 else []
    probe = lambda: run_json(["build/bench_sgemm", n, "5"], env)["gflops"]
    probe16 = lambda: run_json(["build/bench_sgemm", n, "5", "bf16"], env)["gflops"]
    for spec in a.configs.split(","):
        model, B, T = spec.split(":")
        depth = model[1:]
        before = probe()
        c = run_json(["build/bench_gpt2", depth, B, T, str(a.steps), str(a.warmup), str(before)], env)
        after = probe()
        probes += [before, after]
        local_peak(c, max(before, after))
        profiles.append((f"{model} B={B} T={T}", c))
        if a.no_torch:
            best, runs = None, []
        else:
            best, runs = torch_best(model, B, T, a.torch_steps, a.threads, env, sg.get("core"))
        rows.append([f"{model} B={B} T={T}", c["tok_s"], c["mfu_pct"], best, c["flops_per_token"], c["peak"]])
        pt = " / ".join("%.1f (%s)" % (r["tok_s"], r["label"]) for r in runs)
        print(f"  {rows[-1][0]}: train_gpt2 {c['tok_s']:.1f} tok/s ({c['mfu_pct']:.1f}%)"
              + (f", PyTorch {pt}" if runs else ""), flush=True)
        if sg16:
            before = probe16()
            c16 = run_json(["build/bench_gpt2", depth, B, T, str(a.steps), str(a.warmup), str(before), "bf16"], env)
            after = probe16()
            probes16 += [before, after]
            local_peak(c16, max(before, after))
            profiles.append((f"{model} B={B} T={T} bf16", c16))
            if a.no_torch:
                best16, runs16 = None, []
            else:
                best16, runs16 = torch_best(model, B, T, a.torch_steps, a.threads, env, sg.get("core"), "bf16")
            rows16.append([f"{model} B={B} T={T}", c16["tok_s"], c16["mfu_pct"], best16, c["tok_s"], c16["peak"],
                           c16["step_mfu_pct"]])
            pt = " / ".join("%.1f (%s)" % (r["tok_s"], r["label"]) for r in runs16)
            print(f"  {rows16[-1][0]}: train_gpt2 bf16 {c16['tok_s']:.1f} tok/s ({c16['mfu_pct']:.1f}% of the bf16 "
                  f"peak, {c16['tok_s'] / c['tok_s']:.2f}x fp32)" + (f", PyTorch autocast bf16 {pt}" if runs16 else ""),
                  flush=True)
        autos.append((f"{model} B={B} T={T}", auto_pick(depth, B, T, env), c["tok_s"], c16["tok_s"] if sg16 else None))
        au = autos[-1][1]
        print(f"  {autos[-1][0]}: --precision auto picks {au['precision']} ({au['why']})", flush=True)
    # the peak again at the end; the best probe of the run is the peak the summary names
    peak_end = probe()
    probes.append(peak_end)
    print(f"OpenBLAS SGEMM {n}^3 again: {peak_end:.1f} GFLOP/s", flush=True)
    peak = max(probes)
    if sg16:
        peak16_end = probe16()
        probes16.append(peak16_end)
        print(f"bf16 matmul {n}^3 again: {peak16_end:.1f} GFLOP/s", flush=True)
        peak16 = max(probes16)
    bw_end = run_json(["build/bench_sgemm", str(a.bw_mib), "5", "bandwidth"], env)
    print(f"memory bandwidth again: {bw_end['gbs']:.1f} GB/s", flush=True)
    gbs = max(bw["gbs"], bw_end["gbs"])
    print()
    print("| config | train_gpt2 tok/s | SGEMM peak beside it | MFU (% of it) | PyTorch best tok/s (threads torch/BLAS) "
          "| PyTorch MFU | train_gpt2 / PyTorch |")
    print("|---|---|---|---|---|---|---|")
    for name, ct, cm, best, fpt, pk in rows:
        if best is None:
            print(f"| {name} | {ct:.1f} | {pk:.1f} | {cm:.1f}% | - | - | - |")
            continue
        pm = 100.0 * best["tok_s"] * best["flops_per_token"] / (pk * 1e9)
        print(f"| {name} | {ct:.1f} | {pk:.1f} | {cm:.1f}% | {best['tok_s']:.1f} ({best['label']}) | {pm:.1f}% "
              f"| {ct / best['tok_s']:.2f}x |")
    if rows16:
        print("\nbf16 (train_gpt2 --precision bf16; PyTorch under torch.autocast(\"cpu\", dtype=torch.bfloat16)):\n")
        print("| config | train_gpt2 bf16 tok/s | bf16 / fp32 | bf16 peak beside it | MFU (% of it) | MFU, each step "
              "against its own probes | PyTorch autocast best tok/s (threads torch/BLAS) | PyTorch MFU (bf16 peak) "
              "| train_gpt2 / PyTorch (bf16) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, ct, cm, best, fp32_tok, pk, sm in rows16:
            if best is None:
                print(f"| {name} | {ct:.1f} | {ct / fp32_tok:.2f}x | {pk:.1f} | {cm:.1f}% | {sm:.1f}% | - | - | - |")
                continue
            pm = 100.0 * best["tok_s"] * best["flops_per_token"] / (pk * 1e9)
            print(f"| {name} | {ct:.1f} | {ct / fp32_tok:.2f}x | {pk:.1f} | {cm:.1f}% | {sm:.1f}% | {best['tok_s']:.1f} "
                  f"({best['label']}) | {pm:.1f}% | {ct / best['tok_s']:.2f}x |")
        print("\nMFU, each step against its own probes: bench_gpt2 probes the bf16 peak right before the first timed "
              "step and after each one, and sets each step against the better of the two beside it; the median over "
              "the steps. Where the peak moves within a run (a VM beside other tenants) this pairs each step with its "
              "own seconds; on a quiet machine it agrees with the column before it.")
        print(f"\nbf16 matmul peak {peak16:.1f} GFLOP/s, the best of {len(probes16)} probes in this run "
              f"({min(probes16):.1f}-{max(probes16):.1f}; {sg16['blas']}, {a.threads} threads)")
    print(f"\nSGEMM peak {peak:.1f} GFLOP/s, the best of {len(probes)} probes in this run ({min(probes):.1f}-"
          f"{max(probes):.1f}; {a.threads} threads); medians over {a.steps - a.warmup} steps "
          f"after {a.warmup} warm-up; FLOPs/token = 6N + 6LCT; {sg['blas']}; "
          f"PyTorch with OPENBLAS_CORETYPE={sg.get('core')}")
    print("\n--precision auto: what the trainer picks at start-up, its probe (a step's linear products at the "
          "config's shapes, ms in each precision) and the steps measured above:\n")
    print("| config | auto picks | probe fp32 ms | probe bf16 ms | probe s | fp32 tok/s | bf16 tok/s | auto / the faster |")
    print("|---|---|---|---|---|---|---|---|")
    for name, au, t32, t16 in autos:
        pr = au["probe"]
        cells = [f"{pr[0]:.1f}", f"{pr[1]:.1f}", f"{pr[2]:.2f}"] if pr else ["-", "-", "-"]
        picked = t16 if au["precision"] == "bf16" else t32
        best = max(t32, t16) if t16 is not None else t32
        ratio = f"{picked / best:.3f}" if picked is not None else "-"
        print(f"| {name} | {au['precision']} ({au['why']}) | {' | '.join(cells)} | {t32:.1f} | "
              f"{t16 if t16 is None else f'{t16:.1f}'} | {ratio} |".replace("| None |", "| - |"))
    isa = next((c["bf16_isa"] for _, c in profiles if c["precision"] == "bf16"), None)
    print(f"train_gpt2 ran on {profiles[0][1]['blas']}" + (f", its bf16 products on oneDNN ({isa})" if isa else "")
          + ": the trainer's own choice (nothing set)")
    if over:
        print(f"the environment's override ({' '.join(overrides)}), not used above: {over['blas']}, SGEMM peak "
              f"{over['gflops']:.1f} GFLOP/s" + (f"; {over16['blas']} {over16['gflops']:.1f} GFLOP/s" if over16 else ""))
    print("\nwhere train_gpt2's step time goes (ms per step, mean over the timed steps; % of the step):\n")
    print("| config | step ms | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for name, c in profiles:
        ph, total = c["phases_ms"], c["mean_ms"]
        cells = " | ".join(f"{ph[k]:.0f} ({100.0 * ph[k] / total:.0f}%)" for k in PHASES)
        print(f"| {name} | {total:.0f} | {cells} |")
    print(f"\neach phase against its floor (ms per step: time / floor (time as a multiple of the floor)); the floor is max(bytes it must "
          f"move / {gbs:.1f} GB/s, its products' FLOPs / the peak of its precision beside the row, as above); bytes and "
          f"FLOPs: dev/bench_gpt2.c's phase_floors:\n")
    print("| config | step | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for name, c in profiles:
        pk = c["peak"]
        floor = {k: max(f["bytes"] / (gbs * 1e9), f["flops"] / (pk * 1e9)) * 1e3 for k, f in c["floor"].items()}
        ms = dict(c["phases_ms"], step=c["mean_ms"])
        floor["step"] = sum(floor[k] for k in PHASES)
        cells = " | ".join(vs_floor(ms[k], floor[k]) for k in ["step"] + PHASES)
        print(f"| {name} | {cells} |")
    for note in (peak_spread_note("SGEMM", probes), sg16 and peak_spread_note("bf16 matmul", probes16)):
        if note:
            print("\n" + note)
    print(f"\nwait policy: OMP_WAIT_POLICY={profiles[0][1]['wait_policy'] or '(unset)'}"
          f" GOMP_SPINCOUNT={profiles[0][1]['spincount'] or '(unset)'}; bench took {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
