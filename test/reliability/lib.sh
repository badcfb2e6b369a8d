# test/reliability/lib.sh — shared by the reliability tests (sourced, not run).
# Each test drives the real trainer ($LLMC_TRAINER, default ./train_gpt2) on a tiny model (d1, vocab 8192:
# 2.6 MB model files) and tiny shards written by mkfiles.py, in a scratch directory removed at exit.
# Single-threaded, so every run is bit-for-bit reproducible and the suite stays light on a shared machine.

set -u
set -f   # the trainer's -i/-j take glob patterns: the shell must pass them unexpanded
TRAINER=${LLMC_TRAINER:-./train_gpt2}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# --precision auto times both paths at start-up; where they are close (a tiny model, a loaded machine) two fresh
# runs can choose differently, and runs compared bit for bit must not. Pinned as the C tests pin it
# (test/trainer_test_util.h); a value the caller sets wins.
export LLMC_PRECISION_TEST_PROBE=${LLMC_PRECISION_TEST_PROBE:-bf16}
NAME=$(basename "$0" .sh)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/llmc_${NAME}.XXXXXX")
BG_PIDS=""
MOUNTS=""

cleanup() {
    for p in $BG_PIDS; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    for m in $MOUNTS; do umount "$m" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "FAIL [$NAME]: $*" >&2; exit 1; }
note() { echo "[$NAME] $*"; }

[ -x "$TRAINER" ] || fail "trainer $TRAINER not built (run make)"

# train/val shards with vocab 8192 in $WORK/data; the trainer's random init takes its vocab from them
make_data() {
    mkdir -p "$WORK/data"
    $PY "$HERE/mkfiles.py" shard "$WORK/data/train_000000.bin" 6000 8192 1 || fail "mkfiles shard"
    $PY "$HERE/mkfiles.py" shard "$WORK/data/train_000001.bin" 5000 8192 2 || fail "mkfiles shard"
    $PY "$HERE/mkfiles.py" shard "$WORK/data/val_000000.bin" 2000 8192 3 || fail "mkfiles shard"
}

# flags of every run: tiny model, no val, no sampling, fixed seed; a constant LR so that runs with
# different -x follow the same trajectory and can be compared step by step
base_args() {
    echo "-i $WORK/data/train_*.bin -j $WORK/data/val_*.bin -e d1 -b 2 -t 32 -v 0 -s 0 -l 1e-3 -k constant --seed 7 --tokenizer $WORK/none.bin"
}

ckpt() { printf "%s/%s_%08d%s" "$1" "$2" "$3" "$4"; }   # ckpt DIR model|state|DONE STEP SUFFIX
model_of() { ckpt "$1" model "$2" .bin; }
state_of() { printf "%s/state_%08d_00000.bin" "$1" "$2"; }
done_of() { ckpt "$1" DONE "$2" ""; }

# newest step with a DONE marker in $1, or -1
latest_done() {
    local best=-1 f s
    for f in $(ls "$1" 2>/dev/null | grep -E '^DONE_[0-9]{8}$'); do
        s=$((10#${f#DONE_}))
        [ "$s" -gt "$best" ] && best=$s
    done
    echo "$best"
}

# model hash and state hash of checkpoint $2 in dir $1 (the state file minus its header slot for
# wall-clock training seconds, which no two runs share)
ckpt_hash() {
    local m s
    m=$(md5sum < "$(model_of "$1" "$2")" | cut -c1-32) || return 1
    s=$($PY "$HERE/mkfiles.py" statehash "$(state_of "$1" "$2")") || return 1
    echo "$m $s"
}

# the last line of stderr must be one "error: <path>..." line naming the file; rc non-zero, not a signal
expect_error() {   # expect_error RC ERRFILE PATH_SUBSTRING WHAT
    local rc=$1 err=$2 path=$3 what=$4
    [ "$rc" -ne 0 ] || fail "$what: exit status 0, expected an error"
    [ "$rc" -lt 128 ] || fail "$what: died with signal $((rc - 128)): $(tail -3 "$err")"
    grep -q -E "AddressSanitizer|runtime error:|LeakSanitizer" "$err" && fail "$what: sanitizer report: $(grep -m1 -E 'Sanitizer|runtime error' "$err")"
    local last
    last=$(grep -v '^$' "$err" | tail -1)
    case "$last" in
        "error: "*"$path"*) ;;
        *) fail "$what: last stderr line does not name $path: '$last'" ;;
    esac
}
