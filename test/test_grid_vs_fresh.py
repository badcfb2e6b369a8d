#!/usr/bin/python3
"""
test/test_grid_vs_fresh.py — scripts/grid_vs_fresh.py, which reads how far the suite's grid reading at each
arm's pick lies from the fresh seeds' (run by `make test`): two small summaries worked out by hand (a baseline
met by two methods counted once, a method that ties its baseline left out of the sign count, an unfinished
comparison skipped, a summary without methods ignored, a grid without beta2), and bad input refused with one
line naming the file. Prints 'N passed, N failed'; exits 1 if any failed.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import grid_vs_fresh as gv  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import TESTS, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="test_grid_vs_fresh_")
SCRIPT = os.path.join(ROOT, "scripts", "grid_vs_fresh.py")

# A: la's pick is 1e-3 (grid 2.95), the baseline's 2e-3 (grid 2.90); fresh: la 2.96, the baseline 2.96 + 0.02
A = {"corpus": "c1", "cell": "b1", "best": {"rows": 2e-3, "la": 1e-3}, "best_beta2": {"rows": 0.99, "la": 0.99},
     "grid": [{"lr": 1e-3, "beta2": 0.99, "means": {"rows": 3.0, "la": 2.95}},
              {"lr": 2e-3, "beta2": 0.99, "means": {"rows": 2.9, "la": 2.97}}],
     "methods": [{"arm": "la", "against": "rows", "mean": 2.96, "paired": {"mean": -0.02, "n": 5}}]}
# B: no beta2; m1 and m2 meet the same baseline (counted once); m2 ties it on both; m3 has not finished
B = {"corpus": "c2", "cell": "b4x4", "best": {"rows": 1e-3, "m1": 1e-3, "m2": 1e-3, "m3": 1e-3},
     "grid": [{"lr": 1e-3, "means": {"rows": 4.0, "m1": 3.9, "m2": 4.0, "m3": 4.1}}],
     "methods": [{"arm": "m1", "against": "rows", "mean": 3.92, "paired": {"mean": -0.1, "n": 5}},
                 {"arm": "m2", "against": "rows", "mean": 4.02, "paired": {"mean": 0.0, "n": 5}},
                 {"arm": "m3", "against": "rows", "mean": None, "paired": {"mean": None, "n": 0}}]}


def close(a, b, tol=1e-9):
    return abs(a - b) <= tol


def put(rel, obj):
    path = os.path.join(TMP, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))
    return path


put("ok/a/b1/summary.json", A)
put("ok/b/b4x4/summary.json", B)
put("ok/plain/summary.json", {"corpus": "c3", "cell": "b1", "grid": []})  # no methods: not read


@test
def the_shifts_and_errors_are_the_hand_worked_ones():
    reports, picks, methods = gv.analyse(gv.find_summaries([os.path.join(TMP, "ok")]))
    assert len(reports) == 2, reports
    shift = {(p["report"].split(os.sep)[-2], p["arm"]): (p["role"], p["shift"]) for p in picks}
    assert len(picks) == 5, picks  # B's baseline once, m3 not at all
    assert shift[("a", "la")][0] == "method" and close(shift[("a", "la")][1], 0.01), shift
    assert shift[("a", "rows")][0] == "baseline" and close(shift[("a", "rows")][1], 2.98 - 2.9), shift
    assert close(shift[("b", "rows")][1], 4.02 - 4.0) and close(shift[("b", "m1")][1], 0.02), shift
    err = {m["arm"]: m for m in methods}
    assert set(err) == {"la", "m1", "m2"}, err
    assert close(err["la"]["grid_diff"], 0.05) and close(err["la"]["fresh_diff"], -0.02), err["la"]
    assert close(err["la"]["error"], -0.07) and close(err["m1"]["error"], 0.0), err


@test
def the_cli_summarises_and_writes_atomically():
    out = os.path.join(TMP, "out.md")
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(TMP, "ok"), "--out", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    t = open(out).read()
    assert "| baselines | 2 | +0.0500 |" in t, t          # (0.08 + 0.02) / 2
    assert "| methods | 3 | +0.0167 |" in t, t            # (0.01 + 0.02 + 0.02) / 3
    assert "| all | 5 | +0.0300 |" in t, t
    assert "3 comparisons: error -0.0233" in t, t         # (-0.07 + 0 + 0) / 3
    assert "in 1 of the 2 that do not tie on both" in t, t  # la disagrees, m1 agrees, m2 ties
    assert not os.path.exists(out + ".tmp")


@test
def bad_input_is_one_line_naming_the_file():
    bad = put("bad_json/x/summary.json", "{not json")
    nogrid = dict(A)
    nogrid["best"] = {"rows": 5e-3, "la": 1e-3}
    nopick = put("bad_pick/x/summary.json", nogrid)
    put("empty/x/summary.json", {"corpus": "c", "cell": "b1", "grid": [], "methods": []})
    for root, msg, name in ((os.path.dirname(bad), "not JSON", bad),
                            (os.path.dirname(nopick), "no grid mean at a pick", nopick),
                            (os.path.join(TMP, "empty"), "no summary.json with a finished method comparison", "empty"),
                            (os.path.join(TMP, "nowhere"), "no such file or folder", "nowhere")):
        r = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and msg in lines[0] and name in lines[0], (root, r.stderr)


if __name__ == "__main__":
    run_tests(TESTS, TMP)
