#!/usr/bin/env bash
# dev/cuda/layout_d12.sh — does drawing each row of a batch from its own place (--rows random, the default)
# still beat llm.c's layout (--rows contiguous: a micro batch's rows one run of text) at GPT-2 124M's size?
# The held-out suite measured the gain on small models and small text; this asks it at d12 (768 channels, 12
# layers), T 1024, 16 rows a step, on the large held-out corpus (data/prepare_large.sh's linux-doc, read about
# 0.6 times), llm.c's GPT-2 small learning rate for both layouts (not tuned here, the same for both).
#   dev/cuda/layout_d12.sh OUT_DIR [TRAINER]        (TRAINER default ./train_gpt2cu)
# Runs both layouts on SEEDS (default "1 2") side by side on one GPU, then prints the val loss of each run
# at a few steps and each seed's difference at the end (random - contiguous: negative, rows apart lower).
# Environment: STEPS [300]  LR [6e-4]  WARMUP [30]  DATA [data/large/linux-doc]  SEEDS [1 2]  TMO [900 s].
set -u
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [TRAINER]" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 1
OUTD=$1 TRAINER=${2:-./train_gpt2cu}
STEPS=${STEPS:-300} LR=${LR:-6e-4} WARMUP=${WARMUP:-30} DATA=${DATA:-data/large/linux-doc} SEEDS=${SEEDS:-1 2}
TMO=${TMO:-900}
[ -f "$DATA/train_000000.bin" ] || { echo "$DATA: no shards (run data/prepare_large.sh)" >&2; exit 1; }
mkdir -p "$OUTD" || exit 1
pids=()
for layout in contiguous random; do
    for seed in $SEEDS; do
        d=$OUTD/${layout}_seed$seed
        rm -rf "$d"
        timeout "$TMO" "$TRAINER" -i "$DATA/train_*.bin" -j "$DATA/val_*.bin" -e d12 -b 16 -t 1024 -d 16384 \
            -x "$STEPS" -l "$LR" -u "$WARMUP" -k cosine -q 0.1 -c 0.1 -v 25 -m 20 -s 0 --rows "$layout" \
            --seed "$seed" -o "$d" > "$d.out" 2>&1 &
        pids+=($!)
    done
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail = 0 ] || { echo "a run failed: see $OUTD/*.out" >&2; tail -n 3 "$OUTD"/*.out >&2; }
python3 - "$OUTD" "$STEPS" $SEEDS <<'PYEOF'
import json, os, sys
out, steps, seeds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def val(d):
    p = os.path.join(out, d, "metrics.jsonl")
    if not os.path.exists(p):
        return {}
    return {r["step"]: r["val_loss"] for r in map(json.loads, open(p)) if r.get("val_loss") is not None}
at = sorted({0, steps // 6, steps // 3, 2 * steps // 3, steps})
print("| run | " + " | ".join(f"val loss at {s}" for s in at) + " |")
print("|---|" + "---|" * len(at))
runs = {(l, s): val(f"{l}_seed{s}") for l in ("contiguous", "random") for s in seeds}
for (l, s), v in runs.items():
    print(f"| {l}, seed {s} | " + " | ".join(f"{v[k]:.4f}" if k in v else "-" for k in at) + " |")
for s in seeds:
    a, b = runs[("contiguous", s)], runs[("random", s)]
    last = max(set(a) & set(b), default=None)
    if last is not None:
        print(f"seed {s}: random - contiguous at step {last}: {b[last] - a[last]:+.4f}")
PYEOF
exit $fail
