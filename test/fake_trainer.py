#!/usr/bin/python3
"""
test/fake_trainer.py — a stand-in for ./train_gpt2 that writes a synthetic metrics.jsonl in the
format (docs/formats.md), so that compare_hybrid's runner, statistics, report and plots are
tested without the real trainer (and compare_pytorch without the PyTorch reference). Curves depend on the seed, the LR and the hybrid flags; nothing else
about them matters. FAKE_TRAINER_FAIL=<substring of the -o path> makes that run exit with status 3;
FAKE_LOOKAHEAD_SUMMARY=1 adds the look-ahead's counters to a hybrid run's summary.json;
FAKE_VAL_BUMP=<substring of the -o path> adds 1.0 to that run's last val loss (an unstable end).
AdamW's --beta2 (default 0.95, where it changes nothing) moves the val loss by 0.02 x (log2((1 - beta2) / 0.01)^2
- log2(5)^2): best at 0.99, 0.108 lower there than at 0.95, 0.02 higher at 0.995 than at 0.99. --rows random
ends 0.03 + 0.002 x (seed mod 5) lower in val loss than --rows contiguous (the default). --ema DECAY adds
val_loss_ema to each val line: the val loss less 0.02 + 0.001 x (seed mod 7), less FAKE_EMA_TILT x log2(LR / 1e-3)
(0 unless set: a tilt moves the EMA's best LR). --hybrid gpa adds val_loss_gpa (the kept weights), 0.05 +
0.001 x (seed mod 3) below the val loss, less FAKE_GPA_TILT x log2(LR / 1e-3); --hybrid linefit ends 0.05 + 0.002 x (seed mod 3) higher.
"""
import json
import math
import os
import random
import sys

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
if "--write-init" in args:  # the PyTorch reference's way to write an init checkpoint
    with open(args["--write-init"], "wb") as f:
        f.write(b"fake init")
    sys.exit(0)
offset = float(os.environ.get("FAKE_LOSS_OFFSET", "0"))  # added to every loss (compare_pytorch's tests)
out = args["-o"]
if os.environ.get("FAKE_TRAINER_FAIL") and os.environ["FAKE_TRAINER_FAIL"] in out:
    print("fake trainer: failing as asked", file=sys.stderr)
    sys.exit(3)
steps, val_every = int(args.get("-x", "30")), int(args.get("-v", "5"))
lr, seed = float(args.get("-l", "1e-3")), int(args.get("--seed", "1"))
hybrid = args.get("--hybrid", "0") == "1"
method = args.get("--hybrid", "0")
pred = args.get("--predict-steps", "")
rng = random.Random(seed * 1000 + int(lr * 1e6) + len(pred))
B, T = int(args.get("-b", "4")), int(args.get("-t", "64"))
beta2 = float(args.get("--beta2", "0.95"))
if args.get("--rows", "contiguous") not in ("random", "contiguous"):
    print(f"fake trainer: --rows {args['--rows']}: expected random or contiguous", file=sys.stderr)
    sys.exit(1)
val_shift = (0.02 * (math.log2((1.0 - beta2) / 0.01) ** 2 - math.log2(5.0) ** 2) if "--beta2" in args else 0.0) \
    - (0.03 + 0.002 * (seed % 5) if args.get("--rows") == "random" else 0.0) \
    + (0.05 + 0.002 * (seed % 3) if method == "linefit" else 0.0)
ema = "--ema" in args
ema_gain = 0.02 + 0.001 * (seed % 7) + float(os.environ.get("FAKE_EMA_TILT", "0")) * math.log2(lr / 1e-3)
rate = 200 * lr * (1.0 - 0.2 * math.log2(max(lr, 1e-9) / 1e-3) ** 2) + (0.002 if pred == "2" else 0.0)
os.makedirs(out, exist_ok=True)
tt, tokens, backward = 0.0, 0, 0
with open(os.path.join(out, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"step": 0, "phase": "init", "val_loss": 10.0 + rng.random() * 0.01}) + "\n")
    for step in range(1, steps + 1):
        predict = hybrid and step > 5 and step % 3 == 0 and step < 0.8 * steps
        ms = (2.0 if predict else 10.0) + rng.random()
        tt += ms / 1000.0
        if not predict:
            tokens += B * T
            backward += 1
        phase = "predict" if predict else ("correct" if hybrid and step > 5 and step % 3 == 1 else ("warmup" if hybrid and step <= 5 else "full"))
        loss = 3.0 + 7.0 * math.exp(-rate * step) + 0.02 * rng.random() + offset - (0.01 if hybrid else 0.0)
        r = {"step": step, "phase": phase, "loss": None if predict else loss, "lr": lr, "grad_norm": None if predict else 1.0,
             "ms": ms, "train_time_s": tt, "tokens": tokens, "backward": backward}
        if hybrid:
            r.update({"beta": None if predict else 0.3, "predict_run_step": 1 if predict else None, "rollback": 0})
        if step % val_every == 0 or step == steps:
            r["val_loss"] = 3.1 + 7.0 * math.exp(-rate * step) + 0.05 * rng.random() + offset + val_shift
            if step == steps and os.environ.get("FAKE_VAL_BUMP") and os.environ["FAKE_VAL_BUMP"] in out:
                r["val_loss"] += 1.0
            if ema:
                r["val_loss_ema"] = r["val_loss"] - ema_gain
            if method == "gpa":
                r["val_loss_gpa"] = r["val_loss"] - 0.05 - 0.001 * (seed % 3) \
                    - float(os.environ.get("FAKE_GPA_TILT", "0")) * math.log2(lr / 1e-3)
        f.write(json.dumps(r) + "\n")
with open(os.path.join(out, "summary.json"), "w") as f:
    last_val = [r for r in open(os.path.join(out, "metrics.jsonl")) if '"val_loss"' in r][-1]
    summary = {"steps": steps, "train_time_s": tt, "backward": backward, "val_loss": json.loads(last_val)["val_loss"],
               "train_loss": loss}
    if ema:
        summary["val_loss_ema"] = json.loads(last_val)["val_loss_ema"]
    if hybrid and os.environ.get("FAKE_LOOKAHEAD_SUMMARY"):  # the look-ahead's counters (scripts/suite's tests)
        summary["hybrid"] = {"lookahead_cos": 0.25, "lookahead_steps": 6, "lookahead_gated_steps": 2}
    json.dump(summary, f)
print(f"fake trainer: {steps} steps")
