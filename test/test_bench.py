#!/usr/bin/python3
"""
test/test_bench.py — what `make bench` (scripts/bench.py) measures and says about the kernels, run on tiny
sizes (a few seconds): with nothing set it names the trainer's own choice of OpenBLAS core and no override;
with OPENBLAS_CORETYPE (and oneDNN's ISA cap, where the build has bf16) set in its environment it says so and
reports both kernels, each with its peak, while the trainer's timed runs stay on the trainer's own choice.
Prints 'N passed, N failed'; exits 1 if any failed.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench import KERNEL_VARS, PHASES  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import run_tests  # noqa: E402

TESTS = []
CLEAN = {k: v for k, v in os.environ.items() if k not in KERNEL_VARS}
CLEAN.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
# a weaker OpenBLAS core any x86-64 runs, and oneDNN capped below its bf16 instructions
OVERRIDE = {"OPENBLAS_CORETYPE": "Prescott", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
TINY = ["--threads", "1", "--sgemm-n", "128"]


def test(fn):
    TESTS.append(fn)
    return fn


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
DEFAULT16 = sgemm(["64", "1", "bf16"])  # None: no bf16 in this build


def gflops_after(text, prefix):
    """the GFLOP/s of the first line that starts with prefix"""
    for line in text.splitlines():
        if line.startswith(prefix):
            m = re.search(r"([0-9.]+) GFLOP/s", line)
            assert m, f"no GFLOP/s in: {line}"
            return float(m.group(1))
    raise AssertionError(f"no line starting with {prefix!r} in:\n{text}")


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


if __name__ == "__main__":
    run_tests(TESTS)
