#!/bin/sh
# Builds the two large corpora, for models a size up from the suite's study model (d6, d8 and GPT-2 124M at
# 16,384 tokens per step, where the held-out corpora, 1-2 MB each, would be read many times over): English
# technical text from Debian packages, made as data/prepare_heldout.sh makes the held-out corpora (documents
# of a few KB, split train/val by document, a 1024-token vocabulary learned from each corpus's own train
# split, both splits encoded with it) but with every document kept (data/heldout_extract.py's LARGE):
#   linux-doc   the Linux kernel's documentation (linux-doc-*): held out, where results are reported
#   python-doc  the Python documentation (python3.*-doc): the development corpus, where LRs are chosen
# Writes data/large/<name>/{train_000000.bin,val_000000.bin,vocab/} and checks them against
# data/large/reference.sha256.
# usage: data/prepare_large.sh [NAME...]   (default: both)
cd "$(dirname "$0")/.." || exit 1
CORPUS_ROOT=data/large CORPUS_PACKAGES="linux-doc-6.1 python3.11-doc" exec sh data/prepare_heldout.sh ${*:-linux-doc python-doc}
