#!/usr/bin/python3
"""
test/test_suite_stats.py — the paired statistics over seeds in scripts/comparelib.py (paired_t,
one_sided_t, one_sample_t, step_ratios, by_seed), which the held-out suite's tables come from (run by `make test`).

Each is checked against numbers computed here another way: the mean, sample std and t statistic with the
standard library's statistics module and the textbook formulas, the t distribution's tails against
scipy.stats.ttest_rel / ttest_1samp, and the step ratio against a closed form (the baseline's final val
loss linear in log-steps between two schedule lengths). The seed is the unit: a seed given twice is an
error, and pairing follows the seeds, not the order the values come in.
Prints 'N passed, N failed'; exits 1 if any failed.
"""
import math
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import comparelib as cl  # noqa: E402
from scipy import stats  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import TESTS, run_tests, test  # noqa: E402


def close(a, b, tol=1e-9):
    return a is not None and b is not None and abs(a - b) <= tol * max(1.0, abs(b))


@test
def paired_t_matches_the_formula_and_scipy():
    a = [(1, 3.10), (2, 3.05), (3, 3.20), (4, 3.00), (5, 3.12)]
    b = [(1, 3.12), (2, 3.09), (3, 3.19), (4, 3.04), (5, 3.15)]
    d = [x - y for (_, x), (_, y) in zip(a, b)]
    m, sd, n = statistics.mean(d), statistics.stdev(d), len(d)
    t = m / (sd / math.sqrt(n))
    r = cl.paired_t(a, b)
    assert r["n"] == 5 and r["seeds"] == [1, 2, 3, 4, 5]
    assert close(r["mean"], m) and close(r["sd"], sd) and close(r["t"], t), r
    assert close(r["ci95"], stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n))
    ref = stats.ttest_rel([x for _, x in a], [y for _, y in b])
    assert close(r["p"], float(ref.pvalue)), (r["p"], ref.pvalue)
    # one-sided tails: a below b here (t < 0), so p_less is half the two-sided p
    assert r["t"] < 0 and close(r["p_less"], r["p"] / 2) and close(r["p_greater"], 1 - r["p"] / 2)
    assert r["wins"] == 4  # seeds where a < b


@test
def pairing_follows_the_seeds_not_the_order():
    a = [(7, 1.0), (3, 2.0), (5, 4.0)]
    b = [(5, 3.5), (7, 1.5), (3, 2.25), (9, 0.0)]  # seed 9 has no partner: left out
    r = cl.paired_t(a, b)
    assert r["seeds"] == [3, 5, 7] and r["n"] == 3
    assert close(r["mean"], statistics.mean([2.0 - 2.25, 4.0 - 3.5, 1.0 - 1.5]))


@test
def a_seed_given_twice_is_refused():
    for fn, args in ((cl.paired_t, ([(1, 1.0), (1, 2.0)], [(1, 1.0)])),
                     (cl.paired_t, ([(1, 1.0), (2, 2.0)], [(2, 1.0), (2, 1.5)])),
                     (cl.one_sided_t, ([(4, 0.1), (4, 0.2), (5, 0.3)], 0.05)),
                     (cl.step_ratios, ([(1, [(100, 3.0), (115, 2.9)]), (1, [(100, 3.0), (115, 2.9)])], [(1, (100, 2.95))]))):
        try:
            fn(*args)
        except cl.CompareError as e:
            assert "twice" in str(e), e
        else:
            raise AssertionError(f"{fn.__name__}: a seed given twice was accepted")


@test
def too_few_seeds_give_no_p():
    r = cl.paired_t([(1, 1.0)], [(1, 2.0)])
    assert r["n"] == 1 and close(r["mean"], -1.0) and r["p"] is None and r["ci95"] is None
    r = cl.paired_t([(1, 1.0), (2, 2.0)], [(1, 0.5), (2, 1.5)])  # equal differences: no spread, no p
    assert r["p"] is None and close(r["sd"], 0.0)


@test
def one_sided_t_against_a_threshold():
    xs = [(11, 0.04), (12, 0.05), (13, 0.06), (14, 0.02), (15, 0.07)]
    v = [x for _, x in xs]
    m, sd, n = statistics.mean(v), statistics.stdev(v), len(v)
    t = (m - 0.03) / (sd / math.sqrt(n))
    r = cl.one_sided_t(xs, 0.03, "greater")
    assert close(r["t"], t) and close(r["mean"], m)
    assert close(r["p"], float(stats.t.sf(t, n - 1)))
    assert close(r["p"], float(stats.ttest_1samp(v, 0.03, alternative="greater").pvalue))
    r2 = cl.one_sided_t(xs, 0.03, "less")
    assert close(r["p"] + r2["p"], 1.0)
    # the known case: 0.04, 0.05, 0.06 against 0.03: t = 0.02 / (0.01 / sqrt 3) = 2 sqrt 3
    r3 = cl.one_sided_t([(1, 0.04), (2, 0.05), (3, 0.06)], 0.03)
    assert close(r3["t"], 2 * math.sqrt(3), 1e-6) and close(r3["p"], float(stats.t.sf(2 * math.sqrt(3), 2)))
    try:
        cl.one_sided_t(xs, 0.03, "two-sided")
    except cl.CompareError:
        pass
    else:
        raise AssertionError("a bad alternative was accepted")


@test
def one_sample_t_is_two_sided_against_mu():
    # the variants table's steps saved: each arm against the one before it, two-sided against 0
    pairs = [(3, 0.04), (1, 0.01), (2, 0.03), (4, -0.005)]
    v = [x for _, x in sorted(pairs)]
    for mu in (0.0, 0.02):
        r = cl.one_sample_t(pairs, mu)
        t = scipy_t = stats.ttest_1samp(v, mu)
        assert r["n"] == 4 and r["seeds"] == [1, 2, 3, 4] and close(r["mean"], statistics.mean(v) - mu), r
        assert close(r["t"], float(t.statistic)) and close(r["p"], float(scipy_t.pvalue)), (r, t)
        half = stats.t.ppf(0.975, 3) * statistics.stdev(v) / 2
        assert close(r["ci95"], half), r
    try:
        cl.one_sample_t([(1, 0.1), (1, 0.2)], 0.0)
        raise AssertionError("a seed given twice was accepted")
    except cl.CompareError as e:
        assert "seed 1 given twice" in str(e), e


@test
def step_ratio_in_log_steps():
    base = [(1, [(1000, 3.00), (1150, 2.90)]), (2, [(1150, 2.80), (1000, 2.95)])]
    other = [(1, (1000, 2.95)), (2, (1000, 3.00)), (3, (1000, 2.0))]  # seed 3: no baseline curve, left out
    r = cl.step_ratios(base, other)
    assert sorted(r) == [1, 2]
    # seed 1: halfway in loss, so halfway in log-steps: sqrt(1000 * 1150)
    need1 = math.sqrt(1000 * 1150)
    assert close(r[1]["needed"], need1) and close(r[1]["ratio"], need1 / 1000) and not r[1]["extrapolated"]
    assert close(r[1]["saved"], 1 - 1000 / need1)
    # seed 2: above the 100% baseline's loss (worse), a third of a segment past its end: extrapolated, saves < 0
    need2 = math.exp(math.log(1000) - (3.00 - 2.95) / (2.95 - 2.80) * (math.log(1150) - math.log(1000)))
    assert close(r[2]["needed"], need2) and r[2]["extrapolated"] and r[2]["saved"] < 0
    assert close(r[2]["saved"], 1 - 1000 / need2)


if __name__ == "__main__":
    run_tests(TESTS)
