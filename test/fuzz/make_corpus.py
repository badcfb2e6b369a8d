#!/usr/bin/python3
"""test/fuzz/make_corpus.py — writes the seed inputs of every fuzz target into test/fuzz/corpus/<target>/.
Small valid files (and a few near-valid ones), so that the fuzzers start past the magic numbers and the
length checks. Run from the repository root; needs data/gpt2/ for the vocabulary seeds."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reliability"))
import mkfiles  # noqa: E402

C = "test/fuzz/corpus"


def out(target, name, data):
    os.makedirs(os.path.join(C, target), exist_ok=True)
    with open(os.path.join(C, target, name), "wb") as f:
        f.write(data)


def read(path):
    return open(path, "rb").read()


def tmp(fn, *args):
    path = "/tmp/llmc_make_corpus.bin"
    fn(path, *args)
    data = read(path)
    os.unlink(path)
    return data


# shards: GPT-2 vocab (slot 0), a small vocab, tokens at the vocab boundary
out("shard", "gpt2_vocab", tmp(mkfiles.shard, 21, 50257, 1)[:8] + b"\0" * 4 + tmp(mkfiles.shard, 21, 50257, 1)[12:])
out("shard", "vocab256", tmp(mkfiles.shard, 13, 256, 2))
out("shard", "boundary", mkfiles.header(20240520, 1, 9, 300) + struct.pack("<9H", 299, 0, 299, 1, 298, 299, 0, 5, 299))

# models: tiny configs (maxT V L NH C Vp)
out("model", "L1_C4", tmp(mkfiles.model, 4, 5, 1, 1, 4, 8, 1))
out("model", "L2_NH2_C4", tmp(mkfiles.model, 3, 7, 2, 2, 4, 8, 2))

# tokenizers: versions 1 and 2
out("tokenizer", "v2_V300", tmp(mkfiles.tokenizer, 300, 2))
out("tokenizer", "v1_V5", tmp(mkfiles.tokenizer, 5, 1))

# state files for fuzz_state.c's loader (2 shards: 3 and 5 batches of B=1, T=4), P = 3
def state(P, step, shard_pos, batch_pos, shard_order, batch_order):
    blob = struct.pack("<QiiQii", 0x1234567, 0, shard_pos, batch_pos, 2, len(batch_order))
    blob += struct.pack("<%di" % len(shard_order), *shard_order) + struct.pack("<%di" % len(batch_order), *batch_order)
    h = [0] * 256
    h[0], h[1], h[2], h[5], h[10] = 20240527, 1, 1, 1, step
    h[40:42] = struct.unpack("<2i", struct.pack("<Q", P))
    h[42:44] = struct.unpack("<2i", struct.pack("<Q", len(blob)))
    m = struct.pack("<%df" % P, *[0.1 * i for i in range(P)])
    v = struct.pack("<%df" % P, *[0.01 * i for i in range(P)])
    return struct.pack("<256i", *h) + m + v + blob


out("state", "shard0", state(3, 5, 0, 1, [0, 1], [2, 0, 1]))
out("state", "shard1", state(3, 9, 1, 4, [1, 0], [4, 3, 2, 1, 0]))

# vocabulary: the first 300 entries of encoder.json (even first byte) and 300 merges (odd first byte)
enc = json.load(open("data/gpt2/encoder.json", encoding="utf-8"))
small = dict(sorted(enc.items(), key=lambda kv: kv[1])[:300])
out("vocab", "encoder300", b"\0" + json.dumps(small, ensure_ascii=False).encode())
out("vocab", "encoder_eot", b"\0" + json.dumps({"<|endoftext|>": 50256, "a": 0}).encode())
merges = read("data/gpt2/vocab.bpe").split(b"\n")
out("vocab", "merges300", b"\1" + b"\n".join(merges[:301]) + b"\n")

# encoder inputs: contractions, numbers, whitespace runs, non-ASCII, invalid UTF-8, an EOT string
texts = [b"Hello world! It's 2024, isn't it?  Yes.\n\n",
         "naïve café — 日本語のテキスト 🙂 Ελληνικά".encode(),
         b"   leading\tand\r\ntrailing   \n",
         b"\xff\xfe bad \xc3 utf8 \xe2\x82 end",
         b"<|endoftext|>The 123456789 numbers 3.14 and x'll y've z'd"]
for i, t in enumerate(texts):
    out("bpe", "text%d" % i, t)
