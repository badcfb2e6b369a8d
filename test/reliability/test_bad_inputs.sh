#!/bin/bash
# test/reliability/test_bad_inputs.sh — every file the project reads, damaged one way at a time: the
# trainer (token shards, model files, checkpoints on resume, tokenizer file, flags) and ./tokenize
# (vocabulary files, text input, shards to decode). Each case must end with one "error: ..." line on
# stderr that names the file (or flag), a non-zero exit status, and no crash or sanitizer report.
source "$(dirname "$0")/lib.sh"
TOKENIZE=${LLMC_TOKENIZE:-./tokenize}
make_data
D=$WORK/data
ARGS="-j $D/val_*.bin -b 2 -t 32 -v 0 -s 0 -x 1 --seed 7"
n=0

# bad LABEL NAMED_IN_ERROR COMMAND...: the command must fail cleanly naming NAMED_IN_ERROR
bad() {
    local label=$1 named=$2
    shift 2
    "$@" > "$WORK/out" 2> "$WORK/err"
    expect_error $? "$WORK/err" "$named" "$label"
    [ -n "${VERBOSE:-}" ] && note "$label: $(grep -v "^$" "$WORK/err" | tail -1)"
    n=$((n + 1))
}
mkf() { $PY "$HERE/mkfiles.py" "$@" || fail "mkfiles $*"; }
shard_case() {   # shard_case LABEL: $WORK/bad/train_000000.bin was prepared; train on it
    bad "shard: $1" "$WORK/bad/train_000000.bin" $TRAINER -i "$WORK/bad/train_*.bin" -e d1 $ARGS
}

# ---- token shards
mkdir -p "$WORK/bad"
S=$WORK/bad/train_000000.bin
bad "shard: no file matches" "$WORK/none_*.bin" $TRAINER -i "$WORK/none_*.bin" -e d1 $ARGS
: > "$S"; shard_case "empty file"
head -c 500 "$D/train_000000.bin" > "$S"; shard_case "truncated header"
cp "$D/train_000000.bin" "$S"; mkf set-int32 "$S" 0 20240326; shard_case "wrong magic (a model file)"
cp "$D/train_000000.bin" "$S"; mkf set-int32 "$S" 1 2; shard_case "version 2"
cp "$D/train_000000.bin" "$S"; mkf set-int32 "$S" 2 -5; shard_case "negative token count"
cp "$D/train_000000.bin" "$S"; mkf set-int32 "$S" 2 6001; shard_case "token count beyond the file"
cp "$D/train_000000.bin" "$S"; truncate -s -10 "$S"; shard_case "truncated tokens"
cp "$D/train_000000.bin" "$S"; printf 'xyz' >> "$S"; shard_case "trailing bytes"
cp "$D/train_000000.bin" "$S"; mkf set-int32 "$S" 3 70000; shard_case "vocab size above uint16"
mkf shard "$S" 20 8192 1; shard_case "fewer tokens than one row (T+1)"
mkf shard "$S" 6000 8192 1; mkf set-int32 "$S" 300 $((9000 + 9000 * 65536)); shard_case "token 9000 >= vocab 8192"
rm -f "$S"; mkdir "$S"; shard_case "a directory"; rmdir "$S"
cp "$D/val_000000.bin" "$WORK/bad/val_000000.bin"; mkf set-int32 "$WORK/bad/val_000000.bin" 0 1
bad "val shard: wrong magic" "$WORK/bad/val_000000.bin" $TRAINER -i "$D/train_*.bin" -e d1 -j "$WORK/bad/val_*.bin" -b 2 -t 32 -v 1 -s 0 -x 1

