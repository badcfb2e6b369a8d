#!/bin/bash
# test/test_data_small.sh — data/prepare_small.sh (make data-small) keeps the default corpus as it is:
# its shards, decoded with the learned vocabulary, give the same text, document for document, as the
# default GPT-2 shards decoded with GPT-2's; the header carries the learned vocabulary's size.
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
data/prepare_small.sh 300 "$tmp/s300" > "$tmp/log" 2>&1 || { cat "$tmp/log"; echo "FAIL: prepare_small.sh"; exit 1; }
for split in train val; do
    ./tokenize decode "data/default/${split}_000000.bin" > "$tmp/a"
    ./tokenize --vocab "$tmp/s300/vocab" decode "$tmp/s300/${split}_000000.bin" > "$tmp/b"
    cmp -s "$tmp/a" "$tmp/b" || { echo "FAIL: $split: the text differs from the default corpus's"; exit 1; }
done
vocab=$(python3 -c "import struct,sys; print(struct.unpack('<4i', open(sys.argv[1],'rb').read(16))[3])" "$tmp/s300/val_000000.bin")
[ "$vocab" = 300 ] || { echo "FAIL: the val shard's header says vocabulary $vocab, not 300"; exit 1; }
echo "PASS: data/prepare_small.sh: same text at a 300-token vocabulary, header vocabulary 300"
