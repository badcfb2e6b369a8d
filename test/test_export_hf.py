#!/usr/bin/python3
"""
test/test_export_hf.py — scripts/export_hf writes the Hugging Face GPT-2 layout, and refuses bad input.

On a random-init d2 model at the 4096-token vocabulary of make data-small (build/hf/init_small.bin):
  - model.safetensors parses by the format's definition (u64 header length, JSON header, data offsets that
    tile the data), holds exactly GPT2LMHeadModel's transformer.* names, wte without the padded rows, every
    tensor equal to ours in Hugging Face's layout;
  - a forward pass written the way transformers' GPT-2 computes (Conv1D: x @ W + b, W as (in, out); lm_head
    = wte) on those tensors gives the PyTorch reference's logits (scripts/train_gpt2.py) within 1e-5;
  - config.json, generation_config.json, tokenizer_config.json, vocab.json, merges.txt and tokenizer.json
    carry the model's sizes and the vocabulary (<|endoftext|> as bos/eos, the last id);
and bad input (no file, not a model file, a truncated one, a header with 0 heads, a vocabulary of another
size, a broken encoder.json) gets one line on stderr naming the file, exit 1, and leaves no folder behind.
A checkpoint of ./train_gpt2 (1 step on data/small4096) exports without --vocab: its run recorded the
vocabulary in the state file beside it. Where it writes: an earlier export is replaced; a folder holding a file an export does not write (a user's
notes beside config.json) is refused with one line naming that file, and kept as it was, unless --force; a
parent folder that refuses writes (EACCES: root ignores permission bits, so os.mkdir is made to fail as it
fails for a user), a read-only file system (EROFS, the same way) and a full disk (model.safetensors written
into /dev/full, which fails every write with ENOSPC) each give one line naming the folder or the file, exit
1, nothing left behind; a Python without numpy says which interpreter to use. `make web` without its model
says what to run first and builds nothing.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import train_gpt2 as ref  # noqa: E402

EXPORT = os.path.join(ROOT, "scripts", "export_hf")
MODEL = os.path.join(ROOT, "build", "hf", "init_small.bin")
VOCAB = os.path.join(ROOT, "data", "small4096", "vocab")
failures = []


def check(ok, what):
    print(f"{'ok' if ok else 'FAIL'}: {what}")
    if not ok:
        failures.append(what)


def run_export(*args):
    return subprocess.run([EXPORT, *args], capture_output=True, text=True)


# scripts/export_hf run by /usr/bin/python3 with one failure of the operating system put in its way (argv[1])
FAULT = r"""
import errno, os, runpy, sys, tempfile
fault, sys.argv = sys.argv[1], sys.argv[2:]
if fault in ("EACCES", "EROFS"):  # the parent refuses the temporary folder, as it does for a non-root user
    def mkdir(path, mode=0o777, **kw):
        raise OSError(getattr(errno, fault), os.strerror(getattr(errno, fault)), path)
    os.mkdir = mkdir
if fault == "ENOSPC":  # model.safetensors goes to /dev/full: every write fails with ENOSPC, from the kernel
    mkdtemp = tempfile.mkdtemp
    def full_mkdtemp(*a, **kw):
        d = mkdtemp(*a, **kw)
        os.symlink("/dev/full", os.path.join(d, "model.safetensors"))
        return d
    tempfile.mkdtemp = full_mkdtemp
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_export_fault(fault, *args, env=None):
    return subprocess.run(["/usr/bin/python3", "-c", FAULT, fault, EXPORT, *args], capture_output=True, text=True,
                          env=env)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    spans = sorted(v["data_offsets"] for v in header.values())
    tiles = spans[0][0] == 0 and spans[-1][1] == len(data) and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    tensors = {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype="<f4").reshape(v["shape"])
               for k, v in header.items() if v["dtype"] == "F32"}
    return meta, header, tensors, tiles