# ---- model files (-e)
M=$WORK/model.bin
mkf model "$WORK/good_model.bin" 64 8192 1 2 16 8192 3
model_case() { bad "model: $1" "$M" $TRAINER -i "$D/train_*.bin" -e "$M" $ARGS; }
$TRAINER -i "$D/train_*.bin" -e "$WORK/good_model.bin" $ARGS > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "the good model file is rejected"; }
bad "model: missing" "$WORK/missing.bin" $TRAINER -i "$D/train_*.bin" -e "$WORK/missing.bin" $ARGS
cp "$WORK/good_model.bin" "$M"; mkf set-int32 "$M" 0 20240520; model_case "wrong magic (a shard)"
cp "$WORK/good_model.bin" "$M"; mkf set-int32 "$M" 1 5; model_case "version 5 (bf16)"
cp "$WORK/good_model.bin" "$M"; mkf set-int32 "$M" 1 7; model_case "version 7"
cp "$WORK/good_model.bin" "$M"; mkf set-int32 "$M" 5 3; model_case "channels not divisible by heads"
cp "$WORK/good_model.bin" "$M"; mkf set-int32 "$M" 4 -1; model_case "negative layer count"
cp "$WORK/good_model.bin" "$M"; mkf set-int32 "$M" 7 100; model_case "padded vocab below vocab"
cp "$WORK/good_model.bin" "$M"; mkf set-int32 "$M" 4 1000000; model_case "huge layer count"
cp "$WORK/good_model.bin" "$M"; truncate -s -4 "$M"; model_case "truncated weights"
cp "$WORK/good_model.bin" "$M"; printf '\0\0\0\0' >> "$M"; model_case "trailing bytes"
head -c 1000 "$WORK/good_model.bin" > "$M"; model_case "truncated header"
cp "$WORK/good_model.bin" "$M"; mkf set-f32 "$M" 5000 nan; model_case "NaN weight"
cp "$WORK/good_model.bin" "$M"; mkf set-f32 "$M" 200000 -inf; model_case "-Inf weight"
mkf model "$M" 64 100 1 2 16 128 3
bad "model: vocab 100 < data tokens" "$D/train_00000" $TRAINER -i "$D/train_*.bin" -e "$M" $ARGS
bad "model: -t above the model's max" "-t" $TRAINER -i "$D/train_*.bin" -e "$WORK/good_model.bin" -j "$D/val_*.bin" -b 1 -t 65 -v 0 -s 0 -x 1

