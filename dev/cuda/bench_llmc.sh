#!/usr/bin/env bash
# dev/cuda/bench_llmc.sh — training speed of our train_gpt2cu next to llm.c's, on one GPU, in one run:
#   dev/cuda/bench_llmc.sh OUT_DIR NAME=BINARY [NAME=BINARY ...]
# e.g. dev/cuda/bench_llmc.sh /tmp/bench ours=./train_gpt2cu llmc=../llm.c/train_gpt2cu
# llm.c is not part of this repository: build its train_gpt2cu from its own source on the same machine.
# Every binary trains the same random-init model (-e d$DEPTH) on the same shards with the same batch, the runs
# interleaved (REPS rounds of every binary in turn) so that a drift of the card's clock shows as spread, not
# as a difference. Both programs take llm.c's flags (-e -b -t -d -x -r -z -v -s -i -j). Per run: the median
# step time over steps WARM+1..STEPS (each program's own "N ms" column, which times the whole step), tok/s =
# tokens per step / that median, and the program's own MFU column. Environment (defaults in brackets):
#   DEPTH [12]  B [64]  T [1024]  TOTAL [524288 tokens per step]  STEPS [20]  WARM [3]  REPS [2]
#   RECOMPUTE [1]  DATA [data/default]  TMO [300 s per run]
# Prints a table; OUT_DIR keeps every run's output. Exits 1 if any run failed.
# --parse OUT_DIR NAME=BINARY ...: the table again from the logs already in OUT_DIR (nothing runs).
set -u
PARSE_ONLY=0
if [ "${1:-}" = "--parse" ]; then PARSE_ONLY=1; shift; fi
[ $# -ge 2 ] || { echo "usage: $0 [--parse] OUT_DIR NAME=BINARY [NAME=BINARY ...]" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 1
OUT=$1
shift
mkdir -p "$OUT" || exit 1
DEPTH=${DEPTH:-12} B=${B:-64} T=${T:-1024} TOTAL=${TOTAL:-524288} STEPS=${STEPS:-20} WARM=${WARM:-3}
REPS=${REPS:-2} RECOMPUTE=${RECOMPUTE:-1} DATA=${DATA:-data/default} TMO=${TMO:-300}
FLAGS=(-e "d$DEPTH" -b "$B" -t "$T" -d "$TOTAL" -x "$STEPS" -r "$RECOMPUTE" -z 0 -v 100000 -s 100000
       -i "$DATA/train_*.bin" -j "$DATA/val_*.bin")
[ $PARSE_ONLY = 1 ] && REPS=0
[ $PARSE_ONLY = 1 ] || echo "bench_llmc: $(date -u), GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
[ $PARSE_ONLY = 1 ] || echo "flags: ${FLAGS[*]}"
FAILED=0
for rep in $(seq 1 "$REPS"); do
    for pair in "$@"; do
        name=${pair%%=*} bin=${pair#*=}
        log="$OUT/${name}_rep$rep.log"
        echo "--- $name (round $rep): $bin"
        timeout "$TMO" "$bin" "${FLAGS[@]}" > "$log" 2>&1
        rc=$?
        [ $rc -eq 0 ] || { FAILED=1; echo "exit $rc:"; tail -n 5 "$log"; }
    done
done
python3 - "$OUT" "$TOTAL" "$WARM" "$@" <<'PYEOF'
import glob, os, re, statistics, sys
out, total, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = [a.split("=", 1)[0] for a in sys.argv[4:]]
# the MFU column: a percentage, or n/a / a negative one (llm.c's when it does not know the card's peak)
step_re = re.compile(r"^step\s+(\d+)/\d+ \|.*?\|\s*([\d.]+) ms \|\s*(-?[\d.]+%|n/a)[^|]*MFU")
rows, best = [], {}
for name in names:
    for log in sorted(glob.glob(os.path.join(out, f"{name}_rep*.log"))):
        ms, mfu = [], []
        for line in open(log, errors="replace"):
            m = step_re.match(line)
            if m and int(m.group(1)) > warm:
                ms.append(float(m.group(2)))
                if m.group(3) != "n/a" and not m.group(3).startswith("-"): mfu.append(float(m.group(3)[:-1]))
        if not ms:
            rows.append((name, os.path.basename(log), "no step lines", "", "")); continue
        med = statistics.median(ms)
        tok = total / med * 1000.0
        best.setdefault(name, []).append(tok)
        rows.append((name, os.path.basename(log), f"{med:.1f}", f"{tok:,.0f}", f"{statistics.median(mfu):.1f}%" if mfu else "n/a"))
print(f"\n{'binary':<16} {'run':<24} {'median ms/step':>15} {'tok/s':>12} {'own MFU':>8}")
for r in rows:
    print(f"{r[0]:<16} {r[1]:<24} {r[2]:>15} {r[3]:>12} {r[4]:>8}")
if len(best) >= 2:
    base = names[-1]
    if base in best:
        b = statistics.mean(best[base])
        for n in names[:-1]:
            if n in best:
                print(f"{n} / {base}: {statistics.mean(best[n]) / b:.3f}x tok/s (mean of rounds; rounds spread "
                      f"{min(best[n]) / max(best[n]):.3f}..1 and {min(best[base]) / max(best[base]):.3f}..1)")
PYEOF
exit $FAILED
