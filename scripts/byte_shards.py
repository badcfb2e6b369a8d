#!/usr/bin/python3
"""
scripts/byte_shards.py — the default corpus as bytes: every GPT-2 token of data/default's shards
replaced by the bytes it stands for (data/gpt2_tokenizer.bin), <|endoftext|> by token 256, written as
llm.c token shards with vocab size 257 in the header. A model on them has a 257-row embedding, so its
parameters and FLOPs are in the transformer blocks: the small-vocabulary model the look-ahead pilot
(docs/results.md) trains. Same documents, same train/val split as the GPT-2-token shards.

usage: scripts/byte_shards.py [OUT_DIR]   (default data/tokenized/bytes; writes train_000000.bin, val_000000.bin)
"""
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EOT_GPT2, EOT_BYTES, VOCAB = 50256, 256, 257


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_tokenizer(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        fail(f"{path}: truncated tokenizer file")
    header = struct.unpack("<256i", data[:1024])
    if header[0] != 20240328:
        fail(f"{path}: not an llm.c tokenizer file (magic {header[0]})")
    n, pos, out = header[2], 1024, []
    for i in range(n):
        if pos >= len(data):
            fail(f"{path}: truncated at token {i}")
        ln = data[pos]
        out.append(data[pos + 1:pos + 1 + ln])
        pos += 1 + ln
    return out


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    if header[0] != 20240520 or header[1] != 1:
        fail(f"{path}: not a token shard (magic {header[0]}, version {header[1]})")
    toks = np.frombuffer(data[1024:], dtype=np.uint16)
    if len(toks) != header[2]:
        fail(f"{path}: {len(toks)} tokens, header says {header[2]}")
    return toks


def write_shard(path, toks):
    header = [0] * 256
    header[0], header[1], header[2], header[3] = 20240520, 1, len(toks), VOCAB
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(np.asarray(toks, dtype=np.uint16).tobytes())
    os.replace(tmp, path)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "data", "tokenized", "bytes")
    os.makedirs(out, exist_ok=True)
    vocab = read_tokenizer(os.path.join(ROOT, "data", "gpt2_tokenizer.bin"))
    table = [np.frombuffer(b, dtype=np.uint8).astype(np.uint16) for b in vocab]
    table[EOT_GPT2] = np.array([EOT_BYTES], dtype=np.uint16)
    for split in ("train", "val"):
        toks = read_shard(os.path.join(ROOT, "data", "default", f"{split}_000000.bin"))
        if int(toks.max()) >= len(table):
            fail(f"{split}: token {int(toks.max())} outside the tokenizer ({len(table)} tokens)")
        b = np.concatenate([table[t] for t in toks.tolist()])
        if len(b) >= 2 ** 31:
            fail(f"{split}: {len(b)} bytes do not fit one shard")
        path = os.path.join(out, f"{split}_000000.bin")
        write_shard(path, b)
        print(f"{path}: {len(toks)} GPT-2 tokens -> {len(b)} byte tokens ({len(b) / len(toks):.2f} per token)")


if __name__ == "__main__":
    main()
