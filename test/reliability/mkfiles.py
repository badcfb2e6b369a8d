#!/usr/bin/python3
"""test/reliability/mkfiles.py — writes and damages the project's file formats for the reliability tests
and the fuzz seed corpora. Standard library only.

  shard PATH NTOK VOCAB SEED         llm.c token shard (magic 20240520), random tokens below VOCAB
  model PATH MAXT V L NH C VP SEED   llm.c fp32 model file (magic 20240326, version 3), small random weights
  tokenizer PATH V [VERSION]         llm.c tokenizer file (magic 20240328), token i = bytes of "t<i>"
  statehash PATH                     md5 of a state file without its wall-clock slot (header ints 48..49) and
                                     the run's flags (60..97: -x -l -u -q -k -e, checked on resume)
  set-int32 PATH INDEX VALUE         overwrite the int32 at INDEX (e.g. a header slot)
  set-f32 PATH BYTE_OFFSET VALUE     overwrite the float at BYTE_OFFSET (nan, inf, -inf or a number)
  blob-index PATH                    int32 index where a state file's data-loader blob starts
"""
import hashlib
import random
import struct
import sys


def header(*slots):
    h = [0] * 256
    for i, v in enumerate(slots):
        h[i] = v
    return struct.pack("<256i", *h)


def shard(path, ntok, vocab, seed):
    rng = random.Random(int(seed))
    ntok, vocab = int(ntok), int(vocab)
    toks = [rng.randrange(vocab) for _ in range(ntok)]
    with open(path, "wb") as f:
        f.write(header(20240520, 1, ntok, vocab))
        f.write(struct.pack("<%dH" % ntok, *toks))


def model(path, maxT, V, L, NH, C, Vp, seed):
    maxT, V, L, NH, C, Vp = map(int, (maxT, V, L, NH, C, Vp))
    n = Vp * C + maxT * C + L * (C + C + 3 * C * C + 3 * C + C * C + C + C + C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
    rng = random.Random(int(seed))
    with open(path, "wb") as f:
        f.write(header(20240326, 3, maxT, V, L, NH, C, Vp))
        f.write(struct.pack("<%df" % n, *[rng.gauss(0.0, 0.02) for _ in range(n)]))


def tokenizer(path, V, version=2):
    V, version = int(V), int(version)
    with open(path, "wb") as f:
        f.write(header(20240328, version, V, V - 1))
        for i in range(V):
            b = ("t%d" % i).encode()
            f.write(bytes([len(b)]) + b)


def statehash(path):
    data = bytearray(open(path, "rb").read())
    record = struct.unpack_from("<i", data, 108 * 4)[0]  # the flags fixed on resume, after the blob
    if record > 0:
        del data[-record:]
    data[48 * 4:50 * 4] = bytes(8)
    data[60 * 4:98 * 4] = bytes(38 * 4)
    data[108 * 4:109 * 4] = bytes(4)
    print(hashlib.md5(data).hexdigest())


def set_int32(path, index, value):
    with open(path, "r+b") as f:
        f.seek(4 * int(index))
        f.write(struct.pack("<i", int(value)))


def set_f32(path, offset, value):
    with open(path, "r+b") as f:
        f.seek(int(offset))
        f.write(struct.pack("<f", float(value)))


def blob_index(path):
    data = open(path, "rb").read()
    P, nb = struct.unpack_from("<QQ", data, 40 * 4)
    record = struct.unpack_from("<i", data, 108 * 4)[0]
    assert len(data) == 1024 + 8 * P + nb + record, "not a state file of this trainer"
    print((1024 + 8 * P) // 4)


if __name__ == "__main__":
    commands = {"shard": shard, "model": model, "tokenizer": tokenizer, "statehash": statehash,
                "set-int32": set_int32, "set-f32": set_f32,
                "blob-index": blob_index}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
