#!/usr/bin/python3
"""
test/test_best_rule.py — scripts/best_rule.py, which scores rules that pick an arm's best grid point (run by
`make test`): each rule's value of a point against numbers worked out here by hand, the pick's tie order
(the suite's: the lower LR, then the lower beta2), the regret over every draw of seeds against a case small
enough to enumerate by hand (a point that forks on one seed), the cost of picking from fewer seeds (--sizes)
against the same enumeration, and bad input refused with one line naming the
file: a runs.csv without the suite's columns, a seed given twice, a grid not finished.
Prints 'N passed, N failed'; exits 1 if any failed.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import best_rule as br  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import TESTS, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="test_best_rule_")
SCRIPT = os.path.join(ROOT, "scripts", "best_rule.py")


def close(a, b, tol=1e-12):
    return abs(a - b) <= tol


def write_csv(name, rows, header="phase,arm,kind,lr,beta2,seed,steps,final_val_loss"):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(header + "\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    return path


# two points at one beta2: A stable at 3.0; B lower on seeds 1-3 and forked on seed 4
FORK = {(1e-3, 0.99): {1: 3.0, 2: 3.0, 3: 3.0, 4: 3.0},
        (2e-3, 0.99): {1: 2.9, 2: 2.9, 3: 2.9, 4: 3.5}}


@test
def each_rule_s_value_is_the_formula():
    pts = {(1e-3, 0.99): {1: 3.0, 2: 3.3, 3: 3.6}, (2e-3, 0.99): {1: 2.0, 2: 2.2, 3: 3.1},
           (4e-3, 0.99): {1: 4.0, 2: 4.0, 3: 4.6}}
    seeds = [1, 2, 3]
    m = br.rule_values("mean", pts, seeds)
    assert close(m[(2e-3, 0.99)], (2.0 + 2.2 + 3.1) / 3), m
    assert br.rule_values("median", pts, seeds)[(2e-3, 0.99)] == 2.2
    assert br.rule_values("worst", pts, seeds)[(4e-3, 0.99)] == 4.6
    # sample sd of 3.0, 3.3, 3.6 is 0.3
    assert close(br.rule_values("mean_sd", pts, seeds)[(1e-3, 0.99)], 3.3 + 0.3, 1e-9)
    s = br.rule_values("smooth", pts, seeds)
    mA, mB, mC = 3.3, (2.0 + 2.2 + 3.1) / 3, (4.0 + 4.0 + 4.6) / 3
    assert close(s[(2e-3, 0.99)], 0.5 * mB + 0.25 * mA + 0.25 * mC, 1e-9), s
    assert close(s[(1e-3, 0.99)], (0.5 * mA + 0.25 * mB) / 0.75, 1e-9), s  # an end: renormalised
    assert close(s[(4e-3, 0.99)], (0.5 * mC + 0.25 * mB) / 0.75, 1e-9), s


@test
def smoothing_stays_within_one_beta2():
    pts = {(1e-3, 0.95): {1: 3.0, 2: 3.0}, (2e-3, 0.95): {1: 3.2, 2: 3.2},
           (1e-3, 0.99): {1: 9.0, 2: 9.0}, (2e-3, 0.99): {1: 1.0, 2: 1.0}}
    s = br.rule_values("smooth", pts, [1, 2])
    assert close(s[(1e-3, 0.95)], (0.5 * 3.0 + 0.25 * 3.2) / 0.75, 1e-9), s
    assert close(s[(2e-3, 0.99)], (0.5 * 1.0 + 0.25 * 9.0) / 0.75, 1e-9), s


@test
def ties_go_to_the_lower_lr_then_the_lower_beta2():
    assert br.pick({(2e-3, 0.99): 1.0, (1e-3, 0.99): 1.0}) == (1e-3, 0.99)
    assert br.pick({(1e-3, 0.99): 1.0, (1e-3, 0.95): 1.0}) == (1e-3, 0.95)
    assert br.pick({(1e-3, 0.95): 1.1, (2e-3, 0.99): 1.0}) == (2e-3, 0.99)


@test
def regret_over_every_draw_matches_the_enumeration():
    # draws of 2 of the 4 seeds (6): without seed 4 (3 draws) the mean picks B (2.9 < 3.0) and the rest,
    # which holds seed 4, has B at (2.9 + 3.5) / 2 = 3.2 against A's 3.0: regret 0.2; with seed 4 (3 draws)
    # B's mean is 3.2, the pick is A, and the rest (two of seeds 1-3) has B at 2.9: regret 0.1
    res = br.score_rules(FORK, [1, 2, 3, 4], 2)
    m = res["mean"]
    assert m["draws"] == 6 and close(m["regret"], (3 * 0.2 + 3 * 0.1) / 6, 1e-9), m
    assert close(m["mean"], (3 * 3.2 + 3 * 3.0) / 6, 1e-9), m
    assert m["hits"] == 0 and m["picks"] == {(2e-3, 0.99): 3, (1e-3, 0.99): 3}, m
    # the spread of the rest at the pick: B's {2.9, 3.5} (sd 0.3 * sqrt 2), A's {3.0, 3.0} (0)
    assert close(m["sd"], (3 * 0.3 * 2 ** 0.5 + 3 * 0.0) / 6, 1e-9), m
    # with 3 of the 4 drawn the rest is one seed: its spread is 0 and regret is read on it alone
    r3 = br.score_rules(FORK, [1, 2, 3, 4], 3)["worst"]
    # worst: a draw holding seed 4 (3 of 4) picks A, rest one of seeds 1-3 where B is 2.9: regret 0.1;
    # the draw {1, 2, 3} picks B, rest {4}: B 3.5 against A 3.0: regret 0.5
    assert close(r3["regret"], (3 * 0.1 + 0.5) / 4, 1e-9) and r3["sd"] == 0.0, r3


@test
def sizes_read_every_pick_against_the_all_seeds_best():
    # over all 4 seeds A (3.0) beats B (3.05). One seed: seeds 1-3 pick B, read on the other three (one is
    # seed 4): B (2.9 + 2.9 + 3.5) / 3 = 3.1 against A's 3.0, cost 0.1; seed 4 picks A, cost 0.
    # Two seeds: the 3 draws without seed 4 pick B, read on {a seed of 1-3, 4}: 3.2, cost 0.2; the 3 with
    # it pick A (B's mean 3.2), cost 0
    res = br.score_sizes(FORK, [1, 2, 3, 4], [1, 2])
    assert res[1]["draws"] == 4 and close(res[1]["cost"], 0.3 / 4, 1e-9) and res[1]["hits"] == 0.25, res
    assert res[2]["draws"] == 6 and close(res[2]["cost"], 0.6 / 6, 1e-9) and res[2]["hits"] == 0.5, res


@test
def the_cli_writes_its_tables_and_refuses_bad_input():
    rows = [("grid", f"a_lr{lr:g}", "a", lr, b2, s, 10, v) for (lr, b2), vs in FORK.items() for s, v in vs.items()]
    csv_ok = write_csv("ok.csv", rows)
    out = os.path.join(TMP, "rules.md")
    r = subprocess.run([sys.executable, SCRIPT, csv_ok, "--pick", "2", "--out", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = open(out).read()
    assert "| `mean` | 3.1000 | +0.1500 | 0% |" in text, text
    bad = [("no_cols.csv", write_csv("no_cols.csv", [(1, 2)], header="a,b"), "not a suite runs.csv"),
           ("dup.csv", write_csv("dup.csv", rows + [rows[0]]), "seed 1 twice"),
           ("partial.csv", write_csv("partial.csv", rows[:-1]), "lack some grid points")]
    r = subprocess.run([sys.executable, SCRIPT, csv_ok, "--pick", "1"], capture_output=True, text=True)
    assert r.returncode == 1 and "flag --pick: 1" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = subprocess.run([sys.executable, SCRIPT, csv_ok, "--sizes", "1,2", "--out", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "| 2 | +0.1000 (50%) |" in open(out).read(), open(out).read()
    for flag, msg in (("1,3", "needs at least 6"), ("2,x", "flag --sizes: '2,x'"), ("0,2", "at least 1 seed")):
        r = subprocess.run([sys.executable, SCRIPT, csv_ok, "--sizes", flag], capture_output=True, text=True)
        assert r.returncode == 1 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, (flag, r.stderr)
    for name, path, msg in bad:
        r = subprocess.run([sys.executable, SCRIPT, path, "--pick", "2"], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and name in lines[0] and msg in lines[0], (name, r.stderr)


if __name__ == "__main__":
    run_tests(TESTS, TMP)
