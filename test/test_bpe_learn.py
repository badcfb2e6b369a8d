#!/usr/bin/python3
"""
test/test_bpe_learn.py — `./tokenize learn` (data/bpe_learn.h), JSON Lines input (data/jsonl.h) and val
loss in bits per byte, against references written here:
- the learned merges equal those of a plain-Python BPE trainer (its own GPT-2 pre-tokenisation, a
  recount of every pair per merge, the same tie rule) on a text with repeats, Unicode and whitespace runs;
- a learned vocabulary encodes and decodes arbitrary bytes back to themselves; N = 257 is plain bytes;
- a JSON Lines file gives the documents its lines hold (escapes decoded), and a bad line is refused with
  its file and line number;
- the trainer's val_bpb equals a hand count over the val targets' bytes;
- learn -> encode -> train -> generate with a prompt, on a learned vocabulary.
Run from the repository root (make test does). Exits 1 on any failure.
"""
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import unicodedata
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZE = os.path.join(ROOT, "tokenize")
TRAINER = os.environ.get("LLMC_TEST_TRAINER", os.path.join(ROOT, "train_gpt2"))
TMP = tempfile.mkdtemp(prefix="test_bpe_learn_")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import TESTS, run_tests, test  # noqa: E402


def run(cmd, ok=True, **kw):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, **kw)
    if ok and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-800:]}")
    return r


# ---- the reference: GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
def cls(ch):
    if ch.isspace():
        return "S"
    c = unicodedata.category(ch)
    return "L" if c[0] == "L" else "N" if c[0] == "N" else "O"


def pieces(s):
    out, i, n = [], 0, len(s)
    while i < n:
        if s[i] == "'":
            suf = next((x for x in ("s", "t", "re", "ve", "m", "ll", "d") if s.startswith(x, i + 1)), None)
            if suf is not None:
                out.append(s[i:i + 1 + len(suf)])
                i += 1 + len(suf)
                continue
        j, c = i, cls(s[i])
        if s[i] == " " and i + 1 < n and cls(s[i + 1]) != "S":
            j, c = i + 1, cls(s[i + 1])
        if c != "S":
            while j < n and cls(s[j]) == c:
                j += 1
            out.append(s[i:j])
        else:
            k = i
            while k < n and cls(s[k]) == "S":
                k += 1
            j = k if k == n or k - i == 1 else k - 1
            out.append(s[i:j])
        i = j
    return out


def reference_merges(docs, n_tokens):
    counts = Counter(p.encode() for d in docs for p in pieces(d))
    words = {w: [bytes([b]) for b in w] for w in counts}
    ids = {bytes([b]): b for b in range(256)}
    merges, banned = [], set()
    while len(ids) < n_tokens - 1:
        pairs = Counter()
        for w, syms in words.items():
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += counts[w]
        cands = [(c, -ids[a], -ids[b], a, b) for (a, b), c in pairs.items() if c > 0 and (a, b) not in banned]
        if not cands:
            break
        _, _, _, a, b = max(cands)
        if len(a + b) > 255 or a + b in ids:
            banned.add((a, b))
            continue
        ids[a + b] = len(ids)
        merges.append((a, b))
        for w, syms in words.items():
            out, k = [], 0
            while k < len(syms):
                if k + 1 < len(syms) and syms[k] == a and syms[k + 1] == b:
                    out.append(a + b)
                    k += 2
                else:
                    out.append(syms[k])
                    k += 1
            words[w] = out
    return merges


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def learned_merges(vocab_dir):
    dec = byte_decoder()
    with open(os.path.join(vocab_dir, "vocab.bpe"), encoding="utf-8") as f:
        lines = f.read().split("\n")[1:]
    return [tuple(bytes(dec[ch] for ch in part) for part in ln.split(" ")) for ln in lines if ln]


def learn(docs, n_tokens, name):
    path = os.path.join(TMP, name + ".txt")
    with open(path, "wb") as f:
        f.write("\n<|doc|>\n".join(docs).encode())
    out = os.path.join(TMP, name)
    run([TOKENIZE, "learn", "-n", str(n_tokens), "-o", out, "--doc-sep", "<|doc|>", path])
    return out


def sample_docs():
    rnd = random.Random(5)
    words = ["the", "The", "king", "kingdom", "king's", "said", "sea", "see", "naïve", "café", "über", "Ελλάδα",
             "日本語", "テキスト", "1999", "42", "3.14", "!!", "?", "--", "you'll", "we're", "I'd"]
    spaces = [" ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", " \t ", "\u3000"]
    docs = []
    for _ in range(40):
        docs.append("".join(rnd.choice(words) + rnd.choice(spaces) for _ in range(rnd.randint(5, 60))))
    docs.append("aaaaaaaaaaaaaaaa abababababab aaa  aaa")  # overlapping and repeated pairs
    letters = "abcdeéü日本"  # random words: many pairs of equal counts, so the tie rule decides often
    for _ in range(30):
        docs.append(" ".join("".join(rnd.choice(letters) for _ in range(rnd.randint(1, 9))) for _ in range(80)))
    return docs


