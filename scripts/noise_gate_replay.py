#!/usr/bin/python3
"""
noise_gate_replay — what hybrid mode's noise gate sees on a finished run: the running gradient noise scale
(hybrid/lookahead.h: EMAs, weight 0.05, of the per-step estimates of the noise's trace S and of |G|^2 from
the first micro batch's gradient norm and the step's, as the trainer logs them in metrics.jsonl) at each
step of the look-ahead's window, and on how many of those steps a gate of --ratio would have been closed.

    scripts/noise_gate_replay.py out/run                         # a baseline run: would the gate open?
    scripts/noise_gate_replay.py out/run --ratio 2 --every 50    # another ratio, a line every 50 steps

On a baseline run it says what a `--hybrid --lookahead B` run with the same flags would do for as long as its gate stays
closed: until then the two runs are the same run, bit for bit. On a hybrid run it repeats the trainer's own
numbers (`lookahead_gated_steps`, `noise_scale_running` in summary.json), which the tests check.
The window is hybrid mode's default, from 10% of the schedule to its end, unless --start/--stop or --cooldown
say otherwise (--cooldown 0.3: the default window before no cool-down became the default).
Needs a run with two or more micro batches per step (with one nothing is measured and the gate stays open).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import comparelib as cl  # noqa: E402
from comparelib import die  # noqa: E402

ALPHA = 0.05  # LOOKAHEAD_NOISE_ALPHA


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("run", help="a run's output folder (-o), with metrics.jsonl and summary.json")
    p.add_argument("--ratio", type=float, default=2.0, help="the gate's ratio, --noise-gate (default 2, the trainer's)")
    p.add_argument("--start", type=int, help="the window's first step, 0-based (default: 10%% of the schedule)")
    p.add_argument("--stop", type=int, help="the step after the window (default: the end of the schedule, no cool-down)")
    p.add_argument("--cooldown", type=float, default=0.0,
                   help="the run's --hybrid-cooldown: the window stops at (1 - this) of the schedule (default 0)")
    p.add_argument("--every", type=int, default=0, help="also print the running B_noise every N steps")
    p.add_argument("--processes", type=int, default=1, help="processes (GPUs) of the run (default 1)")
    a = p.parse_args()
    mpath, spath = os.path.join(a.run, "metrics.jsonl"), os.path.join(a.run, "summary.json")
    try:
        total = json.load(open(spath))["steps"]
    except (OSError, ValueError, KeyError) as e:
        die(f"{spath}: not a finished run's summary ({e})")
    try:
        recs = cl.read_metrics(mpath)
    except cl.CompareError as e:
        die(str(e))
    tps, backward = cl.step_shape(recs)
    if tps is None:
        die(f"{mpath}: no two consecutive step lines")
    bb, micro = float(tps), backward * a.processes
    if micro < 2:
        die(f"{mpath}: one micro batch per step: the noise scale is not measured, the gate stays open")
    b = bb / micro
    start = a.start if a.start is not None else int(0.1 * total + 0.5)
    stop = a.stop if a.stop is not None else int((1.0 - a.cooldown) * total)
    s_ema = g2_ema = 0.0
    n = closed = window = 0
    peak = 0.0
    for r in recs:
        if "grad_norm" not in r:
            continue  # the initial val line
        k = r["step"] - 1  # 0-based: the step's plan sees the estimate of the steps before it
        if start <= k < stop:
            window += 1
            gated = n > 0 and not s_ema >= a.ratio * bb * g2_ema
            closed += gated
            if n > 0:
                peak = max(peak, s_ema / g2_ema if g2_ema > 0 else float("inf"))
        gb, gbb = r.get("grad_norm_micro1"), r.get("grad_norm")
        if gb is None or gbb is None or r.get("skipped"):
            continue
        s, g2 = cl.noise_terms(gb, gbb, b, bb)
        s_ema += ALPHA * (s - s_ema)
        g2_ema += ALPHA * (g2 - g2_ema)
        n += 1
        if a.every and r["step"] % a.every == 0:
            print(f"step {r['step']:6d}: running B_noise {s_ema / g2_ema:10.0f} tokens")
    end = s_ema / g2_ema if n and g2_ema > 0 else float("nan")
    print(f"{a.run}: {bb:.0f} tokens per step, gate at {a.ratio:g} x that = {a.ratio * bb:.0f} tokens; window "
          f"[{start}, {stop}): closed on {closed} of {window} steps; highest running B_noise in it {peak:.0f}, "
          f"at the end {end:.0f} tokens")


if __name__ == "__main__":
    main()
