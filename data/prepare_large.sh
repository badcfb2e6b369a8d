#!/bin/sh
# Builds the two large corpora, for models a size up from the suite's study model (d6, d8 and GPT-2 124M at
# 16,384 tokens per step, where the held-out corpora of data/prepare_heldout.sh, 1-2 MB each, would be read
# many times over): English technical text from Debian packages, as documents of a few KB
# (data/heldout_extract.py, every document kept), split train/val by document, a 1024-token vocabulary
# learned from each corpus's own train split (the suite's vocabulary size), both splits encoded with it.
#   linux-doc   the Linux kernel's documentation (linux-doc-*): held out, where results are reported
#   python-doc  the Python documentation (python3.*-doc): the development corpus, where LRs are chosen
# Writes data/large/<name>/{train_000000.bin,val_000000.bin,vocab/}, then checks every file against
# data/large/reference.sha256 (the same package versions give the same bytes; a mismatch is reported, not
# fatal: other versions give other, equally usable corpora).
# usage: data/prepare_large.sh [NAME...]   (default: both)
# Needs the packages below (installed with apt-get when run as root, else named) and `make tokenize`.
set -eu
cd "$(dirname "$0")/.."
names=${*:-linux-doc python-doc}
pkgs="linux-doc-6.1 python3.11-doc"
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
    dir=data/large/$name
    mkdir -p "$dir" "$tmp/$name/tr" "$tmp/$name/va"
    /usr/bin/python3 data/heldout_extract.py "$name" "$tmp/$name"
    ./tokenize learn -n "$n" -o "$dir/vocab" --jsonl text "$tmp/$name/train.jsonl" >/dev/null
    ./tokenize --vocab "$dir/vocab" encode -o "$tmp/$name/tr" --jsonl text --val-every 0 "$tmp/$name/train.jsonl" >/dev/null
    ./tokenize --vocab "$dir/vocab" encode -o "$tmp/$name/va" --jsonl text --val-every 0 "$tmp/$name/val.jsonl" >/dev/null
    mv "$tmp/$name/tr/train_000000.bin" "$dir/train_000000.bin"
    mv "$tmp/$name/va/train_000000.bin" "$dir/val_000000.bin"
    for split in train val; do
        toks=$(/usr/bin/python3 -c 'import struct,sys; print(struct.unpack("<3i", open(sys.argv[1],"rb").read(12))[2])' "$dir/${split}_000000.bin")
        echo "$name $split: $toks tokens"
    done
done
# the packages' versions and the files' checksums, against the committed reference
for p in $pkgs; do dpkg-query -W -f '${Package} ${Version}\n' "$p"; done
for name in $names; do
    for f in data/large/$name/train_000000.bin data/large/$name/val_000000.bin data/large/$name/vocab/tokenizer.bin; do
        want=$(grep " $f\$" data/large/reference.sha256 2>/dev/null | cut -d' ' -f1 || true)
        got=$(sha256sum "$f" | cut -d' ' -f1)
        if [ -z "$want" ]; then echo "$f: no reference checksum ($got)"
        elif [ "$want" = "$got" ]; then echo "$f: matches the reference"
        else echo "$f: differs from the reference (other package versions?)"; fi
    done
done