@test
def merges_equal_the_reference():
    docs = sample_docs()
    for n in (300, 420, 2000):  # 2000: more than the text has pairs for (it stops early)
        got = learned_merges(learn(docs, n, f"ref{n}"))
        # --doc-sep: a document ends with the newline before the separator line
        want = reference_merges([d + "\n" for d in docs[:-1]] + docs[-1:], n)
        if got != want:
            k = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            raise AssertionError(f"N={n}: merge {k} differs: learned {got[k:k + 3]}, reference {want[k:k + 3]} "
                                 f"({len(got)} vs {len(want)} merges)")
    print(f"    the learned merges equal the reference's at N=300, 420 and 2000 ({len(want)} merges)")


@test
def learned_vocab_round_trips_arbitrary_bytes():
    vocab = learn(sample_docs(), 400, "rt")
    rnd = random.Random(9)
    data = bytes(rnd.randrange(256) for _ in range(5000)) + "naïve café 日本語".encode() + b"\xff\xfe\xc3"
    path = os.path.join(TMP, "rt.bin")
    with open(path, "wb") as f:
        f.write(data)
    out = os.path.join(TMP, "rt_out")
    os.makedirs(out)
    run([TOKENIZE, "--vocab", vocab, "encode", "-o", out, "--val-every", "0", path])
    back = run([TOKENIZE, "--vocab", vocab, "decode", os.path.join(out, "train_000000.bin")]).stdout
    if back != b"<|endoftext|>" + data:
        raise AssertionError("decode(encode(x)) != x with a learned vocabulary")


@test
def n257_is_plain_bytes():
    vocab = learn(sample_docs(), 257, "bytes")
    text = "héllo wörld 42\n"
    ids = [int(x) for x in run([TOKENIZE, "--vocab", vocab, "ids"], input=text.encode()).stdout.split()]
    if ids != list(text.encode()):
        raise AssertionError(f"N=257: ids {ids[:10]}... are not the bytes")
    if learned_merges(vocab):
        raise AssertionError("N=257 wrote merges")


