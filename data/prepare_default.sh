#!/bin/sh
# Rebuilds the default corpus: data/default/train_000000.bin, data/default/val_000000.bin and
# data/gpt2_tokenizer.bin, from public-domain English text shipped by Debian:
#   - the King James Bible (packages bible-kjv + bible-kjv-text), one document per chapter (1189);
#   - Jane Austen's six novels (package r-cran-janeaustenr, read with Rscript), one document per chapter.
# Every 20th document (k % 20 == 19) goes to val. The shards are committed, so nobody needs to run
# this to train; it documents and reproduces how they were made.
# usage: data/prepare_default.sh [TEXT_DIR]   (TEXT_DIR keeps the extracted text; default: a temp dir)
set -eu
cd "$(dirname "$0")/.."
for tool in bible Rscript; do
    command -v "$tool" >/dev/null || { echo "error: $tool not found (apt-get install bible-kjv bible-kjv-text r-cran-janeaustenr)" >&2; exit 1; }
done
if [ $# -ge 1 ]; then
    text="$1"; mkdir -p "$text"
else
    text=$(mktemp -d); trap 'rm -rf "$text"' EXIT
fi
SEP='<|endoftext|>'

# KJV: a chapter starts at its heading ("Genesis 1"); verse lines lose their indentation
bible -l0 Gen1:1-Rev22:21 | awk -v sep="$SEP" '
    /^[^ ]/ { if (n++) print sep; print; next }
    { sub(/^ +/, ""); print }' > "$text/bible_kjv.txt"

# Austen: a chapter starts at "CHAPTER 1" / "Chapter I"; the title page joins the first chapter,
# "VOLUME I" lines are dropped, runs of blank lines are squeezed to one
for book in sensesensibility prideprejudice mansfieldpark emma northangerabbey persuasion; do
    Rscript -e "library(janeaustenr); writeLines($book)" | awk -v sep="$SEP" '
        /^VOLUME [IVX]+$/ { next }
        /^(CHAPTER|Chapter) [0-9IVXLC]+\.?$/ { if (n++) print sep }
        { print }' | cat -s > "$text/austen_$book.txt"
done

make tokenize
mkdir -p data/default
rm -f data/default/train_*.bin data/default/val_*.bin
./tokenize encode -o data/default --doc-sep "$SEP" --val-every 20 "$text/bible_kjv.txt" \
    "$text"/austen_sensesensibility.txt "$text"/austen_prideprejudice.txt "$text"/austen_mansfieldpark.txt \
    "$text"/austen_emma.txt "$text"/austen_northangerabbey.txt "$text"/austen_persuasion.txt
./tokenize vocab data/gpt2_tokenizer.bin
