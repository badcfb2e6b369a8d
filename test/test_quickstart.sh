#!/usr/bin/env bash
# test/test_quickstart.sh — the README's first command, as a new user runs it: in a fresh clone of this
# repository, scripts/quickstart (what it installs: nothing on a machine that has it all; the build, the data,
# the quick-start training) with QUICKSTART_STEPS=2 instead of its step count. Checks that the README opens with
# scripts/quickstart and scripts/test_all, that the trainer command the README shows is the one the script
# runs, that it exits 0, that the checkpoint lands under the command's nested -o directory (which does not
# exist beforehand), that the run prints decoded sample text, and that scripts/export_hf exports the
# checkpoint. Exits 1 on any failure. Run from the repository root (make check does).
set -euo pipefail
ROOT=$(pwd)
fail() { echo "test_quickstart: FAIL: $*" >&2; exit 1; }

# the quick-start block: from the marker to the end of the code block after it; it opens with the two commands
block=$(awk '/<!-- quick-start/ { on = 1; next } on && /^```sh/ { inb = 1; next } inb && /^```/ { exit } inb { print }' README.md)
[ -n "$block" ] || fail "README.md: no code block after the <!-- quick-start marker"
mapfile -t firsts < <(sed 's/[[:space:]]*#.*$//' <<< "$block" | grep -v '^$' | head -2)
[ "${firsts[0]:-}" = "scripts/quickstart" ] && [ "${firsts[1]:-}" = "scripts/test_all" ] \
    || fail "README.md: the quick-start block does not open with scripts/quickstart and scripts/test_all: $block"
grep -n 'scripts/test_all' .ci/run > /dev/null || fail ".ci/run does not call scripts/test_all"
# the trainer command the README shows (its first ./train_gpt2 line) is the script's, as it prints it
shown=$(grep -m1 '^\./train_gpt2 ' README.md | tr -d "'" || true)
[ -n "$shown" ] || fail "README.md: no ./train_gpt2 line shows what scripts/quickstart trains"
steps=2
outdir=out/small
shards=data/small4096/train_*.bin

tmp=$(mktemp -d /tmp/test_quickstart_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$ROOT" "$tmp/repo" || fail "git clone of $ROOT failed"
cd "$tmp/repo"
[ ! -e "$(dirname "$outdir")" ] || fail "$(dirname "$outdir") exists in a fresh clone: the test proves nothing"
echo "test_quickstart: QUICKSTART_STEPS=$steps scripts/quickstart"
rc=0
QUICKSTART_STEPS=$steps OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} scripts/quickstart > "$tmp/stdout.log" 2> "$tmp/stderr.log" || rc=$?
if [ $rc -ne 0 ]; then
    tail -5 "$tmp/stdout.log"; cat "$tmp/stderr.log"
    fail "scripts/quickstart exited $rc"
fi
grep -q 'every package it needs is installed' "$tmp/stdout.log" || fail "scripts/quickstart did not say what it installs"
ran=$(grep -m1 '^quickstart: \./train_gpt2 ' "$tmp/stdout.log" | sed "s/^quickstart: //; s/ -x $steps / -x 2800 /")
[ "$ran" = "$shown" ] || fail "the README shows '$shown', scripts/quickstart ran '$ran'"
model=$(printf '%s/model_%08d.bin' "$outdir" $steps)
done_marker=$(printf '%s/DONE_%08d' "$outdir" $steps)
[ -s "$model" ] || fail "no checkpoint $model after the run (ls: $(ls "$outdir" 2>&1 | tr '\n' ' '))"
[ -e "$done_marker" ] || fail "checkpoint of step $steps is incomplete: no $done_marker"
# the last sample: the text between the '---' lines after the last 'generating:' line
sample=$(awk '/^generating:/ { s = ""; on = 0; next } /^---$/ { on = !on; next } on { s = s $0 "\n" } END { printf "%s", s }' "$tmp/stdout.log")
letters=$(tr -cd 'A-Za-z' <<< "$sample" | wc -c)
[ "$letters" -ge 20 ] || { tail -20 "$tmp/stdout.log"; fail "no decoded sample text in the output (last sample: '$sample')"; }
grep -q 'bits per byte' "$tmp/stdout.log" || { tail -20 "$tmp/stdout.log"; fail "no val loss in bits per byte: the data's tokenizer was not found"; }
# the checkpoint leaves the trainer: scripts/export_hf writes the Hugging Face folder and the ONNX graph, with
# the vocabulary the trainer found beside the -i shards (vocab/), GPT-2's without -i
vocab=data/gpt2
[ -z "$shards" ] || vocab=$(dirname "$shards")/vocab
scripts/export_hf "$model" "$tmp/export" --vocab "$vocab" > "$tmp/export.log" 2>&1 || { cat "$tmp/export.log"; fail "scripts/export_hf $model failed"; }
for f in config.json model.safetensors generation_config.json vocab.json merges.txt tokenizer.json tokenizer_config.json onnx/model.onnx; do
    [ -s "$tmp/export/$f" ] || fail "scripts/export_hf $model: no $f in the export"
done
echo "test_quickstart: PASS ($model written and exported, sample of ${#sample} characters)"