@test
def jsonl_documents_and_a_bad_line():
    vocab = learn(sample_docs(), 300, "jl")
    good = os.path.join(TMP, "good.jsonl")
    docs = ["first doc, \"quoted\"\nwith a newline", "caf\u00e9 \U0001F600 tab\there", "third"]
    with open(good, "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "meta": {"x": [1, 2.5e3, None, True]}, "text": d}) + "\n")
        f.write("\n")  # a blank line: no document
    out = os.path.join(TMP, "jl_out")
    os.makedirs(out)
    run([TOKENIZE, "--vocab", vocab, "encode", "-o", out, "--val-every", "0", "--jsonl", "text", good])
    back = run([TOKENIZE, "--vocab", vocab, "decode", os.path.join(out, "train_000000.bin")]).stdout
    want = b"".join(b"<|endoftext|>" + d.encode() for d in docs)
    if back != want:
        raise AssertionError(f"JSONL documents differ: {back[:120]!r} vs {want[:120]!r}")
    for bad_line, what in (('{"text": "ok"', "expected"), ('{"txt": "x"}', "no such field"), ('{"text": 5}', "not a string"),
                           ('{"text": "\\ud800"}', "surrogate"), ('[1, 2]', "not a JSON object")):
        bad = os.path.join(TMP, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"text": "line one"}\n' + bad_line + '\n{"text": "three"}\n')
        r = run([TOKENIZE, "--vocab", vocab, "encode", "-o", out, "--jsonl", "text", bad], ok=False)
        err = r.stderr.decode()
        if r.returncode == 0 or f"{bad}:2:" not in err or what not in err or err.count("\n") != 1:
            raise AssertionError(f"bad line {bad_line!r}: exit {r.returncode}, stderr {err!r}")


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    return list(struct.unpack(f"<{(len(data) - 1024) // 2}H", data[1024:]))


def token_lengths(tokenizer_bin):
    with open(tokenizer_bin, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    lens, pos = [], 1024
    for _ in range(header[2]):
        lens.append(data[pos])
        pos += 1 + data[pos]
    return lens, header[3]


@test
def val_bits_per_byte_equal_a_hand_count():
    vocab = learn(sample_docs(), 300, "bpb")
    docs_path = os.path.join(TMP, "bpb.txt")
    with open(docs_path, "w") as f:
        f.write("\n<|doc|>\n".join(sample_docs()))
    data = os.path.join(TMP, "bpb_data")
    os.makedirs(data)
    run([TOKENIZE, "--vocab", vocab, "encode", "-o", data, "--doc-sep", "<|doc|>", "--val-every", "4", docs_path])
    out = os.path.join(TMP, "bpb_run")
    B, T = 2, 16
    run([TRAINER, "-i", os.path.join(data, "train_*.bin"), "-e", "d1", "-b", str(B), "-t", str(T), "-x", "1", "-v", "1",
         "-m", "-1", "-s", "0", "--tokenizer", os.path.join(vocab, "tokenizer.bin"), "-o", out],
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    lens, eot = token_lengths(os.path.join(vocab, "tokenizer.bin"))
    val = read_shard(os.path.join(data, "val_000000.bin"))
    batches = (len(val) - 1) // (B * T)
    targets = [t for k in range(batches) for t in val[k * B * T + 1:k * B * T + B * T + 1]]
    nbytes = sum(0 if t == eot else lens[t] for t in targets)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(ln) for ln in f]
    for m in lines:
        if "val_loss" in m:
            want = m["val_loss"] * len(targets) / (nbytes * math.log(2))
            if "val_bpb" not in m or abs(m["val_bpb"] - want) > 1e-6 * want:
                raise AssertionError(f"step {m['step']}: val_bpb {m.get('val_bpb')} vs hand count {want}")
    summary = json.load(open(os.path.join(out, "summary.json")))
    if abs(summary["val_bpb"] - lines[-1]["val_bpb"]) > 1e-6 * summary["val_bpb"]:
        raise AssertionError("summary.json's val_bpb is not the last one")
    print(f"    {len(targets)} val targets, {nbytes} bytes: val_bpb {lines[-1]['val_bpb']:.4f}")


@test
def learn_encode_train_generate():
    vocab = learn(sample_docs(), 320, "path")
    docs_path = os.path.join(TMP, "path.txt")
    with open(docs_path, "w") as f:
        f.write("\n<|doc|>\n".join(sample_docs()))
    data = os.path.join(TMP, "path_data")
    os.makedirs(data)
    run([TOKENIZE, "--vocab", vocab, "encode", "-o", data, "--doc-sep", "<|doc|>", docs_path])
    out = os.path.join(TMP, "path_run")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = run([TRAINER, "-i", os.path.join(data, "train_*.bin"), "-e", "d1", "-b", "2", "-t", "32", "-x", "3", "-v", "3",
             "-s", "0", "-n", "3", "--tokenizer", os.path.join(vocab, "tokenizer.bin"), "-o", out], env=env)
    if b"bits per byte" not in r.stdout:
        raise AssertionError("no val loss in bits per byte on a learned vocabulary")
    r = run([TRAINER, "-e", os.path.join(out, "model_00000003.bin"), "-x", "0", "-t", "32", "-g", "20",
             "--prompt", "The king said", "--vocab", vocab, "--tokenizer", os.path.join(vocab, "tokenizer.bin")], env=env)
    if b"The king said" not in r.stdout:
        raise AssertionError(f"the generated text does not start with the prompt: {r.stdout[-300:]!r}")


@test
def vocab_beside_the_shards_is_found():
    # DIR/vocab/ next to DIR/train_*.bin (data/prepare_small.sh's layout): no --tokenizer or --vocab needed
    # to train (bits per byte, decoded samples); --vocab alone continues a prompt from a checkpoint
    data = os.path.join(TMP, "beside")
    os.makedirs(data)
    docs_path = os.path.join(TMP, "beside.txt")
    with open(docs_path, "w") as f:
        f.write("\n<|doc|>\n".join(sample_docs()))
    vocab = os.path.join(data, "vocab")
    run([TOKENIZE, "learn", "-n", "300", "-o", vocab, "--doc-sep", "<|doc|>", docs_path])
    run([TOKENIZE, "--vocab", vocab, "encode", "-o", data, "--doc-sep", "<|doc|>", docs_path])
    out = os.path.join(TMP, "beside_run")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = run([TRAINER, "-i", os.path.join(data, "train_*.bin"), "-e", "d1", "-b", "2", "-t", "32", "-x", "3", "-v", "3",
             "-s", "3", "-g", "8", "-n", "3", "--prompt", "The king", "-o", out], env=env)
    for want in [b"bits per byte", os.path.join(vocab, "tokenizer.bin").encode(), b"The king"]:
        if want not in r.stdout:
            raise AssertionError(f"training on {data} without --tokenizer/--vocab: no '{want.decode()}' in the output")
    r = run([TRAINER, "-e", os.path.join(out, "model_00000003.bin"), "-x", "0", "-t", "32", "-g", "8",
             "--prompt", "The king said", "--vocab", vocab], env=env)
    if b"The king said" not in r.stdout:
        raise AssertionError(f"--vocab alone did not bring its tokenizer.bin: {r.stdout[-300:]!r}")
    # the GPT-2 shards have no vocab/ beside them: llm.c's files stay the default
    r = run([TRAINER, "-e", "d1", "-x", "1", "-b", "1", "-t", "32", "-v", "0", "-s", "0"], env=env)
    if b"data/gpt2_tokenizer.bin" not in r.stdout:
        raise AssertionError("the default corpus no longer decodes with data/gpt2_tokenizer.bin")


if __name__ == "__main__":
    run_tests(TESTS, TMP)
