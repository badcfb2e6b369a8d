#!/bin/bash
# test/reliability/test_diskfull.sh — a checkpoint that does not fit: one "error:" line naming the file,
# a non-zero exit, the previous checkpoint intact (bit-identical), no partial file left behind, and a
# resume once there is room again continues bit-exactly. Two ways to run out of room: a file-size limit
# (ulimit -f, EFBIG; always) and a full tmpfs (ENOSPC; when this user may mount one, e.g. root).
source "$(dirname "$0")/lib.sh"
make_data
ARGS=$(base_args)   # constant schedule: a 1-step run resumed with -x 2 (--allow-changed 1) equals a 2-step run

$TRAINER $ARGS -o "$WORK/ref" -n 1 -x 2 > "$WORK/ref.log" 2>&1 || { tail -5 "$WORK/ref.log"; fail "reference run failed"; }
REF1=$(ckpt_hash "$WORK/ref" 1)
REF2=$(ckpt_hash "$WORK/ref" 2)
model_kb=$(( $(stat -c %s "$(model_of "$WORK/ref" 1)") / 1024 ))

# full_disk_case DIR LABEL CMD_PREFIX...: step 1 fits, step 2 does not
full_disk_case() {
    local dir=$1 label=$2
    shift 2
    "$@" $TRAINER $ARGS -o "$dir" -n 1 -x 2 -y 1 --allow-changed 1 > "$WORK/$label.out" 2> "$WORK/$label.err"
    local rc=$?
    expect_error $rc "$WORK/$label.err" "$dir" "$label"
    [ "$(latest_done "$dir")" -eq 1 ] || fail "$label: DONE marker for the failed checkpoint (latest $(latest_done "$dir"))"
    [ "$(ckpt_hash "$dir" 1)" = "$REF1" ] || fail "$label: previous checkpoint damaged"
    ls "$dir" | grep -q '\.tmp$' && fail "$label: partial file left behind: $(ls "$dir" | grep '\.tmp$')"
    note "$label: $(tail -1 "$WORK/$label.err")"
}

# 1. file-size limit: SIGXFSZ ignored so that write() fails with EFBIG, as a real full disk fails.
# At half the model size the model file fails; at 1.5x the model file is committed and the state file
# (2x, AdamW m and v) fails: model_2.bin then exists without DONE_2, and the resume must ignore it.
cases=""
for limit_kb in $((model_kb / 2)) $((model_kb * 3 / 2)); do
    rm -rf "$WORK/lim"
    mkdir -p "$WORK/lim"
    $TRAINER $ARGS -o "$WORK/lim" -n 1 -x 1 > "$WORK/lim1.log" 2>&1 || { tail -5 "$WORK/lim1.log"; fail "step 1 run failed"; }
    limited() { ( trap '' XFSZ; ulimit -f $limit_kb; exec "$@" ); }
    full_disk_case "$WORK/lim" "file-size limit ${limit_kb} KB" limited
    $TRAINER $ARGS -o "$WORK/lim" -n 1 -x 2 -y 1 --allow-changed 1 > "$WORK/lim2.log" 2>&1 || { tail -5 "$WORK/lim2.log"; fail "resume after the limit failed"; }
    grep -q -E "resumed from step +\| +1 " "$WORK/lim2.log" || fail "file-size limit: did not resume from step 1"
    [ "$(ckpt_hash "$WORK/lim" 2)" = "$REF2" ] || fail "file-size limit: resume not bit-exact"
    cases="$cases file-size limit ${limit_kb} KB,"
done

# 2. a tmpfs just big enough for checkpoint 1 (where mounting is allowed)
mkdir -p "$WORK/disk"
if mount -t tmpfs -o size=64m tmpfs "$WORK/disk" 2>/dev/null; then
    MOUNTS="$WORK/disk"
    $TRAINER $ARGS -o "$WORK/disk" -n 1 -x 1 > "$WORK/disk1.log" 2>&1 || { tail -5 "$WORK/disk1.log"; fail "tmpfs: step 1 run failed"; }
    used_kb=$(du -sk "$WORK/disk" | cut -f1)
    mount -o remount,size=$((used_kb + model_kb / 2))k "$WORK/disk" || fail "cannot shrink the tmpfs"
    full_disk_case "$WORK/disk" "full tmpfs" env
    mount -o remount,size=64m "$WORK/disk" || fail "cannot grow the tmpfs"
    $TRAINER $ARGS -o "$WORK/disk" -n 1 -x 2 -y 1 --allow-changed 1 > "$WORK/disk2.log" 2>&1 || { tail -5 "$WORK/disk2.log"; fail "tmpfs: resume failed"; }
    [ "$(ckpt_hash "$WORK/disk" 2)" = "$REF2" ] || fail "full tmpfs: resume not bit-exact"
    cases="$cases full tmpfs"
else
    note "cannot mount a tmpfs here (not root?): the ENOSPC case is skipped, EFBIG covers the same path"
fi
note "ok:${cases%,}"
