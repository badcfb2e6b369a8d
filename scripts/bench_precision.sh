#!/bin/bash
# scripts/bench_precision.sh — --precision auto against fp32 and bf16 on this CPU: make bench's three configs
# (8 steps, the median of steps 3-8, 2 threads) and the quick start, each precision in turn. Run on a quiet
# machine (nothing else running); step times of identical work vary by several per cent between runs on a VM.
cd "$(dirname "$0")/.."
lscpu | grep "Model name\|CPU family\|^Model:"
git log --oneline -1
for c in "12 4 64" "12 8 256" "6 8 256"; do set -- $c
  for p in auto fp32 bf16; do
    OMP_NUM_THREADS=2 ./train_gpt2 -e d$1 -b $2 -t $3 -x 8 -v 0 -s 0 --precision $p > /tmp/b59.log 2>&1
    ms=$(grep -E "^step +[3-8]/" /tmp/b59.log | sed -E 's/.*\| ([0-9.]+) ms.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    pick=$(grep -E "^\| precision" /tmp/b59.log | head -1 | tr -s ' ')
    probe=$(grep -E "auto: products" /tmp/b59.log | head -1 | tr -s ' ')
    echo "d$1 B$2 T$3 --precision $p: median step (3-8) ${ms} ms | $pick | $probe"
  done
done
for p in auto fp32 bf16; do
  s=$(date +%s.%N)
  OMP_NUM_THREADS=2 ./train_gpt2 -i 'data/small4096/train_*.bin' -e d2 -b 8 -t 128 -x 2800 -l 2e-3 -u 140 -q 0.1 -c 0.1 -v 400 -s 0 --precision $p -o /tmp/qs59_$p > /tmp/qs59_$p.log 2>&1
  e=$(date +%s.%N)
  echo "quick start --precision $p: wall $(echo "$e - $s" | bc) s, $(grep '^done' /tmp/qs59_$p.log) | $(grep -E '^\| precision' /tmp/qs59_$p.log | head -1 | tr -s ' ')"
done
