#!/bin/bash
# scripts/bench_precision.sh — --precision auto against fp32 and bf16 on this CPU: make bench's three configs
# (8 steps, the median of steps 3-8, 2 threads) and the quick start. Run on a quiet machine (nothing else
# running); step times of identical work vary by several per cent between runs on a VM, and a VM's pace
# drifts over minutes, so each round runs the precisions in the reverse order of the round before it (auto
# first, then last) and the sums over rounds are what to compare. ROUNDS=2 by default (an even count
# balances the order); the quick start's runs are 1-2 minutes each.
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
lscpu | grep "Model name\|CPU family\|^Model:"
git log --oneline -1
order_of() { if [ $(($1 % 2)) -eq 0 ]; then echo "auto fp32 bf16"; else echo "bf16 fp32 auto"; fi; }
for c in "12 4 64" "12 8 256" "6 8 256"; do set -- $c
  for r in $(seq 0 $((ROUNDS - 1))); do
    for p in $(order_of $r); do
      OMP_NUM_THREADS=2 ./train_gpt2 -e d$1 -b $2 -t $3 -x 8 -v 0 -s 0 --precision $p > /tmp/bp_step.log 2>&1
      ms=$(grep -E "^step +[3-8]/" /tmp/bp_step.log | sed -E 's/.*\| ([0-9.]+) ms.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
      pick=$(grep -E "^\| precision" /tmp/bp_step.log | head -1 | tr -s ' ')
      probe=$(grep -E "auto: products" /tmp/bp_step.log | head -1 | tr -s ' ')
      echo "d$1 B$2 T$3 round $r --precision $p: median step (3-8) ${ms} ms | $pick | $probe"
    done
  done
done
declare -A total
for r in $(seq 0 $((ROUNDS - 1))); do
  for p in $(order_of $r); do
    OMP_NUM_THREADS=2 ./train_gpt2 -i 'data/small4096/train_*.bin' -e d2 -b 8 -t 128 -x 2800 -l 3e-3 -u 1000 --beta2 0.99 -q 0.1 -c 0.1 -v 400 -s 0 --precision $p -o /tmp/bp_qs_$p > /tmp/bp_qs_$p.log 2>&1
    t=$(grep '^done' /tmp/bp_qs_$p.log | sed -E 's/.* ([0-9.]+) s training time.*/\1/')
    total[$p]=$(echo "${total[$p]:-0} + $t" | bc)
    echo "quick start round $r --precision $p: ${t} s training time | $(grep -E '^\| precision' /tmp/bp_qs_$p.log | head -1 | tr -s ' ')"
  done
done
echo "quick start over $ROUNDS rounds: auto ${total[auto]} s, fp32 ${total[fp32]} s, bf16 ${total[bf16]} s of training"
echo "auto / faster: $(echo "scale=3; a=${total[auto]}; f=${total[fp32]}; b=${total[bf16]}; m=f; if (b < f) m=b; a / m" | bc)"
