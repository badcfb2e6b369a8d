#!/usr/bin/env bash
# test/test_quickstart.sh — the README's quick start, as a new user runs it: a fresh clone of this
# repository, the quick start's own `make` lines there (the code block after the `<!-- quick-start`
# marker: the build, and the data target if it has one), then its ./train_gpt2 command line with -x 2
# instead of its step count. Checks that it exits 0, that the
# checkpoint lands under the command's nested -o directory (which does not exist beforehand), that the
# run prints decoded sample text, and that scripts/export_hf exports the checkpoint. Exits 1 on any
# failure. Run from the repository root (make test does).
set -euo pipefail
ROOT=$(pwd)
fail() { echo "test_quickstart: FAIL: $*" >&2; exit 1; }

# the quick-start block: from the marker to the end of the code block after it
block=$(awk '/<!-- quick-start/ { on = 1; next } on && /^```sh/ { inb = 1; next } inb && /^```/ { exit } inb { print }' README.md)
[ -n "$block" ] || fail "README.md: no code block after the <!-- quick-start marker"
# its make lines (comments after # dropped) and its first ./train_gpt2 line
mapfile -t makes < <(sed -n 's/[[:space:]]*#.*$//; /^make\( \|$\)/p' <<< "$block")
[ ${#makes[@]} -gt 0 ] || fail "README.md: the quick-start block has no make line"
cmd=$(grep -m1 '^\./train_gpt2 ' <<< "$block" || true)
[ -n "$cmd" ] || fail "README.md: no ./train_gpt2 line in the quick-start block"
# split as the shell would (the README's line may quote a glob: -i 'data/.../train_*.bin')
eval "argv=($cmd)"
outdir=""
shards=""
steps=2
for ((i = 1; i < ${#argv[@]}; i++)); do
    case "${argv[$i]}" in
        -x) argv[$((i + 1))]=$steps ;;
        -o) outdir=${argv[$((i + 1))]} ;;
        -i) shards=${argv[$((i + 1))]} ;;
    esac
done
[ -n "$outdir" ] || fail "the quick-start command has no -o: $cmd"
case "$outdir" in */*) ;; *) fail "the quick-start -o ($outdir) is not nested" ;; esac
grep -q -- ' -x ' <<< " ${argv[*]} " || fail "the quick-start command has no -x: $cmd"

tmp=$(mktemp -d /tmp/test_quickstart_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$ROOT" "$tmp/repo" || fail "git clone of $ROOT failed"
cd "$tmp/repo"
[ ! -e "$(dirname "$outdir")" ] || fail "$(dirname "$outdir") exists in a fresh clone: the test proves nothing"
for m in "${makes[@]}"; do
    echo "test_quickstart: $m"
    read -r -a margv <<< "$m"
    "${margv[@]}" --no-print-directory > "$tmp/build.log" 2>&1 || { tail -20 "$tmp/build.log"; fail "'$m' failed in a fresh clone"; }
done
echo "test_quickstart: ${argv[*]}"
rc=0
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "${argv[@]}" > "$tmp/stdout.log" 2> "$tmp/stderr.log" || rc=$?
if [ $rc -ne 0 ]; then
    tail -5 "$tmp/stdout.log"; cat "$tmp/stderr.log"
    fail "the quick-start command exited $rc"
fi
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
