#!/usr/bin/python3
"""
data/heldout_extract.py — one held-out corpus as plain-text documents of a few KB, split train/val.

    data/heldout_extract.py NAME OUTDIR     # writes OUTDIR/train.jsonl, OUTDIR/val.jsonl ({"text": ...} per line)

NAME is one of CORPORA below; each reads the files a Debian package installed (data/prepare_heldout.sh
and, for the two large corpora, data/prepare_large.sh install them or name them). Paragraphs (blank-line separated blocks, or a source's own units: a
dictionary entry, a fortune) are joined in source order into documents of at least DOC_BYTES bytes; a
corpus larger than MAX_BYTES keeps every k-th document (k the smallest that fits), so the documents come
from the whole source, not its first pages; the large corpora (LARGE) keep every document. Document i (0-based, after that thinning) goes to val when
i % 10 == 9, the rule of `./tokenize encode --val-every 10`. Everything is in a fixed order (sorted file
names, no randomness), so the same package versions give the same bytes.
Standard library only.
"""
import glob
import gzip
import json
import os
import re
import subprocess
import sys

DOC_BYTES = 4000
MAX_BYTES = 2_000_000
VAL_EVERY = 10


def paragraphs(text):
    """Blank-line separated blocks, trailing spaces dropped, empty blocks skipped."""
    text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n"))
    return [p.strip("\n") for p in re.split(r"\n{2,}", text) if p.strip()]


def perl_doc():
    # perl-doc: the core pod pages, rendered to plain text by pod2text (perl)
    files = sorted(glob.glob("/usr/share/perl/5.*/pod/*.pod"))
    for f in files:
        out = subprocess.run(["pod2text", f], check=True, capture_output=True).stdout.decode("utf-8", "replace")
        yield paragraphs(out)


def dict_gcide():
    # dict-gcide: the dictd database (dictzip is gzip); an entry starts at a line in column 0
    with gzip.open(glob.glob("/usr/share/dictd/gcide.dict.dz")[0]) as f:
        text = f.read().decode("utf-8", "replace")
    entries, cur = [], []
    for line in text.split("\n"):
        if line and not line[0].isspace() and cur:
            entries.append("\n".join(cur).strip("\n"))
            cur = []
        cur.append(line.rstrip())
    if cur:
        entries.append("\n".join(cur).strip("\n"))
    yield [e for e in entries if e.strip() and not e.startswith("00-database")]


def fortunes():
    # fortunes + fortunes-min: the cookie files (not their .dat indices, not the .u8 links); '%' ends a fortune
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if f.endswith(".dat") or os.path.islink(f) or not os.path.isfile(f):
            continue
        with open(f, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        yield [c.strip("\n") for c in re.split(r"^%$", text, flags=re.M) if c.strip()]


def debian_reference():
    # debian-reference-en: the text edition of the Debian Reference
    with gzip.open("/usr/share/debian-reference/debian-reference.en.txt.gz") as f:
        yield paragraphs(f.read().decode("utf-8", "replace"))


def linux_doc():
    # linux-doc-*: the kernel's Documentation, reStructuredText and plain text as shipped (gzipped); the
    # translations (not English) and the devicetree bindings (mostly schemas) left out
    root = sorted(glob.glob("/usr/share/doc/linux-doc-*/Documentation"))[-1]
    skip = (os.path.join(root, "translations") + "/", os.path.join(root, "devicetree", "bindings") + "/")
    for f in sorted(glob.glob(os.path.join(root, "**", "*.gz"), recursive=True)):
        if f.startswith(skip) or not (f.endswith(".rst.gz") or f.endswith(".txt.gz")):
            continue
        with gzip.open(f) as fh:
            yield paragraphs(fh.read().decode("utf-8", "replace"))


def python_doc():
    # python3.*-doc: the documentation's reStructuredText sources as the HTML edition ships them
    root = sorted(glob.glob("/usr/share/doc/python3.*/html/_sources"))[-1]
    for f in sorted(glob.glob(os.path.join(root, "**", "*.rst.txt"), recursive=True)):
        with open(f, "rb") as fh:
            yield paragraphs(fh.read().decode("utf-8", "replace"))


CORPORA = {"perl-doc": perl_doc, "gcide": dict_gcide, "fortunes": fortunes, "debian-reference": debian_reference,
           "linux-doc": linux_doc, "python-doc": python_doc}
LARGE = {"linux-doc", "python-doc"}  # kept whole: corpora for models a size up (data/prepare_large.sh)


def documents(groups):
    """Paragraphs joined into documents of >= DOC_BYTES; a group (a source file) never shares a document
    with the next one, and a group's short tail joins its last document."""
    docs = []
    for paras in groups:
        cur, n, start = [], 0, len(docs)
        for p in paras:
            cur.append(p)
            n += len(p.encode("utf-8")) + 2
            if n >= DOC_BYTES:
                docs.append("\n\n".join(cur) + "\n")
                cur, n = [], 0
        if cur:
            if len(docs) > start and n < DOC_BYTES // 2:
                docs[-1] = docs[-1] + "\n" + "\n\n".join(cur) + "\n"
            else:
                docs.append("\n\n".join(cur) + "\n")
    return docs


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in CORPORA:
        print(f"usage: {sys.argv[0]} NAME OUTDIR  (NAME: {', '.join(CORPORA)})", file=sys.stderr)
        sys.exit(2)
    name, out = sys.argv[1], sys.argv[2]
    docs = documents(CORPORA[name]())
    total = sum(len(d.encode("utf-8")) for d in docs)
    k = 1
    while name not in LARGE and total / k > MAX_BYTES:
        k += 1
    docs = docs[::k]
    os.makedirs(out, exist_ok=True)
    nb = {"train": 0, "val": 0}
    with open(os.path.join(out, "train.jsonl"), "w") as tr, open(os.path.join(out, "val.jsonl"), "w") as va:
        for i, d in enumerate(docs):
            split = "val" if i % VAL_EVERY == VAL_EVERY - 1 else "train"
            (va if split == "val" else tr).write(json.dumps({"text": d}) + "\n")
            nb[split] += len(d.encode("utf-8"))
    print(f"{name}: {len(docs)} documents (every {k} of the source's), {nb['train']} train bytes, "
          f"{nb['val']} val bytes")


if __name__ == "__main__":
    main()
