#!/usr/bin/env bash
# dev/cuda/suite_lease.sh — a held-out suite study on a borrowed GPU machine, inside the time it is lent for,
# with every finished run brought back. Such a machine goes back with everything on it and returns only a few
# files of limited size, so the study stops on time and its runs are packed small first:
#   dev/cuda/suite_lease.sh OUT_DIR SECONDS CONFIG [scripts/suite arguments...]
#   e.g. dev/cuda/suite_lease.sh "$OUT" 480 configs/suite/methods_r2_gpu.json --cell d4_b4x4 --corpus perl-doc --jobs 12
# 1. Builds train_gpt2cu if it is not there; OUT_DIR/train_gpt2cu.sha256 names the binary that ran.
# 2. Unpacks SUITE_RESTORE (a suite_runs.tgz of an earlier lease, if given): the suite resumes from it.
# 3. Runs scripts/suite with the CONFIG and the arguments for at most SECONDS (it stops its runs; unfinished
#    ones start over next time).
# 4. Packs each run's DONE, cmd.txt and summary.json, all the suite needs to resume and report, into
#    OUT_DIR/suite_runs.tgz, and the runs' metrics.jsonl into OUT_DIR/suite_metrics.tgz only if that stays
#    under 15 MB (one returned file's limit is 16 MB).
# Give the call a time limit some 30 s above SECONDS for the build check and the packing.
set -u
[ $# -ge 3 ] || { echo "usage: $0 OUT_DIR SECONDS CONFIG [scripts/suite arguments...]" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 1
OUTD=$1 SECS=$2 CONFIG=$3
shift 3
mkdir -p "$OUTD" || exit 1
export PYTHONUNBUFFERED=1
# python: the first of $PYTHON, /usr/bin/python3, python3 that has numpy (the suite's statistics need it)
PY=python3
for cand in "${PYTHON:-}" /usr/bin/python3 python3; do
    if [ -n "$cand" ] && "$cand" -c "import numpy" > /dev/null 2>&1; then PY=$cand; break; fi
done
# the results folder as the suite reads the config (a config made from another may take its base's)
RESULTS=$("$PY" -c 'import importlib.machinery as m, importlib.util as u, sys
ld = m.SourceFileLoader("suite", "scripts/suite"); s = u.module_from_spec(u.spec_from_loader("suite", ld)); ld.exec_module(s)
print(s.read_config(sys.argv[1])["results"])' "$CONFIG") || exit 1
if [ ! -x train_gpt2cu ]; then
    make --no-print-directory -j"$(nproc)" train_gpt2cu > "$OUTD/build.log" 2>&1 || { tail -n 5 "$OUTD/build.log"; exit 1; }
fi
sha256sum train_gpt2cu | tee "$OUTD/train_gpt2cu.sha256"
if [ -n "${SUITE_RESTORE:-}" ]; then
    tar xzf "$SUITE_RESTORE" || { echo "$SUITE_RESTORE: cannot unpack" >&2; exit 1; }
    echo "restored $(find "$RESULTS" -name DONE | wc -l) finished runs from $SUITE_RESTORE"
fi
timeout "$SECS" "$PY" scripts/suite --config "$CONFIG" --trainer ./train_gpt2cu --progress-every 60 "$@" > "$OUTD/suite.log" 2>&1
rc=$?
echo "scripts/suite exit $rc after $SECONDS s (124: stopped at $SECS s)"
tail -n 4 "$OUTD/suite.log"
[ -d "$RESULTS" ] || { echo "no $RESULTS: nothing to pack"; exit 1; }
# what the suite reads back: the small files of every run and every cell's report
find "$RESULTS" \( -name DONE -o -name cmd.txt -o -name summary.json -o -name report.md -o -name runs.csv \) -print0 |
    tar czf "$OUTD/suite_runs.tgz" --null -T - || exit 1
echo "packed $(find "$RESULTS" -name DONE | wc -l) finished runs: $(stat -c %s "$OUTD/suite_runs.tgz") bytes"
find "$RESULTS" -name metrics.jsonl -print0 | tar czf "$OUTD/suite_metrics.tgz" --null -T -
if [ "$(stat -c %s "$OUTD/suite_metrics.tgz")" -gt 15000000 ]; then
    echo "the metrics ($(stat -c %s "$OUTD/suite_metrics.tgz") bytes packed) are over 15 MB: left behind"
    rm -f "$OUTD/suite_metrics.tgz"
fi
exit 0