def hf_forward(w, cfg, idx):
    """GPT-2 as transformers computes it from these tensors: Conv1D layers (x @ W + b), lm_head tied to wte"""
    C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    hs = C // NH
    t = {k: torch.from_numpy(v.copy()) for k, v in w.items()}
    B, T = idx.shape
    x = t["transformer.wte.weight"][idx] + t["transformer.wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for l in range(L):
        p = f"transformer.h.{l}."
        h = F.layer_norm(x, (C,), t[p + "ln_1.weight"], t[p + "ln_1.bias"], cfg["layer_norm_epsilon"])
        q, k, v = (h @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]).split(C, dim=2)
        q, k, v = (z.view(B, T, NH, hs).transpose(1, 2) for z in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / hs ** 0.5).masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), t[p + "ln_2.weight"], t[p + "ln_2.bias"], cfg["layer_norm_epsilon"])
        h = F.gelu(h @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), t["transformer.ln_f.weight"], t["transformer.ln_f.bias"], cfg["layer_norm_epsilon"])
    return x @ t["transformer.wte.weight"].T


def test_layout(work):
    out = os.path.join(work, "small_hf")
    r = run_export(MODEL, out, "--vocab", VOCAB, "--no-onnx")
    check(r.returncode == 0, f"export of {MODEL} exits 0 ({r.stderr.strip()})")
    if r.returncode != 0:
        return
    names = sorted(os.listdir(out))
    check(names == sorted(["config.json", "generation_config.json", "merges.txt", "model.safetensors",
                           "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.json"]),
          f"the folder holds the Hugging Face files: {' '.join(names)}")
    cfg_model, p = ref.read_model(MODEL)
    V, L, C = cfg_model["V"], cfg_model["L"], cfg_model["C"]
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["model_type"] == "gpt2" and cfg["vocab_size"] == V
          and cfg["n_layer"] == L and cfg["n_embd"] == C and cfg["n_head"] == cfg_model["NH"]
          and cfg["n_positions"] == cfg_model["maxT"] and cfg["activation_function"] == "gelu_new"
          and cfg["layer_norm_epsilon"] == 1e-5 and cfg["tie_word_embeddings"] is True
          and cfg["bos_token_id"] == cfg["eos_token_id"] == V - 1,
          f"config.json: GPT2LMHeadModel, V={V} L={L} C={C}, gelu_new, eps 1e-5, tied, bos=eos={V - 1}")

    meta, header, w, tiles = read_safetensors(os.path.join(out, "model.safetensors"))
    expect = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"}
    for l in range(L):
        for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                  "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                  "mlp.c_proj.weight", "mlp.c_proj.bias"):
            expect.add(f"transformer.h.{l}.{n}")
    check(meta == {"format": "pt"} and tiles and set(header) == expect and all(v["dtype"] == "F32" for v in header.values()),
          f"model.safetensors: {len(header)} F32 tensors, exactly GPT2LMHeadModel's names, data offsets tile the data")
    same = (w["transformer.wte.weight"].shape == (V, C) and np.array_equal(w["transformer.wte.weight"], p["wte"][:V])
            and all(np.array_equal(w[f"transformer.h.{l}.attn.c_attn.weight"], p["qkvw"][l].T)
                    and np.array_equal(w[f"transformer.h.{l}.mlp.c_fc.weight"], p["fcw"][l].T)
                    and np.array_equal(w[f"transformer.h.{l}.mlp.c_proj.weight"], p["fcprojw"][l].T)
                    and np.array_equal(w[f"transformer.h.{l}.attn.c_proj.weight"], p["attprojw"][l].T)
                    and np.array_equal(w[f"transformer.h.{l}.ln_1.weight"], p["ln1w"][l]) for l in range(L)))
    check(same, f"tensors equal ours: wte ({V}, {C}) (Vp = {cfg_model['Vp']}: padded rows dropped), Conv1D weights transposed")

    idx = torch.from_numpy(np.random.default_rng(1).integers(0, V, size=(2, 33)))
    theirs = hf_forward(w, cfg, idx)
    ours, _ = ref.GPT2(cfg_model, p).forward(idx)
    diff = (theirs - ours[:, :, :V].detach()).abs().max().item()
    check(diff <= 1e-5, f"transformers' GPT-2 forward on the exported tensors = the reference's logits: max |diff| {diff:.2e}")

    gen = json.load(open(os.path.join(out, "generation_config.json")))
    tcfg = json.load(open(os.path.join(out, "tokenizer_config.json")))
    tok = json.load(open(os.path.join(out, "tokenizer.json")))
    vocab = json.load(open(os.path.join(out, "vocab.json")))
    enc = json.load(open(os.path.join(VOCAB, "encoder.json")))
    merges = open(os.path.join(out, "merges.txt"), encoding="utf-8").read().split("\n")
    ours_merges = [m for m in open(os.path.join(VOCAB, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if m]
    check(gen["bos_token_id"] == gen["eos_token_id"] == V - 1 and tcfg["eos_token"] == tcfg["bos_token"] == "<|endoftext|>"
          and vocab == enc and tok["model"]["vocab"] == enc and tok["model"]["type"] == "BPE"
          and tok["model"]["merges"] == ours_merges and merges[0].startswith("#version") and [m for m in merges[1:] if m] == ours_merges
          and tok["added_tokens"][0]["id"] == V - 1 and tok["added_tokens"][0]["content"] == "<|endoftext|>",
          f"tokenizer files: the vocabulary's {len(enc)} tokens and {len(ours_merges)} merges, <|endoftext|> = {V - 1} as bos/eos")


def test_recorded_vocab(work):
    run = os.path.join(work, "run")
    r = subprocess.run([os.path.join(ROOT, "train_gpt2"), "-i", os.path.join(ROOT, "data", "small4096", "train_*.bin"),
                        "-e", "d1", "-b", "2", "-t", "32", "-x", "1", "-v", "0", "-s", "0", "-n", "1", "-o", run],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="2"))
    check(r.returncode == 0, f"a 1-step run on data/small4096 ({r.stderr.strip()[-200:]})")
    out = os.path.join(work, "run_hf")
    r = run_export(os.path.join(run, "model_00000001.bin"), out, "--no-onnx")
    vocab = json.load(open(os.path.join(out, "vocab.json"))) if r.returncode == 0 else None
    check(vocab == json.load(open(os.path.join(VOCAB, "encoder.json"))),
          f"its checkpoint exports without --vocab, with the vocabulary its run recorded: exit {r.returncode} ({r.stderr.strip()})")
    shutil.rmtree(run)
    shutil.rmtree(out, ignore_errors=True)


def test_refusals(work):
    def refused(args, what, names):
        before = set(os.listdir(work))
        r = run_export(*args)
        lines = r.stderr.strip().split("\n")
        left = set(os.listdir(work)) - before
        ok = (r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0]
              and not left)
        check(ok, f"{what}: exit {r.returncode}, '{lines[-1]}'{', left ' + ' '.join(sorted(left)) if left else ''}")

    out = os.path.join(work, "x_hf")
    junk = os.path.join(work, "junk.bin")
    with open(junk, "wb") as f:
        f.write(os.urandom(4096))
    short = os.path.join(work, "short.bin")
    with open(MODEL, "rb") as f:
        data = f.read()
    with open(short, "wb") as f:
        f.write(data[:len(data) // 2])
    badvocab = os.path.join(work, "badvocab")
    os.mkdir(badvocab)
    shutil.copy(os.path.join(VOCAB, "vocab.bpe"), badvocab)
    with open(os.path.join(badvocab, "encoder.json"), "w") as f:
        f.write('{"a": 0, "b": ')
    refused([os.path.join(work, "missing.bin"), out, "--vocab", VOCAB], "a missing model file", "missing.bin")
    refused([junk, out, "--vocab", VOCAB], "not a model file", "junk.bin")
    refused([short, out, "--vocab", VOCAB], "a truncated model file", "short.bin")
    refused([MODEL, out], "GPT-2's vocabulary for a 4096-token model", "encoder.json")
    refused([MODEL, out, "--vocab", badvocab], "a broken encoder.json", "badvocab/encoder.json")
    noheads = os.path.join(work, "noheads.bin")
    header = np.frombuffer(data[:1024], dtype=np.int32).copy()
    header[5] = 0  # NH
    with open(noheads, "wb") as f:
        f.write(header.tobytes() + data[1024:])
    refused([noheads, out, "--vocab", VOCAB], "a header with 0 heads", "noheads.bin: corrupt model header")
    other = os.path.join(work, "notes")
    os.mkdir(other)
    open(os.path.join(other, "mine.txt"), "w").close()
    r = run_export(MODEL, other, "--vocab", VOCAB, "--no-onnx")
    check(r.returncode == 1 and os.listdir(other) == ["mine.txt"] and "notes" in r.stderr,
          f"a folder that is not an export is left alone: exit {r.returncode}, '{r.stderr.strip()}'")

    # an earlier export is replaced; a user's file beside its config.json keeps the folder as it is
    prev = os.path.join(work, "prev_hf")
    r = run_export(MODEL, prev, "--vocab", VOCAB, "--no-onnx")
    r2 = run_export(MODEL, prev, "--vocab", VOCAB, "--no-onnx")
    check(r.returncode == 0 and r2.returncode == 0 and "config.json" in os.listdir(prev),
          f"an earlier export is replaced: exit {r.returncode}, {r2.returncode} ({r2.stderr.strip()})")
    with open(os.path.join(prev, "notes.txt"), "w") as f:
        f.write("mine\n")
    os.mkdir(os.path.join(prev, "runs"))
    before = sorted(os.listdir(prev))
    refused([MODEL, prev, "--vocab", VOCAB, "--no-onnx"], "a user's notes.txt beside config.json",
            "prev_hf: holds files an export does not write (notes.txt runs/)")
    check(sorted(os.listdir(prev)) == before and open(os.path.join(prev, "notes.txt")).read() == "mine\n",
          f"and the folder keeps every file: {' '.join(sorted(os.listdir(prev)))}")
    r = run_export(MODEL, prev, "--vocab", VOCAB, "--no-onnx", "--force")
    check(r.returncode == 0 and "notes.txt" not in os.listdir(prev) and "config.json" in os.listdir(prev),
          f"--force replaces it: exit {r.returncode} ({r.stderr.strip()})")

    # the operating system says no: one line naming the folder or the file, nothing left behind
    def fails(fault, what, names, env=None):
        before = set(os.listdir(work))
        r = run_export_fault(fault, MODEL, out, "--vocab", VOCAB, "--no-onnx", env=env)
        lines = r.stderr.strip().split("\n")
        left = set(os.listdir(work)) - before
        check(r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0]
              and not left, f"{what}: exit {r.returncode}, '{lines[-1]}'{', left ' + ' '.join(sorted(left)) if left else ''}")
    fails("EACCES", "a parent folder that refuses writes", f"{work}: cannot write the export there (Permission denied)")
    fails("EROFS", "a read-only file system", f"{work}: cannot write the export there (Read-only file system)")
    fails("ENOSPC", "a full disk", "x_hf/model.safetensors: cannot write (No space left on device)")
    fake = os.path.join(work, "fake_site")
    os.makedirs(os.path.join(fake, "numpy"))
    with open(os.path.join(fake, "numpy", "__init__.py"), "w") as f:
        f.write("raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    fails("none", "a Python without numpy", "no numpy module", env=dict(os.environ, PYTHONPATH=fake))
    shutil.rmtree(fake)


def test_make_web(work):
    site = os.path.join(work, "site")
    r = subprocess.run(["make", "-s", "web", f"WEB_MODEL={os.path.join(work, 'none.bin')}", f"WEB_SITE={site}"],
                       capture_output=True, text=True, cwd=ROOT,  # not make test's jobserver: its own make
                       env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")})
    first = r.stderr.strip().split("\n")[0]
    check(r.returncode != 0 and first.startswith("error: ") and "none.bin: no model file; run the README's quick start"
          in first and not os.path.exists(site), f"make web without a model: exit {r.returncode}, '{first}'"
          f"{', built ' + site if os.path.exists(site) else ''}")


def main():
    work = tempfile.mkdtemp(prefix="test_export_hf_")
    try:
        test_layout(work)
        test_recorded_vocab(work)
        test_refusals(work)
        test_make_web(work)
    finally:
        shutil.rmtree(work)
    if failures:
        print(f"test_export_hf: {len(failures)} check(s) failed")
        sys.exit(1)
    print("test_export_hf: PASS")


if __name__ == "__main__":
    main()
