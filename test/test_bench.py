#!/usr/bin/python3
"""
test/test_bench.py — what `make bench` (scripts/bench.py) measures and says about the kernels, run on tiny
sizes (a few seconds): with nothing set it names the trainer's own choice of OpenBLAS core and no override;
with OPENBLAS_CORETYPE (and oneDNN's ISA cap, where the build has bf16) set in its environment it says so and
reports both kernels, each with its peak, while the trainer's timed runs stay on the trainer's own choice;
its profile has, for every phase of each step and the step itself, a floor above 0 and time / floor, whose
counts of products and optimizer passes agree with counts made here; the benches make runs itself
(BENCH_ENV) leave out the same variables; and hybrid mode's extra work per step is read off its passes
(scripts/bench_hybrid_overhead.py) as worked out here.
Prints 'N passed, N failed'; exits 1 if any failed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench import KERNEL_VARS, PEAK_SPREAD, PHASES, peak_spread_note  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import TESTS, Skip, run_tests, test  # noqa: E402

CLEAN = {k: v for k, v in os.environ.items() if k not in KERNEL_VARS}
CLEAN.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
# a weaker OpenBLAS core any x86-64 runs, and oneDNN capped below its bf16 instructions
OVERRIDE = {"OPENBLAS_CORETYPE": "Prescott", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
TINY = ["--threads", "1", "--sgemm-n", "128", "--bw-mib", "16"]  # the bandwidth probe at 16 MiB, not 4x the cache


def bench(args, extra_env=None):
    env = dict(CLEAN, **(extra_env or {}))
    r = subprocess.run([sys.executable, "scripts/bench.py"] + TINY + args, env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"bench.py failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def sgemm(args, extra_env=None):
    r = subprocess.run(["build/bench_sgemm"] + args, env=dict(CLEAN, **(extra_env or {})), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    return json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None


DEFAULT = sgemm(["64", "1"])          # the trainer's own choice here
DEFAULT16 = sgemm(["64", "1", "bf16"])  # None: no bf16 in this build or on this CPU
# the bench's bf16 accounting (FLOPs, peaks, MFU) tested on any CPU: with the test reference's products
# where oneDNN has none (None: a build without oneDNN)
REF = {"LLMC_BF16_TEST_REFERENCE": "1"}
BF16_ENV = CLEAN if DEFAULT16 else dict(CLEAN, **REF) if sgemm(["64", "1", "bf16"], REF) else None


def gflops_after(text, prefix):
    """the GFLOP/s of the first line that starts with prefix"""
    for line in text.splitlines():
        if line.startswith(prefix):
            m = re.search(r"([0-9.]+) GFLOP/s", line)
            assert m, f"no GFLOP/s in: {line}"
            return float(m.group(1))
    raise AssertionError(f"no line starting with {prefix!r} in:\n{text}")


@test
def the_bf16_peak_is_the_better_of_b_plain_and_b_packed():
    if not DEFAULT16:
        return
    r = sgemm(["128", "2", "bf16"])
    assert r["gflops_plain"] > 0 and r["gflops_packed"] > 0, r
    assert abs(r["gflops"] - max(r["gflops_plain"], r["gflops_packed"])) < 0.02, r


@test
def nothing_set_reports_the_trainers_choice_and_no_override():
    out = bench(["--peaks-only"])
    assert f"BLAS: {DEFAULT['blas']}: the trainer's own choice" in out, out
    assert gflops_after(out, "OpenBLAS SGEMM 128^3") > 0
    assert "override" not in out, out


@test
def an_override_is_named_and_both_kernels_get_their_peak():
    out = bench(["--peaks-only"], OVERRIDE)
    assert "the environment overrides the kernel choice (OPENBLAS_CORETYPE=Prescott ONEDNN_MAX_CPU_ISA=AVX512_CORE)" \
        in out, out
    # the trainer's own choice first, as with nothing set ...
    assert f"BLAS: {DEFAULT['blas']}: the trainer's own choice" in out, out
    assert gflops_after(out, "OpenBLAS SGEMM 128^3") > 0
    # ... and the override's kernel with its own peak
    assert gflops_after(out, "  override: BLAS: OpenBLAS") > 0
    assert re.search(r"override: BLAS: OpenBLAS \S+ Prescott \(OPENBLAS_CORETYPE\)", out), out
    if DEFAULT16:
        assert gflops_after(out, f"{DEFAULT16['blas']} 128^3") > 0
        assert gflops_after(out, "  override: oneDNN bf16 matmul (avx512 (bf16 emulated))") > 0


@test
def timed_runs_use_the_trainers_choice_under_an_override():
    out = bench(["--configs", "d1:1:16", "--steps", "2", "--warmup", "1", "--no-torch"], OVERRIDE)
    line = next((s for s in out.splitlines() if s.startswith("train_gpt2 ran on")), None)
    assert line is not None, out
    assert f"train_gpt2 ran on {DEFAULT['blas']}" in line, line
    if DEFAULT16:
        isa = DEFAULT16["blas"][DEFAULT16["blas"].index("(") + 1:-1]
        assert f"its bf16 products on oneDNN ({isa})" in line, line
    assert "the environment's override (OPENBLAS_CORETYPE=Prescott" in out, out
    assert f"PyTorch with OPENBLAS_CORETYPE={DEFAULT['core']}" in out, out


@test
def the_profile_has_a_floor_for_every_phase():
    out = bench(["--configs", "d1:2:32", "--steps", "2", "--warmup", "1", "--no-torch"])
    assert re.search(r"memory bandwidth \(a \+= s\*b over 2 x 16 MiB, 1 threads\): [0-9.]+ GB/s", out), out
    rows = [s for s in out.splitlines() if s.startswith("| d1 B=2 T=32") and "/" in s and "x)" in s]
    assert len(rows) == (2 if DEFAULT16 else 1), f"expected a floor row per profile:\n{out}"
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert len(cells) == 1 + len(PHASES), row
        for phase, cell in zip(["step"] + PHASES, cells):
            # "<ms> / <floor ms> (<ratio>x)"; every phase has a floor above 0, "other" included
            m = re.fullmatch(r"([0-9.e-]+) / ([0-9.e-]+) \(([0-9.]+)x\)", cell)
            assert m, f"{phase}: {cell!r} in {row}"
            assert float(m.group(2)) > 0, f"{phase} has no floor: {row}"
    # what --precision auto picks at the config, and both speeds: its probe's (where it measures) and the steps'
    auto = [s for s in out.splitlines() if s.startswith("| d1 B=2 T=32 |") and "(auto" in s]
    assert len(auto) == 1, f"no row of --precision auto's pick:\n{out}"
    cells = [c.strip() for c in auto[0].strip("|").split("|")]
    assert cells[1].startswith(("fp32 (auto", "bf16 (auto")), auto[0]
    assert DEFAULT16 or cells[1].startswith("fp32"), auto[0]
    if DEFAULT16:  # both measured: the probe's two speeds, the steps' two, auto's pick against the faster step
        probe32, probe16 = float(cells[2]), float(cells[3])
        assert cells[1].startswith("bf16" if probe16 < probe32 else "fp32"), auto[0]
        assert float(cells[5]) > 0 and float(cells[6]) > 0 and 0 < float(cells[7]) <= 1.0, auto[0]


@test
def the_floors_count_the_products_and_the_optimizer_passes():
    # d2 at GPT-2's vocabulary, B=2 T=32, against counts made here: the linear layers' and lm head's
    # 6 x rows x weights, the attention's six products over the causal triangle, AdamW's 8 fp32 streams
    # (the gradients read and left zero; and the bf16 copy), the grad norm's one, "other" only the backward's
    # dresidual cleared (no pass zeroing the gradients)
    L, C, B, T, Vp = 2, 128, 2, 32, 50304
    P = Vp * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C
    for precision in (["fp32", "bf16"] if DEFAULT16 else ["fp32"]):
        r = subprocess.run(["build/bench_gpt2", "2", str(B), str(T), "2", "1", "0", precision], env=CLEAN, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        f = json.loads(r.stdout.strip().splitlines()[-1])["floor"]
        assert set(f) == set(PHASES), f
        assert f["gemm"]["flops"] == 6 * B * T * (L * 12 * C * C + C * Vp), (precision, f["gemm"])
        assert f["attention"]["flops"] == L * 6 * 2 * B * C * T * (T + 1) // 2, (precision, f["attention"])
        assert f["adamw"]["bytes"] == (34 if precision == "bf16" else 32) * P, (precision, f["adamw"], P)
        assert f["other"]["bytes"] == 4 * B * T * C, (precision, f["other"])
        assert f["grad_norm"]["bytes"] == 4 * P, (precision, f["grad_norm"])
        assert all(f[k]["bytes"] > 0 for k in PHASES), (precision, f)


@test
def each_rows_mfu_is_against_the_peak_beside_it():
    # two configs: each row names the peak probed right before and after its timed run, and its MFU is
    # tok/s x FLOPs/token / that peak: FLOPs/token recovered from each row of a config must agree (the fp32
    # and the bf16 rows have the same model, and different peaks); the summary's peak is the best probe
    out = bench(["--configs", "d1:2:32,d2:1:16", "--steps", "2", "--warmup", "1", "--no-torch"])
    fpt = {}
    for line in out.splitlines():
        m = re.match(r"\| (d\d B=\d+ T=\d+) \| ([0-9.]+) \| (?:[0-9.]+x \| )?([0-9.]+) \| ([0-9.]+)% \|", line)
        if m:
            name, tok_s, pk, mfu = m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))
            assert pk > 0, line
            # the row prints each figure to one decimal: FLOPs/token lies between the bounds that rounding allows
            # (a tiny model's MFU of a few per cent on a loaded machine is 1-2% uncertain by its last digit alone)
            lo = (mfu - 0.05) / 100.0 * (pk - 0.05) * 1e9 / (tok_s + 0.05)
            hi = (mfu + 0.05) / 100.0 * (pk + 0.05) * 1e9 / (tok_s - 0.05)
            fpt.setdefault(name, []).append((lo, hi))
    assert set(fpt) == {"d1 B=2 T=32", "d2 B=1 T=16"}, out
    for name, v in fpt.items():
        assert len(v) == (2 if DEFAULT16 else 1), (name, v, out)
        # every row's interval holds one FLOPs/token (within 1% beyond rounding): each MFU is against its own peak
        assert max(lo for lo, _ in v) < 1.01 * min(hi for _, hi in v), \
            f"{name}: MFU rows imply FLOPs/token in {v}: not against the peak they name"
    m = re.search(r"SGEMM peak ([0-9.]+) GFLOP/s, the best of (\d+) probes in this run \(([0-9.]+)-([0-9.]+);", out)
    assert m and int(m.group(2)) == 2 + 2 * 2, out  # start, end, and two beside each config
    assert float(m.group(1)) == float(m.group(4)), m.group(0)


@test
def each_bf16_step_is_set_against_the_probes_beside_it():
    # bench_gpt2 bf16 probes the bf16 peak before the first timed step and after each: step_mfu_pct is the
    # median over the timed steps of tok/step x FLOPs/token / step time / the better of its two probes
    if BF16_ENV is None:
        raise Skip("no bf16 in this build")
    B, T, steps, warmup = 2, 32, 4, 1
    r = subprocess.run(["build/bench_gpt2", "2", str(B), str(T), str(steps), str(warmup), "0", "bf16"], env=BF16_ENV,
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    ms, pk = d["step_ms"], d["step_probes"]
    assert len(ms) == steps - warmup and len(pk) == len(ms) + 1 and min(pk) > 0, d
    mfu = sorted(100.0 * B * T * d["flops_per_token"] / (m / 1000.0) / (max(pk[i], pk[i + 1]) * 1e9)
                 for i, m in enumerate(ms))
    assert abs(d["step_mfu_pct"] / mfu[len(mfu) // 2] - 1) < 1e-3, (d["step_mfu_pct"], mfu)
    assert sorted(ms)[len(ms) // 2] == d["median_ms"], (ms, d["median_ms"])


@test
def a_moving_peak_is_flagged():
    assert peak_spread_note("bf16 matmul", [505.0, 520.0, 498.0]) is None
    assert peak_spread_note("SGEMM", [100.0, 100.0 * PEAK_SPREAD]) is None
    note = peak_spread_note("bf16 matmul", [494.3, 1025.2, 510.6])
    assert note and "494.3 to 1025.2 GFLOP/s over 3 probes (2.07x" in note, note
    assert "not a property of the code" in note, note


@test
def bench_commits_alternates_and_says_when_noise_wins():
    from bench_commits import ratios, round_order
    assert [round_order(r) for r in range(4)] == [("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]
    med, lo, hi, resolved = ratios([100.0, 110.0, 90.0], [95.0, 104.5, 86.4])  # B 5%, 5%, 4% faster
    assert abs(med - 0.95) < 1e-9 and abs(lo - 0.95) < 1e-9 and abs(hi - 0.96) < 1e-9 and resolved
    med, lo, hi, resolved = ratios([100.0, 100.0, 100.0], [91.0, 104.0, 98.0])  # the noise straddles 1
    assert abs(med - 0.98) < 1e-9 and not resolved
    assert ratios([100.0, 100.0], [103.0, 101.0])[3]  # consistently slower is resolved too


@test
def bench_commits_says_which_phase_the_difference_is_in():
    from bench_commits import phase_shares
    # two rounds: the optimizer 1 and 2 ms slower on steps of 100 and 200 ms (1% of a step both times), the
    # products +1 ms and -2 ms (noise: its range holds 0); a phase only one build profiles is left out
    sh = phase_shares([100.0, 200.0], [{"gemm": 90.0, "adamw": 10.0, "old": 1.0}, {"gemm": 180.0, "adamw": 20.0}],
                      [{"gemm": 91.0, "adamw": 11.0}, {"gemm": 178.0, "adamw": 22.0}])
    assert set(sh) == {"gemm", "adamw"}, sh
    assert all(abs(x - y) < 1e-9 for x, y in zip(sh["adamw"], (1.0, 1.0, 1.0))), sh
    assert all(abs(x - y) < 1e-9 for x, y in zip(sh["gemm"], (0.0, -1.0, 1.0))), sh


@test
def bench_commits_times_what_the_cpu_has():
    from bench_commits import cpu_has_bf16, resolve_precision
    tmp = tempfile.mkdtemp()
    with_bf16, without = os.path.join(tmp, "with"), os.path.join(tmp, "without")
    open(with_bf16, "w").write("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")
    open(without, "w").write("processor\t: 0\nflags\t\t: fpu avx2 fma avx512_bf16x\n")
    assert cpu_has_bf16(with_bf16) and not cpu_has_bf16(without) and not cpu_has_bf16(os.path.join(tmp, "none"))
    assert resolve_precision("auto", True) == "bf16" and resolve_precision("auto", False) == "fp32"
    assert resolve_precision("fp32", True) == "fp32" and resolve_precision("bf16", True) == "bf16"
    try:
        resolve_precision("bf16", False)
        raise AssertionError("bf16 asked on a CPU without it went on")
    except SystemExit as e:
        assert "this CPU has no native bf16" in str(e), e
    shutil.rmtree(tmp)


@test
def the_makefiles_benches_leave_out_the_same_variables():
    # BENCH_ENV (the benches make runs itself) and bench.py's KERNEL_VARS must name the same overrides
    line = next(s for s in open(os.path.join(ROOT, "Makefile")) if s.startswith("BENCH_ENV ="))
    assert sorted(re.findall(r"-u (\S+)", line)) == sorted(KERNEL_VARS), (line, KERNEL_VARS)


@test
def the_products_rows_count_their_flops():
    # bench_gpt2 products (d2, B=2, T=64): every product and layer call of a bf16 step, each row's GFLOP/s
    # being the FLOPs counted here over its time, and its share the GFLOP/s over the peak it names
    if not DEFAULT16:  # (the test reference's products would take minutes here: its peak probes are SGEMMs)
        raise Skip("no bf16 in this build or on this CPU")
    L, C, NH, B, T, Vp = 2, 128, 2, 2, 64, 50304
    N, hs = B * T, C // NH
    r = subprocess.run(["build/bench_gpt2", "products", "2", str(B), str(T), "1"], env=CLEAN, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    shapes = {"qkv": (C, 3 * C), "attproj": (C, C), "fc": (C, 4 * C), "fcproj": (4 * C, C), "lm head": (C, Vp)}
    rows = re.findall(r"^\| ([a-z ]+): ([^|]+) \| [^|]+ \| ([0-9.e+]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+)% \|$",
                      r.stdout, re.M)
    assert len(rows) == 5 * 5 + 4, r.stdout
    for what, part, ms, gflops, peak, pct in rows:
        ms, gflops, peak, pct = float(ms), float(gflops), float(peak), float(pct)
        if what == "attention":
            flops = (2 if "forward" in part else 4) * 2 * B * NH * T * T * hs
        else:
            cin, cout = shapes[what]
            flops = (4 if "backward" in part else 2) * N * cin * cout
        assert abs(gflops * ms * 1e6 / flops - 1) < 0.01, (what, part, gflops, ms, flops)
        assert peak > 0 and abs(pct - 100 * gflops / peak) < 0.1 + 0.002 * pct, (what, part, gflops, peak, pct)
    assert [w for w, *_ in rows].count("attention") == 4 and [w for w, *_ in rows].count("lm head") == 5, rows



@test
def the_products_mode_says_when_the_cpu_has_no_bf16():
    # one line naming the reason, exit 1 (not oneDNN's complaint about the first shape it could not make)
    r = subprocess.run(["build/bench_gpt2", "products", "2", "2", "64", "1"], env=dict(CLEAN, LLMC_BF16_TEST_NO_BF16="1"),
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    if "this build has no oneDNN" in r.stderr:
        raise Skip("this build has no oneDNN")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no native bf16" in r.stderr, (r.returncode, r.stderr)


@test
def the_hybrid_steps_extra_work_is_read_from_the_passes():
    import bench_hybrid_overhead as bho
    text = "| a table |\n{\"adamw_ms\": 1.0}\nnote\n" + json.dumps(
        {"adamw_ms": 5.0, "gpa_ms": 7.0, "adamw_ema_ms": 6.0, "fused_ema_ms": 9.0}) + "\n"
    micro = bho.micro_json(text)  # the last JSON line
    assert micro["gpa_ms"] == 7.0, micro
    got = bho.pass_ratios({"hybrid gpa": 200.0, "hybrid lookahead --ema": 210.0, "hybrid predict": 200.0,
                           "baseline --ema": None}, micro)
    # GPA's pass 2 ms over plain AdamW's on a 200 ms step; the look-ahead keeping the EMA 3 ms over the
    # baseline keeping it, on that baseline's 210 ms; Predict runs have no single pass, a missing step no row
    assert [(n, e) for n, _, e, _ in got] == [("hybrid gpa", 2.0), ("hybrid lookahead --ema", 3.0)], got
    assert abs(got[0][3] - 1.01) < 1e-12 and abs(got[1][3] - 213.0 / 210.0) < 1e-12, got
    try:
        bho.pass_ratios({"hybrid linefit": 200.0}, micro)
        raise AssertionError("a pass missing from the JSON went unnoticed")
    except SystemExit as e:
        assert "linefit_ms" in str(e), e


if __name__ == "__main__":
    run_tests(TESTS)
