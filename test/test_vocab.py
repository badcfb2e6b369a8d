#!/usr/bin/python3
"""
test/test_vocab.py — generation never guesses a vocabulary (llmc/vocab.h), on a vocabulary of 300 tokens
learned here and kept beside its shards (data/prepare_small.sh's layout):
- a checkpoint knows its vocabulary: the run records it in summary.json and in the state file beside the
  model, and `./train_gpt2 -e MODEL -x 0 --prompt ...` from the repository root (-i left at the default
  corpus, GPT-2's) finds it without --vocab; the prompt's ids are those of `./tokenize ids`;
- a model file with no record beside it, given a prompt, is refused with one line saying to give --vocab,
  and --vocab with another number of tokens than the model's is refused naming --vocab;
- the context starts from the vocabulary's end-of-text token, its last id V - 1 (a model that copies its
  input: every block's output zero, so the residual is the input token's embedding, tied to the lm head;
  greedy generation without a prompt writes the first token of the context back).
Run from the repository root (make test does). Exits 1 on any failure.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZE = os.path.join(ROOT, "tokenize")
TRAINER = os.environ.get("LLMC_TEST_TRAINER", os.path.join(ROOT, "train_gpt2"))
TMP = tempfile.mkdtemp(prefix="test_vocab_")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import TESTS, run_tests, test  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1")
PROMPT = "The king said"


def run(cmd, ok=True):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, env=ENV)
    if ok and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-800:]}")
    return r


def one_line_error(r, needle):
    err = r.stderr.decode(errors="replace").strip()
    if r.returncode != 1 or len(err.split("\n")) != 1 or not err.startswith("error: ") or needle not in err:
        raise AssertionError(f"expected one line 'error: ...{needle}...' and exit 1, got exit {r.returncode}: {err!r}")


def sample(stdout):
    """the text between the '---' lines -x 0 prints"""
    body = stdout.decode(errors="replace").split("---\n", 1)[1]
    return body[:body.rindex("\n---\n")]


_data = {}


def data():
    """TMP/beside: a 300-token vocabulary in vocab/, the shards beside it, and a 2-step run's checkpoint"""
    if _data:
        return _data
    rnd = random.Random(7)
    words = ["the", "The", "king", "said", "sea", "kingdom", "and", "God", "light", "there", "was", "naïve"]
    docs = [" ".join(rnd.choice(words) for _ in range(rnd.randint(20, 80))) for _ in range(60)]
    beside = os.path.join(TMP, "beside")
    os.makedirs(beside)
    text = os.path.join(TMP, "docs.txt")
    with open(text, "w") as f:
        f.write("\n<|doc|>\n".join(docs))
    vocab = os.path.join(beside, "vocab")
    run([TOKENIZE, "learn", "-n", "300", "-o", vocab, "--doc-sep", "<|doc|>", text])
    run([TOKENIZE, "--vocab", vocab, "encode", "-o", beside, "--doc-sep", "<|doc|>", text])
    out = os.path.join(TMP, "run")
    run([TRAINER, "-i", os.path.join(beside, "train_*.bin"), "-e", "d1", "-b", "2", "-t", "32", "-x", "2", "-v", "0",
         "-s", "0", "-n", "2", "-o", out])
    _data.update(vocab=vocab, out=out, model=os.path.join(out, "model_00000002.bin"))
    return _data


@test
def a_checkpoint_knows_its_vocabulary():
    d = data()
    summary = json.load(open(os.path.join(d["out"], "summary.json")))
    if summary.get("vocab") != d["vocab"]:
        raise AssertionError(f"summary.json's vocab is {summary.get('vocab')!r}, expected {d['vocab']!r}")
    r = run([TRAINER, "-e", d["model"], "-x", "0", "-t", "32", "-g", "8", "--prompt", PROMPT])
    if not sample(r.stdout).startswith(PROMPT):
        raise AssertionError(f"-e MODEL -x 0 without --vocab: the text does not start with the prompt: {r.stdout[-300:]!r}")
    # the ids (no tokenizer file: -x 0 prints ids) are those of ./tokenize ids with the recorded vocabulary
    r = run([TRAINER, "-e", d["model"], "-x", "0", "-t", "32", "-g", "1", "--prompt", PROMPT,
             "--tokenizer", "/nonexistent.bin"])
    ids = subprocess.run([TOKENIZE, "--vocab", d["vocab"], "ids"], input=PROMPT.encode(), capture_output=True,
                         check=True).stdout.split()
    want = "".join(f"<{int(i)}>" for i in ids)
    if not sample(r.stdout).startswith(want) or sample(r.stdout).count("<") != len(ids) + 1:
        raise AssertionError(f"the trainer's prompt ids {sample(r.stdout)!r}, ./tokenize ids gives {want!r}")


