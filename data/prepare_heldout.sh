#!/bin/sh
# Builds the held-out corpora of the suite (scripts/suite, docs/suite.md): English text from Debian packages
# that no study of this project used, each as documents of a few KB (data/heldout_extract.py), split
# train/val by document, a 1024-token vocabulary learned from its train split only (./tokenize learn, as
# data/prepare_small.sh does for the development corpus), and both splits encoded with it.
# Writes data/heldout/<name>/{train_000000.bin,val_000000.bin,vocab/} for each corpus, then checks every
# file against data/heldout/reference.sha256 (the same package versions give the same bytes; a mismatch
# is reported, not fatal: other versions give other, equally usable corpora).
# usage: data/prepare_heldout.sh [NAME...]   (default: all four: perl-doc gcide fortunes debian-reference)
# Needs the packages below (installed with apt-get when run as root, else named) and `make tokenize`.
# data/prepare_large.sh runs this script for the two large corpora: CORPUS_ROOT (default data/heldout) is where
# the corpora and reference.sha256 go, CORPUS_PACKAGES (default the four's) what they need.
set -eu
cd "$(dirname "$0")/.."
names=${*:-perl-doc gcide fortunes debian-reference}
pkgs=${CORPUS_PACKAGES:-perl-doc dict-gcide fortunes-min fortunes debian-reference-en}
root=${CORPUS_ROOT:-data/heldout}
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get install -y --no-install-recommends $missing
    else
        echo "error: missing Debian packages:$missing (sudo apt-get install$missing)" >&2
        exit 1
    fi
fi
[ -x ./tokenize ] || { echo "error: ./tokenize not found (run make tokenize)" >&2; exit 1; }
n=1024
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for name in $names; do
    dir=$root/$name
    mkdir -p "$dir" "$tmp/$name/tr" "$tmp/$name/va"
    /usr/bin/python3 data/heldout_extract.py "$name" "$tmp/$name"
    ./tokenize learn -n "$n" -o "$dir/vocab" --jsonl text "$tmp/$name/train.jsonl" >/dev/null
    ./tokenize --vocab "$dir/vocab" encode -o "$tmp/$name/tr" --jsonl text --val-every 0 "$tmp/$name/train.jsonl" >/dev/null
    ./tokenize --vocab "$dir/vocab" encode -o "$tmp/$name/va" --jsonl text --val-every 0 "$tmp/$name/val.jsonl" >/dev/null
    mv "$tmp/$name/tr/train_000000.bin" "$dir/train_000000.bin"
    mv "$tmp/$name/va/train_000000.bin" "$dir/val_000000.bin"
    # bytes of text and tokens per split, for the README's table
    for split in train val; do
        bytes=$(/usr/bin/python3 -c 'import json,sys; print(sum(len(json.loads(l)["text"].encode()) for l in open(sys.argv[1])))' "$tmp/$name/$split.jsonl")
        toks=$(/usr/bin/python3 -c 'import struct,sys; print(struct.unpack("<3i", open(sys.argv[1],"rb").read(12))[2])' "$dir/${split}_000000.bin")
        echo "$name $split: $bytes bytes, $toks tokens" | tee -a "$tmp/sizes.txt"
    done
done
# the packages' versions and the files' checksums, against the committed reference
for p in $pkgs; do dpkg-query -W -f '${Package} ${Version}\n' "$p"; done
status=0
for name in $names; do
    for f in $root/$name/train_000000.bin $root/$name/val_000000.bin $root/$name/vocab/tokenizer.bin; do
        want=$(grep " $f\$" $root/reference.sha256 2>/dev/null | cut -d' ' -f1 || true)
        got=$(sha256sum "$f" | cut -d' ' -f1)
        if [ -z "$want" ]; then echo "$f: no reference checksum ($got)"
        elif [ "$want" = "$got" ]; then echo "$f: matches the reference"
        else echo "$f: differs from the reference (other package versions?)"; status=1; fi
    done
done
exit 0
