#!/bin/sh
# test/run_tests.sh — runs the tests it is given in order (make test, make check), keeps going past a failure,
# and ends with each test's wall time, slowest first, and the total; exits 1 if any failed.
times=$(mktemp); trap 'rm -f "$times"' EXIT
fail=0
start=$(date +%s.%N)
for t in "$@"; do
    echo "== $t"
    t0=$(date +%s.%N)
    if ./"$t"; then r=ok; else r=FAILED; fail=1; fi
    awk -v a="$t0" -v b="$(date +%s.%N)" -v t="$t" -v r="$r" 'BEGIN { printf "%.1f %s %s\n", b - a, t, r }' >> "$times"
done
echo "== times (s)"
sort -rn "$times" | awk '{ printf "%8.1f  %s%s\n", $1, $2, $3 == "ok" ? "" : "  (FAILED)" }'
awk -v a="$start" -v b="$(date +%s.%N)" -v n="$#" 'BEGIN { printf "%8.1f  total, %d tests\n", b - a, n }'
exit $fail