@test
def a_long_vocabulary_path_is_written_whole():
    """summary.json names the vocabulary however long its path (here past 1,500 bytes, with a quote and a
    backslash to escape): the summary is sized from its parts, never cut into invalid JSON"""
    d = data()
    deep = os.path.join(TMP, *(["v" * 200] * 7), 'a "quoted" \\ name')
    shutil.copytree(d["vocab"], deep)
    out = os.path.join(TMP, "run_long")
    run([TRAINER, "-e", d["model"], "-i", os.path.join(TMP, "beside", "train_*.bin"), "-b", "2", "-t", "32", "-x", "1",
         "-v", "0", "-s", "0", "--vocab", deep, "-o", out])
    text = open(os.path.join(out, "summary.json")).read()
    try:
        summary = json.loads(text)
    except ValueError as e:
        raise AssertionError(f"summary.json is not JSON ({e}): ...{text[-200:]!r}")
    if summary.get("vocab") != deep or "precision" not in summary:
        raise AssertionError(f"summary.json's vocab is {str(summary.get('vocab'))[-80:]!r}, expected ...{deep[-80:]!r}")


@test
def a_prompt_in_another_vocabulary_is_refused():
    d = data()
    lone = os.path.join(TMP, "lone")
    os.makedirs(lone, exist_ok=True)
    model = os.path.join(lone, "model_00000002.bin")  # no state file beside it: no record
    shutil.copy(d["model"], model)
    one_line_error(run([TRAINER, "-e", model, "-x", "0", "-g", "4", "--prompt", PROMPT], ok=False),
                   "has 50257 tokens, the model's vocabulary 300: give --vocab DIR")
    one_line_error(run([TRAINER, "-e", d["model"], "-x", "0", "-g", "4", "--prompt", PROMPT, "--vocab", "data/gpt2"],
                       ok=False), "flag --vocab: data/gpt2 has 50257 tokens, the model's vocabulary 300")
    r = run([TRAINER, "-e", model, "-x", "0", "-t", "32", "-g", "4", "--prompt", PROMPT, "--vocab", d["vocab"]])
    if not sample(r.stdout).startswith(PROMPT):
        raise AssertionError(f"with --vocab it continues the prompt: {r.stdout[-300:]!r}")


@test
def the_context_starts_from_the_last_id():
    d = data()
    V, C, maxT = 300, 64, 64
    Vp = (V + 127) // 128 * 128
    rng = np.random.default_rng(3)
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 3, maxT, V, 1, 1, C, Vp]
    ones, zeros = np.ones(C, np.float32), np.zeros(C, np.float32)
    params = [rng.standard_normal((Vp, C)).astype(np.float32),  # wte: the copy is its row's own dot product
              np.zeros((maxT, C), np.float32), ones, zeros,        # wpe, ln1
              np.zeros(3 * C * C + 3 * C + C * C + C, np.float32), ones, zeros,  # attention: out 0; ln2
              np.zeros(4 * C * C + 4 * C + 4 * C * C + C, np.float32), ones, zeros]  # mlp: out 0; ln_f
    model = os.path.join(TMP, "copy.bin")
    with open(model, "wb") as f:
        f.write(header.tobytes() + b"".join(p.tobytes() for p in params))
    r = run([TRAINER, "-e", model, "-x", "0", "-t", "8", "-g", "2", "--top-k", "1", "--vocab", d["vocab"],
             "--tokenizer", "/nonexistent.bin"])
    if sample(r.stdout) != f"<{V - 1}><{V - 1}>":
        raise AssertionError(f"the copying model wrote {sample(r.stdout)!r}: the context did not start from {V - 1}")
    r = run([TRAINER, "-e", model, "-x", "0", "-t", "8", "-g", "1", "--top-k", "1", "--vocab", d["vocab"],
             "--tokenizer", "/nonexistent.bin", "--prompt", "king"])
    ids = sample(r.stdout).strip("<>").split("><")
    if len(ids) != 2 or ids[0] != ids[1]:  # the prompt's one token, then itself: the model copies its input
        raise AssertionError(f"the copying model does not copy: {sample(r.stdout)!r}")

if __name__ == "__main__":
    run_tests(TESTS, TMP)
