#!/usr/bin/env bash
# dev/cuda/bench_hybrid_gpu.sh — hybrid mode on the GPU: step time by phase and device memory over a long run.
#   dev/cuda/bench_hybrid_gpu.sh OUT_DIR [BINARY (default ./train_gpt2cu)]
# Three runs of the same model, data and seed: the baseline (--hybrid 0), the look-ahead at beta0 0.5
# (the default where the gate measures; a run of one micro batch per step, as here, gets none by default)
# and hybrid mode with Predict runs (--predict-steps H). Per run: the median
# step time of each phase (metrics.jsonl's "ms"; steps after WARM), and the GPU's used memory as nvidia-smi
# reports it, sampled every half second once the run has logged SETTLE steps: hybrid mode allocates nothing
# after start-up, so min and max must agree (the line says "constant" or "GREW"). Environment:
#   DEPTH [12]  B [8]  T [1024]  STEPS [1000]  WARM [10]  SETTLE [20]  H [4]  DATA [data/default]  TMO [400]
#   ORDER ["baseline lookahead predict"]: the order the runs are made in (a drift of the GPU's speed over
#   the minutes of the benchmark shows as a difference between runs; another order tells it apart)
# Exits 1 if a run failed or the memory of any run grew.
set -u
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [BINARY]" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 1
OUT=$1 BIN=${2:-./train_gpt2cu}
mkdir -p "$OUT" || exit 1
DEPTH=${DEPTH:-12} B=${B:-8} T=${T:-1024} STEPS=${STEPS:-1000} WARM=${WARM:-10} SETTLE=${SETTLE:-20}
H=${H:-4} DATA=${DATA:-data/default} TMO=${TMO:-400} ORDER=${ORDER:-baseline lookahead predict}
FLAGS=(-e "d$DEPTH" -b "$B" -t "$T" -x "$STEPS" -v 0 -s 0 -n 0 -l 6e-4 -u 100 -i "$DATA/train_*.bin")
echo "bench_hybrid_gpu: $(date -u), GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
echo "flags: ${FLAGS[*]}"
FAILED=0
arm() {  # NAME FLAGS...
    local name=$1 dir=$OUT/$1 pid n mem
    shift
    rm -rf "$dir"
    timeout "$TMO" "$BIN" "${FLAGS[@]}" "$@" -o "$dir" > "$OUT/$name.log" 2>&1 &
    pid=$!
    : > "$OUT/$name.mem"
    while kill -0 $pid 2> /dev/null; do
        n=0
        [ -f "$dir/metrics.jsonl" ] && n=$(wc -l < "$dir/metrics.jsonl")
        mem=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | head -n 1)
        echo "$n $mem" >> "$OUT/$name.mem"
        sleep 0.5
    done
    wait $pid || { FAILED=1; echo "$name: exit $?"; tail -n 5 "$OUT/$name.log"; }
}
for name in $ORDER; do
    case $name in
        baseline) arm baseline --hybrid 0 ;;
        lookahead) arm lookahead --hybrid 1 --lookahead 0.5 ;;
        predict) arm predict --hybrid 1 --lookahead 0.5 --predict-steps "$H" ;;
        *) echo "ORDER: unknown run '$name' (baseline, lookahead, predict)"; exit 2 ;;
    esac
done
python3 - "$OUT" "$WARM" "$SETTLE" "$STEPS" <<'PYEOF'
import json, os, re, statistics, sys
out, warm, settle, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
grew = False
base = None
print(f"\n{'run':<10} {'phase':<8} {'steps':>6} {'median ms':>10} {'x baseline full':>16}   device memory (MiB)")
for name in ("baseline", "lookahead", "predict"):
    try:
        recs = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl"))]
    except OSError:
        print(f"{name:<10} no metrics"); continue
    mem = [tuple(map(int, l.split())) for l in open(os.path.join(out, name + ".mem")) if len(l.split()) == 2]
    # while training: from step SETTLE until the last step is logged (then the process frees its memory)
    late = [m for n, m in mem if settle <= n < steps]
    # the trainer's own lines: "device memory (...): X MiB in use" at start-up, every phase change, the end
    own = sorted({float(x) for x in re.findall(r"device memory \([^)]*\): ([\d.]+) MiB in use",
                                                open(os.path.join(out, name + ".log")).read())})
    memline = (f"{min(late)}..{max(late)} over {len(late)} samples, steps {settle}..{steps - 1}: "
               + ("constant" if min(late) == max(late) else "GREW")) if late else "no samples"
    memline += f"; trainer's own lines: {', '.join(f'{x:.1f}' for x in own)}"
    if (late and min(late) != max(late)) or len(own) > 2:
        grew = True
    phases = {}
    for r in recs:
        if r.get("step", 0) > warm and r.get("ms") is not None:
            phases.setdefault(r.get("phase", "?"), []).append(r["ms"])
    first = True
    for ph in sorted(phases, key=lambda p: -len(phases[p])):
        med = statistics.median(phases[ph])
        if name == "baseline" and base is None:
            base = med
        ratio = f"{med / base:.3f}x" if base else ""
        print(f"{name if first else '':<10} {ph:<8} {len(phases[ph]):>6} {med:>10.2f} {ratio:>16}   {memline if first else ''}")
        first = False
sys.exit(1 if grew else 0)
PYEOF
rc=$?
[ $rc -eq 0 ] || FAILED=1
exit $FAILED
