#!/bin/sh
# Builds the default corpus at a small learned vocabulary: decodes data/default's GPT-2 shards back to
# text (the same documents, the same train/val split), learns an N-token byte-level BPE vocabulary from
# the train text only, and encodes both splits with it.
# Writes DIR/vocab/{encoder.json,vocab.bpe,tokenizer.bin} and DIR/train_000000.bin, DIR/val_000000.bin.
# usage: data/prepare_small.sh [N] [DIR]   (defaults: 1024, data/small<N>)
set -eu
cd "$(dirname "$0")/.."
n=${1:-1024}
dir=${2:-data/small$n}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# the decoded text holds each document's <|endoftext|> prefix as text: one JSON line per document instead
for split in train val; do
    ./tokenize decode "data/default/${split}_000000.bin" | python3 -c '
import json, sys
docs = sys.stdin.buffer.read().decode("utf-8", "surrogateescape").split("<|endoftext|>")
for d in docs[1:]: print(json.dumps({"text": d}))' > "$tmp/$split.jsonl"
done
mkdir -p "$dir" "$tmp/tr" "$tmp/va"
./tokenize learn -n "$n" -o "$dir/vocab" --jsonl text "$tmp/train.jsonl"
./tokenize --vocab "$dir/vocab" encode -o "$tmp/tr" --jsonl text --val-every 0 "$tmp/train.jsonl"
./tokenize --vocab "$dir/vocab" encode -o "$tmp/va" --jsonl text --val-every 0 "$tmp/val.jsonl"
mv "$tmp/tr/train_000000.bin" "$dir/train_000000.bin"
mv "$tmp/va/train_000000.bin" "$dir/val_000000.bin"