# ---- checkpoints on resume (-y 1)
C=$WORK/ckpt
$TRAINER -i "$D/train_*.bin" -e d1 $ARGS -o "$C.good" -n 1 > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "checkpoint run failed"; }
resume_case() {   # resume_case LABEL FILE_IN_ERROR: $C was prepared from $C.good and damaged
    bad "resume: $1" "$2" $TRAINER -i "$D/train_*.bin" -e d1 $ARGS -o "$C" -y 1 -x 2 --allow-changed 1
}
fresh() { rm -rf "$C"; cp -r "$C.good" "$C"; }
ST=$(state_of "$C" 1)
MO=$(model_of "$C" 1)
fresh; rm "$ST"; resume_case "state file missing" "$ST"
fresh; mkf set-int32 "$ST" 0 20240326; resume_case "state wrong magic" "$ST"
fresh; mkf set-int32 "$ST" 1 9; resume_case "state version 9" "$ST"
fresh; truncate -s -1 "$ST"; resume_case "state truncated" "$ST"
fresh; mkf set-int32 "$ST" 40 12345; resume_case "state for another model size" "$ST"
fresh; mkf set-f32 "$ST" 2000 nan; resume_case "NaN in AdamW m" "$ST"
fresh; mkf set-int32 "$ST" 52 -1; resume_case "more AdamW steps than steps (bias correction 1/0)" "$ST"
fresh; mkf set-int32 "$ST" 106 5; resume_case "noise-scale sums over more steps than run" "$ST"
fresh; mkf set-int32 "$ST" 103 2146959360; resume_case "NaN noise-scale sum (high word 0x7ff80000)" "$ST"
# the loader position (--rows random, 32 bytes: epoch stream, epoch, -1, window position, windows)
fresh; B0=$($PY "$HERE/mkfiles.py" blob-index "$ST")
mkf set-int32 "$ST" $((B0 + 4)) 2000000000; resume_case "window position past the data's windows" "$ST"
fresh; mkf set-int32 "$ST" $((B0 + 6)) 7; resume_case "position over another number of windows" "$ST"
fresh; mkf set-int32 "$ST" $((B0 + 3)) 0; resume_case "position of the other layout (mark cleared)" "$ST"
fresh; mkf set-int32 "$ST" $((B0 + 2)) -3; resume_case "negative epoch" "$ST"
# --rows contiguous (llm.c's layout: the shard and batch permutations are stored)
$TRAINER -i "$D/train_*.bin" -e d1 $ARGS --rows contiguous -o "$C.cgood" -n 1 > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "contiguous checkpoint run failed"; }
cfresh() { rm -rf "$C"; cp -r "$C.cgood" "$C"; }
cresume_case() { bad "resume: $1" "$2" $TRAINER -i "$D/train_*.bin" -e d1 $ARGS --rows contiguous -o "$C" -y 1 -x 2 --allow-changed 1; }
cfresh; B0=$($PY "$HERE/mkfiles.py" blob-index "$ST")
mkf set-int32 "$ST" $((B0 + 9)) 0; mkf set-int32 "$ST" $((B0 + 8)) 0; cresume_case "shard order not a permutation" "$ST"
cfresh; mkf set-int32 "$ST" $((B0 + 10)) 5; mkf set-int32 "$ST" $((B0 + 11)) 5; cresume_case "batch order not a permutation" "$ST"
cfresh; mkf set-int32 "$ST" $((B0 + 2)) -3; cresume_case "negative epoch (contiguous)" "$ST"
cfresh; mkf set-int32 "$ST" $((B0 + 3)) -1; cresume_case "position of the other layout (mark set)" "$ST"
fresh; rm "$MO"; resume_case "model file missing" "$MO"
fresh; truncate -s 2000 "$MO"; resume_case "model truncated" "$MO"
fresh; mkf set-f32 "$MO" 4096 inf; resume_case "Inf weight in the checkpoint" "$MO"
fresh; cp "$D/train_000000.bin" "$D/train_000002.bin"
resume_case "data changed (3 shards, state for 2)" "$ST"
rm -f "$D/train_000002.bin"

# ---- hybrid state on resume (--hybrid 1)
HY="--hybrid 1 --hybrid-warmup 2 --full-steps 1"
$TRAINER -i "$D/train_*.bin" -e d1 $ARGS $HY -o "$C.hgood" -n 1 -x 4 > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "hybrid checkpoint run failed"; }
HF=$C/hybrid_00000004.bin
hybrid_case() {   # hybrid_case LABEL EXTRA_FLAGS...: $C was prepared from $C.hgood and damaged
    local label=$1
    shift
    bad "resume: hybrid $label" "$HF" $TRAINER -i "$D/train_*.bin" -e d1 $ARGS $HY -o "$C" -y 1 -x 4 "$@"
}
hfresh() { rm -rf "$C"; cp -r "$C.hgood" "$C"; }
hfresh; mkf set-int32 "$HF" 40 12345; hybrid_case "state with a flipped word (checksum)"
hfresh; truncate -s -9 "$HF"; hybrid_case "state truncated"
hfresh; printf 'x' >> "$HF"; hybrid_case "state with trailing bytes"
hfresh; mkf set-int32 "$HF" 0 7; hybrid_case "state wrong magic"
hfresh; rm "$HF"; hybrid_case "state missing"
hfresh; hybrid_case "state for another Predict-run length" --predict-steps 3
hfresh; hybrid_case "state for another schedule length" -x 6 --allow-changed 1

