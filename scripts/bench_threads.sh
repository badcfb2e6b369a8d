#!/usr/bin/env bash
# scripts/bench_threads.sh — the OpenMP wait policy, measured: step time of train_gpt2 (dev/bench_gpt2, d6 B8
# T256 by default) under each policy, on the machine as it is ("quiet") and with one competing busy process
# per core ("loaded", `yes > /dev/null`). Prints a markdown table: median ms per step and the slowdown
# against the best policy of the same column. "default" is what our programs set when the user sets nothing
# (llmc/cpu_blas.h). Needs build/bench_gpt2 (make build/bench_gpt2). Takes a few minutes.
# usage: scripts/bench_threads.sh [depth=6] [B=8] [T=256] [steps=5] [threads=2]
# (POLICIES="..." and LOADS="quiet" or "loaded" narrow the run)
set -euo pipefail
cd "$(dirname "$0")/.."
depth=${1:-6} B=${2:-8} T=${3:-256} steps=${4:-5} threads=${5:-2}
[ -x build/bench_gpt2 ] || { echo "error: build/bench_gpt2 missing (make build/bench_gpt2)" >&2; exit 1; }
policies=(${POLICIES:-"default" "OMP_WAIT_POLICY=passive" "OMP_WAIT_POLICY=active" "GOMP_SPINCOUNT=10000"
          "GOMP_SPINCOUNT=100000" "GOMP_SPINCOUNT=1000000"})
bench=$(mktemp /tmp/bench_gpt2.XXXXXX)  # a private copy: a rebuild during the run changes nothing
cp build/bench_gpt2 "$bench" && chmod +x "$bench"
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; hogs=(); }
trap 'stop_hogs; rm -f "$bench"' EXIT
run() {  # $1: policy; prints the median ms
    local envs=(-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u LLMC_BLAS_REEXEC OMP_NUM_THREADS="$threads")
    [ "$1" != "default" ] && envs+=("$1")
    env "${envs[@]}" "$bench" "$depth" "$B" "$T" "$steps" 1 | sed 's/.*"median_ms": \([0-9.]*\).*/\1/'
}
declare -A ms
for load in ${LOADS:-quiet loaded}; do
    if [ "$load" = loaded ]; then
        for _ in $(seq "$(nproc)"); do yes > /dev/null & hogs+=($!); done
    fi
    for p in "${policies[@]}"; do ms[$load,$p]=$(run "$p"); echo "  $load $p: ${ms[$load,$p]} ms" >&2; done
    stop_hogs
done
best() { local b=""; for p in "${policies[@]}"; do v=${ms[$1,$p]}; if [ -z "$b" ] || awk "BEGIN{exit !($v < $b)}"; then b=$v; fi; done; echo "$b"; }
cell() {  # $1 load, $2 policy: "ms | +x%" against the best of that load, or "- | -" when not measured
    local v=${ms[$1,$2]:-}
    if [ -z "$v" ]; then echo "- | -"; return; fi
    local b; b=$(best "$1")
    printf "%.0f | %+.1f%%" "$v" "$(awk "BEGIN{print 100*($v/$b-1)}")"
}
echo "| wait policy | quiet ms/step | vs best | loaded ($(nproc) busy processes) ms/step | vs best |"
echo "|---|---|---|---|---|"
for p in "${policies[@]}"; do echo "| $p | $(cell quiet "$p") | $(cell loaded "$p") |"; done
echo
echo "d$depth B=$B T=$T, $threads threads, median of $((steps - 1)) steps after 1 warm-up; $("$bench" 1 1 8 2 1 | sed 's/.*"blas": "\([^"]*\)".*/\1/')"
