#!/bin/sh
# test/run_tests.sh — runs the tests it is given in order (make test, make check), keeps going past a failure,
# and ends with each test's wall time and CPU time (user + system, its processes together; on a shared machine
# the steadier of the two), slowest first, and the totals; exits 1 if any failed.
# The test programs that include the trainer run without its start-up (llmc/cpu_blas.h), which sets libgomp's
# wait policy to passive: without it, the threads of one test spin between parallel regions and take the cores
# from the test Criterion runs beside it. A policy the caller set wins.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# --precision auto times both precisions at start-up where the CPU has native bf16; on a CPU where the two are
# close that answer can differ from one run to the next under load, and a test comparing two runs bit for bit
# would compare two precisions. Every test gets the answer pinned (bf16, as trainer_test_util.h and
# reliability/lib.sh pin it when run alone); the tests of the probe itself set or unset it, and the benchmark's
# (scripts/bench.py) run without it.
export LLMC_PRECISION_TEST_PROBE="${LLMC_PRECISION_TEST_PROBE:-bf16}"
times=$(mktemp); trap 'rm -f "$times"' EXIT
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{ printf "%.2f", ($16 + $17) / t }' /proc/$$/stat; }  # this shell's finished children
fail=0
start=$(date +%s.%N)
for t in "$@"; do
    echo "== $t"
    t0=$(date +%s.%N); c0=$(cpu)
    if ./"$t"; then r=ok; else r=FAILED; fail=1; fi
    awk -v a="$t0" -v b="$(date +%s.%N)" -v c0="$c0" -v c1="$(cpu)" -v t="$t" -v r="$r" \
        'BEGIN { printf "%.1f %.1f %s %s\n", b - a, c1 - c0, t, r }' >> "$times"
done
echo "== times: wall s, CPU s, test"
sort -rn "$times" | awk '{ printf "%8.1f %8.1f  %s%s\n", $1, $2, $3, $4 == "ok" ? "" : "  (FAILED)"; c += $2 }
                         END { printf "%17.1f  CPU total\n", c }'
awk -v a="$start" -v b="$(date +%s.%N)" -v n="$#" 'BEGIN { printf "%8.1f  wall total, %d tests\n", b - a, n }'
exit $fail