# ---- tokenizer file (read when sampling, -s > 0)
T=$WORK/tok.bin
mkf tokenizer "$T" 8192
tok_case() { bad "tokenizer: $1" "$T" $TRAINER -i "$D/train_*.bin" -e d1 -j "$D/val_*.bin" -b 2 -t 32 -v 0 -s 1 -g 4 -x 1 --tokenizer "$T"; }
mkf set-int32 "$T" 0 20240326; tok_case "wrong magic"
mkf tokenizer "$T" 8192; mkf set-int32 "$T" 1 3; tok_case "version 3"
mkf tokenizer "$T" 8192; mkf set-int32 "$T" 2 -1; tok_case "negative vocab"
mkf tokenizer "$T" 8192; truncate -s -3 "$T"; tok_case "truncated token table"
head -c 100 "$WORK/tok.bin" > "$T.short" && mv "$T.short" "$T"; tok_case "truncated header"
mkf tokenizer "$T" 8192; printf 'zz' >> "$T"; tok_case "trailing bytes"
mkf tokenizer "$T" 100; mkf set-int32 "$T" 2 16000000; tok_case "16M tokens claimed by a 500-byte file"

# ---- flags
bad "flag: -b not a number" "-b" $TRAINER -b x
bad "flag: unknown" "--nope" $TRAINER --nope 1
bad "flag: -y without -o" "-y" $TRAINER -y 1

# ---- ./tokenize: vocabulary files, text input, shards to decode
if [ -x "$TOKENIZE" ]; then
    V=$WORK/vocab
    mkdir -p "$V"
    cp data/gpt2/encoder.json data/gpt2/vocab.bpe "$V/"
    echo "hello world" > "$WORK/text.txt"
    vocab_case() { bad "tokenize: $1" "$2" $TOKENIZE --vocab "$V" ids "$WORK/text.txt"; }
    truncate -s 100000 "$V/encoder.json"; vocab_case "encoder.json truncated" "$V/encoder.json"
    cp data/gpt2/encoder.json "$V/"; sed -i 's/"!": 0/"!": 70000/' "$V/encoder.json"; vocab_case "token id out of range" "$V/encoder.json"
    cp data/gpt2/encoder.json "$V/"; printf 'x' >> "$V/encoder.json"; vocab_case "data after the object" "$V/encoder.json"
    cp data/gpt2/encoder.json "$V/"; rm "$V/encoder.json"; vocab_case "encoder.json missing" "$V/encoder.json"
    cp data/gpt2/encoder.json "$V/"; head -n 1000 data/gpt2/vocab.bpe > "$V/vocab.bpe"; vocab_case "vocab.bpe truncated" "$V/vocab.bpe"
    sed '5s/.*/Ġt/' data/gpt2/vocab.bpe > "$V/vocab.bpe"; vocab_case "vocab.bpe line with one token" "$V/vocab.bpe"
    sed '1d' data/gpt2/vocab.bpe > "$V/vocab.bpe"; vocab_case "vocab.bpe without #version" "$V/vocab.bpe"
    bad "tokenize: text input missing" "$WORK/nothing.txt" $TOKENIZE ids "$WORK/nothing.txt"
    bad "tokenize: encode to a missing dir" "$WORK/nodir" $TOKENIZE encode -o "$WORK/nodir" "$WORK/text.txt"
    cp "$D/train_000000.bin" "$WORK/dec.bin"; mkf set-int32 "$WORK/dec.bin" 0 7
    bad "tokenize: decode a bad shard" "$WORK/dec.bin" $TOKENIZE decode "$WORK/dec.bin"
    mkf shard "$WORK/dec.bin" 100 60000 1
    bad "tokenize: decode a shard of vocab 60000" "$WORK/dec.bin" $TOKENIZE decode "$WORK/dec.bin"
    mkf set-int32 "$WORK/dec.bin" 3 0
    bad "tokenize: decode tokens >= 50257" "$WORK/dec.bin" $TOKENIZE decode "$WORK/dec.bin"
else
    note "$TOKENIZE not built: its cases are skipped"
fi
note "ok: $n damaged inputs, each one error line naming the file, non-zero exit, no crash"
