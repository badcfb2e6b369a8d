#!/usr/bin/python3
"""
scripts/train_gpt2.py — the PyTorch reference for train_gpt2.c (CPU, fp32; run with /usr/bin/python3).

The same GPT-2 as llm.c (learned position embeddings, pre-LayerNorm blocks, tanh-GELU MLP, causal
self-attention, wte tied to the lm_head, vocab padded to Vp rows, loss over the first V logits), the same
llm.c model files and token shards, the same DataLoader order (xorshift* + Fisher-Yates, docs/formats.md), the
same AdamW (decoupled weight decay on the 2-D weights only, written out by hand), global-norm clipping at
1.0, LR schedules and gradient accumulation. It writes metrics.jsonl in -o like the C trainer, so the two
can be compared step by step.

Modes:
  train (default)          -e model.bin|dN -i 'train_*.bin' [-j 'val_*.bin'] -b -t -d -x -l -u -q -k -c -v -m -o
  --write-init PATH        random-init llm.c checkpoint: --depth N [--vocab V] [--seed S] [--max-seq-len T]
  --write-debug-state PATH debug state for test/test_gpt2.c: -e model.bin -b -t [-i shard | --seed S]
  --dump-batches N PATH    the first N train batches of -i, in the DataLoader order (-b -t --seed --vocab)
  --bench N                time N full training steps on random tokens, print one JSON line
                           (--autocast bf16: under torch.autocast("cpu", dtype=torch.bfloat16), the peer of
                           train_gpt2 --precision bf16)
Threads: --threads N (default: $TORCH_NUM_THREADS, else torch's default).
"""
import argparse
import glob
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

MODEL_MAGIC, MODEL_VERSION = 20240326, 3
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
DEBUG_MAGIC, DEBUG_VERSION = 20240327, 2
GPT2_EOT = 50256

# the tensors of the flat llm.c parameter buffer, in order; per-layer ones are stacked over L
TENSOR_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
LAYER_NAMES = TENSOR_NAMES[2:14]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # weight decay on the 2-D weights only

# the K AdamW steps of the debug state (test/test_gpt2.c uses the same constants)
DEBUG_STEPS, DEBUG_LR, DEBUG_WD = 10, 1e-4, 0.01
BETA1, BETA2, ADAM_EPS, GRAD_CLIP = 0.9, 0.95, 1e-8, 1.0
# --beta2 -1 (the default), as llmc/config.h's config_beta2_auto: 0.99 at up to this many tokens per step, else 0.95
BETA2_SMALL, BETA2_SMALL_TOKENS = 0.99, 4096


def beta2_auto(tokens_per_step):
    return BETA2_SMALL if tokens_per_step <= BETA2_SMALL_TOKENS else BETA2


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


# ----------------------------------------------------------------------------
# RNG: xorshift* as llmc/rand.h (uint64 arithmetic, wrapping) and Fisher-Yates

MASK64 = (1 << 64) - 1


class Rng:
    def __init__(self, state):
        self.state = state & MASK64

    def u32(self):
        s = self.state
        s ^= s >> 12
        s ^= (s << 25) & MASK64
        s ^= s >> 27
        self.state = s
        return ((s * 0x2545F4914F6CDD1D) & MASK64) >> 32

    def permutation(self, n):
        a = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.u32() % (i + 1)
            a[i], a[j] = a[j], a[i]
        return a


# ----------------------------------------------------------------------------
# llm.c model files

def shapes(cfg):
    V, Vp, maxT, L, C = cfg["V"], cfg["Vp"], cfg["maxT"], cfg["L"], cfg["C"]
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def make_config(V, L, maxT=1024, NH=None, C=None):
    C = C if C is not None else 64 * L
    NH = NH if NH is not None else L
    return {"V": V, "Vp": (V + 127) // 128 * 128, "maxT": maxT, "L": L, "NH": NH, "C": C}


def read_model(path):
    """returns (cfg, dict of stacked numpy fp32 tensors)"""
    if not os.path.isfile(path):
        fail(f"{path}: cannot open model file")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(1024)
        if len(raw) < 1024:
            fail(f"{path}: truncated model file (header)")
        h = np.frombuffer(raw, dtype=np.int32)
        if h[0] != MODEL_MAGIC:
            fail(f"{path}: not an llm.c model file (magic {h[0]}, expected {MODEL_MAGIC})")
        if h[1] != MODEL_VERSION:
            fail(f"{path}: model version {h[1]} not supported (expected {MODEL_VERSION}, fp32)")
        cfg = {"maxT": int(h[2]), "V": int(h[3]), "L": int(h[4]), "NH": int(h[5]), "C": int(h[6]), "Vp": int(h[7])}
        # the bounds llmc/checkpoint.h's reader holds a header to
        if not (0 < cfg["maxT"] <= 1 << 20 and 0 < cfg["V"] <= cfg["Vp"] <= 1 << 24 and 0 < cfg["L"] <= 1024
                and 0 < cfg["NH"] and 0 < cfg["C"] <= 1 << 16 and cfg["C"] % cfg["NH"] == 0):
            fail(f"{path}: corrupt model header (maxT {cfg['maxT']}, V {cfg['V']}, L {cfg['L']}, NH {cfg['NH']}, "
                 f"C {cfg['C']}, Vp {cfg['Vp']})")
        shp = shapes(cfg)
        P = sum(int(np.prod(s)) for s in shp.values())
        if size != 1024 + 4 * P:
            fail(f"{path}: size {size} bytes, expected {1024 + 4 * P} for its header")
        flat = np.frombuffer(f.read(4 * P), dtype=np.float32)
    params, off = {}, 0
    for name in TENSOR_NAMES:
        n = int(np.prod(shp[name]))
        params[name] = flat[off:off + n].reshape(shp[name]).copy()
        off += n
    return cfg, params


def write_model(path, cfg, params):
    h = np.zeros(256, dtype=np.int32)
    h[:8] = [MODEL_MAGIC, MODEL_VERSION, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(h.tobytes())
        for name in TENSOR_NAMES:
            f.write(np.ascontiguousarray(params[name], dtype=np.float32).tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def random_init(cfg, seed):
    """llm.c's init: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L), LN weights 1,
    biases 0, padded wte rows 0. Seeded with torch's generator: deterministic, but not the C trainer's values."""
    g = torch.Generator().manual_seed(seed)
    shp = shapes(cfg)
    p = {name: np.zeros(s, dtype=np.float32) for name, s in shp.items()}
    for name in ("ln1w", "ln2w", "lnfw"):
        p[name][:] = 1.0
    resid = 0.02 / math.sqrt(2 * cfg["L"])
    p["wte"][:cfg["V"]] = torch.normal(0.0, 0.02, (cfg["V"], cfg["C"]), generator=g).numpy()
    p["wpe"][:] = torch.normal(0.0, 0.02, shp["wpe"], generator=g).numpy()
    for name in ("qkvw", "attprojw", "fcw", "fcprojw"):
        std = resid if name in ("attprojw", "fcprojw") else 0.02
        p[name][:] = torch.normal(0.0, std, shp[name], generator=g).numpy()
    return p


# ----------------------------------------------------------------------------
# the model: per-layer leaf tensors (no stacking in the graph), flat llm.c order on the way in and out

class GPT2:
    def __init__(self, cfg, params, dtype=torch.float32):
        self.cfg, self.dtype = cfg, dtype
        L = cfg["L"]
        self.t = {}  # name -> tensor (global) or list of L tensors (per layer)
        for name in TENSOR_NAMES:
            x = torch.from_numpy(np.array(params[name], dtype=np.float32)).to(dtype)
            if name in LAYER_NAMES:
                self.t[name] = [x[l].clone().requires_grad_(True) for l in range(L)]
            else:
                self.t[name] = x.clone().requires_grad_(True)

    def leaves(self):
        """(name, tensor) in the flat llm.c order"""
        for name in TENSOR_NAMES:
            if name in LAYER_NAMES:
                for x in self.t[name]:
                    yield name, x
            else:
                yield name, self.t[name]

    def numpy_params(self):
        return {name: (torch.stack(self.t[name]) if name in LAYER_NAMES else self.t[name])
                .detach().to(torch.float32).numpy() for name in TENSOR_NAMES}

    def flat_grads(self):
        return torch.cat([x.grad.reshape(-1) for _, x in self.leaves()]).to(torch.float32).numpy()

    def forward(self, idx, targets=None):
        """idx, targets: (B,T) int64. Returns logits (B,T,Vp) and the mean loss over the first V logits."""
        cfg, t = self.cfg, self.t
        B, T = idx.shape
        C, NH, L, V = cfg["C"], cfg["NH"], cfg["L"], cfg["V"]
        hs = C // NH
        x = t["wte"][idx] + t["wpe"][:T]                                   # (B,T,C)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        for l in range(L):
            h = F.layer_norm(x, (C,), t["ln1w"][l], t["ln1b"][l], 1e-5)
            qkv = F.linear(h, t["qkvw"][l], t["qkvb"][l])                  # (B,T,3C)
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)                       # (B,NH,T,hs)
            k = k.view(B, T, NH, hs).transpose(1, 2)
            v = v.view(B, T, NH, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))        # (B,NH,T,T)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(y, t["attprojw"][l], t["attprojb"][l])
            h = F.layer_norm(x, (C,), t["ln2w"][l], t["ln2b"][l], 1e-5)
            h = F.gelu(F.linear(h, t["fcw"][l], t["fcb"][l]), approximate="tanh")
            x = x + F.linear(h, t["fcprojw"][l], t["fcprojb"][l])
        x = F.layer_norm(x, (C,), t["lnfw"], t["lnfb"], 1e-5)
        logits = F.linear(x, t["wte"])                                     # (B,T,Vp)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits[:, :, :V].reshape(B * T, V), targets.reshape(-1))
        return logits, loss


class AdamW:
    """llm.c's update, by hand: m,v moments, bias correction, p -= lr*(mhat/(sqrt(vhat)+eps) + wd*p),
    with wd only on the 2-D weights and the gradient multiplied by grad_scale (clipping) first."""

    def __init__(self, model, beta1=BETA1, beta2=BETA2):
        self.model = model
        self.beta1, self.beta2 = beta1, beta2
        self.state = [(name, x, torch.zeros_like(x), torch.zeros_like(x)) for name, x in model.leaves()]
        self.t = 0

    @torch.no_grad()
    def step(self, lr, wd, grad_scale):
        self.t += 1
        t = self.t
        b1, b2 = self.beta1, self.beta2
        bc1 = 1.0 - float(np.float32(b1) ** np.float32(t))
        bc2 = 1.0 - float(np.float32(b2) ** np.float32(t))
        c1, c2 = float(np.float32(1.0) - np.float32(b1)), float(np.float32(1.0) - np.float32(b2))  # as C's 1.0f - beta
        for name, p, m, v in self.state:
            g = p.grad * grad_scale
            m.mul_(b1).add_(g, alpha=c1)
            v.mul_(b2).addcmul_(g, g, value=c2)
            upd = (m / bc1) / ((v / bc2).sqrt() + ADAM_EPS)
            if name in DECAYED and wd != 0.0:
                upd.add_(p, alpha=wd)
            p.sub_(upd, alpha=lr)


def zero_grad(model):
    for _, x in model.leaves():
        x.grad = None


def grad_norm(model):
    s = sum(x.grad.to(torch.float64).pow(2).sum() for _, x in model.leaves())
    return float(torch.sqrt(s))


def clip_scale(norm):
    # llm.c: scale the gradient by clip/norm when the global norm exceeds the clip value
    return GRAD_CLIP / norm if norm > GRAD_CLIP else 1.0


# ----------------------------------------------------------------------------
# learning-rate schedules: llmc/schedulers.h line by line, in float32 like the C code
# (warm-up for all four kinds, progress clamped to [0, 1], wsd decays over the last 20%)

def get_lr(kind, lr, step, warmup, total, final_frac):
    f32 = np.float32
    peak = f32(lr)
    min_lr = peak * f32(final_frac)
    if step < warmup:
        return float(peak * (f32(step + 1) / f32(warmup)))

    def progress(start):
        return f32(min(max(f32(step - start) / f32(total - start), f32(0.0)), f32(1.0))) if total > start else f32(1.0)

    if kind == "constant":
        return float(peak)
    if kind == "cosine":
        c = f32(math.cos(float(f32(math.pi) * progress(warmup))))  # correctly rounded, as glibc's cosf
        return float(min_lr + f32(0.5) * (f32(1.0) + c) * (peak - min_lr))
    if kind == "linear":
        return float(peak - progress(warmup) * (peak - min_lr))
    if kind == "wsd":
        decay_start = max(int(f32(0.8) * f32(total)), warmup)
        if step < decay_start:
            return float(peak)
        return float(min_lr + (f32(1.0) - np.sqrt(progress(decay_start))) * (peak - min_lr))
    fail(f"flag -k: unknown scheduler '{kind}' (cosine|linear|constant|wsd)")


# ----------------------------------------------------------------------------
# llm.c token shards and the DataLoader order of docs/formats.md

def read_shard(path, vocab):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(1024)
        if len(raw) < 1024:
            fail(f"{path}: truncated shard (header)")
        h = np.frombuffer(raw, dtype=np.int32)
        if h[0] != SHARD_MAGIC:
            fail(f"{path}: not a token shard (magic {h[0]}, expected {SHARD_MAGIC})")
        if h[1] != SHARD_VERSION:
            fail(f"{path}: shard version {h[1]} not supported (expected {SHARD_VERSION})")
        n = int(h[2])
        if size != 1024 + 2 * n:
            fail(f"{path}: size {size} bytes, header says {n} tokens ({1024 + 2 * n} bytes)")
        tokens = np.frombuffer(f.read(2 * n), dtype=np.uint16).astype(np.int64)
    if n and tokens.max() >= vocab:
        fail(f"{path}: token id {tokens.max()} >= vocab size {vocab}")
    return tokens


class DataLoader:
    """order "random" (--rows random): every window of T+1 tokens starting at a multiple of T in a shard,
    over all shards, permuted once per epoch (Fisher-Yates); a batch's B rows are the next B windows.
    order "contiguous" (--rows contiguous, llm.c's layout): batch k of a shard is tokens [k*B*T, k*B*T+B*T];
    each epoch permutes the shard order, each shard entered permutes its batch order.
    order "in-order" (val): shards and batches in order. One rng, seed ^ 0xD1B54A32D192ED03 (llmc/dataloader.h)."""

    def __init__(self, pattern, B, T, vocab, order, seed):
        self.files = sorted(glob.glob(pattern))
        if not self.files:
            fail(f"no files match '{pattern}'")
        self.B, self.T, self.vocab, self.order = B, T, vocab, order
        self.seed = seed
        self.nbatches, self.windows = [], []
        for path in self.files:  # validate every shard up front, like the C loader
            ntok = len(read_shard(path, vocab))
            need = T + 1 if order == "random" else B * T + 1
            if ntok < need:
                fail(f"{path}: shard smaller than one {'row' if order == 'random' else 'batch'} ({need} tokens)")
            self.nbatches.append((ntok - 1) // (B * T))
            self.windows.append((ntok - 1) // T)
        if order == "random":
            self.shards = [read_shard(path, vocab) for path in self.files]
            self.window_base = np.cumsum([0] + self.windows)
            self.total_batches = int(self.window_base[-1]) // B
        else:
            self.total_batches = sum(self.nbatches)
        self.rewind()

    def rewind(self):
        """back to the first batch of epoch 0 (the val loader before each evaluation)"""
        state = (self.seed ^ 0xD1B54A32D192ED03) & MASK64
        self.rng = Rng(state if state else 0x853C49E6748FEA9B)  # llmc/rand.h random_state: never 0
        self.epoch = -1
        self.reset()

    def reset(self):
        self.epoch += 1
        if self.order == "random":
            self.window_order = self.rng.permutation(int(self.window_base[-1]))
            self.window_pos = 0
            return
        n = len(self.files)
        self.shard_order = self.rng.permutation(n) if self.order == "contiguous" else list(range(n))
        self.shard_pos = 0
        self.enter_shard()

    def enter_shard(self):
        s = self.shard_order[self.shard_pos]
        self.tokens = read_shard(self.files[s], self.vocab)
        nb = self.nbatches[s]
        self.batch_order = self.rng.permutation(nb) if self.order == "contiguous" else list(range(nb))
        self.batch_pos = 0

    def next_rows(self):
        T, rows = self.T, []
        for _ in range(self.B):
            w = self.window_order[self.window_pos]
            s = int(np.searchsorted(self.window_base, w, side="right")) - 1
            at = (w - int(self.window_base[s])) * T
            rows.append(self.shards[s][at:at + T + 1])
            self.window_pos += 1
            if self.window_pos == len(self.window_order):
                self.reset()
        buf = torch.from_numpy(np.stack(rows))
        return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()

    def next_batch(self):
        if self.order == "random":
            return self.next_rows()
        if self.batch_pos == len(self.batch_order):
            self.shard_pos += 1
            if self.shard_pos == len(self.files):
                self.reset()
            else:
                self.enter_shard()
        k = self.batch_order[self.batch_pos]
        self.batch_pos += 1
        BT = self.B * self.T
        buf = torch.from_numpy(self.tokens[k * BT:k * BT + BT + 1])
        return buf[:-1].view(self.B, self.T), buf[1:].view(self.B, self.T)


def shard_vocab(pattern):
    """the vocab size the shards declare (header[3], 0 => GPT-2's 50257)"""
    files = sorted(glob.glob(pattern))
    if not files:
        fail(f"no files match '{pattern}'")
    h = np.fromfile(files[0], dtype=np.int32, count=256)
    return int(h[3]) if len(h) == 256 and h[3] > 0 else 50257


# ----------------------------------------------------------------------------
# modes

def load_or_init(spec, vocab, seed, dtype=torch.float32):
    if spec.startswith("d") and spec[1:].isdigit():
        cfg = make_config(vocab, int(spec[1:]))
        return GPT2(cfg, random_init(cfg, seed), dtype)
    cfg, params = read_model(spec)
    return GPT2(cfg, params, dtype)


def train_step(model, opt, batches, lr, wd):
    """one optimizer step over len(batches) micro batches; returns (mean loss, grad norm)"""
    zero_grad(model)
    total = 0.0
    for x, y in batches:
        _, loss = model.forward(x, y)
        (loss / len(batches)).backward()
        total += float(loss)
    norm = grad_norm(model)
    opt.step(lr, wd, clip_scale(norm))
    return total / len(batches), norm


def flops_per_token(cfg, T):
    N = sum(int(np.prod(s)) for s in shapes(cfg).values())
    return 6 * N + 6 * cfg["L"] * cfg["C"] * T


@torch.no_grad()
def evaluate(model, loader, nbatches):
    loader.rewind()
    n = loader.total_batches if nbatches <= 0 else min(nbatches, loader.total_batches)
    return sum(float(model.forward(*loader.next_batch())[1]) for _ in range(n)) / n


def cmd_train(a):
    B, T = a.b, a.t
    a.i = a.i or "data/default/train_*.bin"
    vocab = shard_vocab(a.i)
    model = load_or_init(a.e, vocab, a.seed)
    cfg = model.cfg
    if T > cfg["maxT"]:
        fail(f"flag -t: {T} exceeds the model's max sequence length {cfg['maxT']}")
    d = a.d if a.d > 0 else B * T
    if d % (B * T):
        fail(f"flag -d: {d} is not a multiple of B*T = {B * T}")
    accum = d // (B * T)
    train = DataLoader(a.i, B, T, cfg["V"], a.rows, a.seed)
    val = DataLoader(a.j, B, T, cfg["V"], "in-order", a.seed) if a.j and a.v > 0 else None
    steps = a.x if a.x > 0 else train.total_batches // accum
    opt = AdamW(model, a.beta1, a.beta2 if a.beta2 != -1 else beta2_auto(d))
    out = None
    if a.o:
        os.makedirs(a.o, exist_ok=True)
        out = open(os.path.join(a.o, "metrics.jsonl"), "w")
    if val is not None and out:
        out.write(json.dumps({"step": 0, "phase": "init", "val_loss": evaluate(model, val, a.m)}) + "\n")
    fixed = [train.next_batch()] * accum if a.a else None  # the first batch, every micro step (as C)
    train_time, tokens = 0.0, 0
    for step in range(steps):
        lr = get_lr(a.k, a.l, step, a.u, steps, a.q)
        t0 = time.perf_counter()
        batches = fixed if fixed else [train.next_batch() for _ in range(accum)]
        loss, norm = train_step(model, opt, batches, lr, a.c)
        ms = (time.perf_counter() - t0) * 1000.0
        train_time += ms / 1000.0
        tokens += d
        rec = {"step": step + 1, "phase": "full", "loss": float(f"{loss:.9g}"), "lr": lr, "grad_norm": norm,
               "ms": ms, "train_time_s": train_time, "tokens": tokens, "backward": (step + 1) * accum}
        if val is not None and ((step + 1) % a.v == 0 or step + 1 == steps):
            rec["val_loss"] = evaluate(model, val, a.m)
        print(f"step {step + 1:4d}/{steps} | loss {loss:.6f} | norm {norm:6.4f} | lr {lr:.2e} | {ms:.2f} ms"
              f" | {d / (ms / 1000.0):.0f} tok/s" + (f" | val {rec['val_loss']:.6f}" if "val_loss" in rec else ""))
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()
    if out:
        out.close()
        write_model(os.path.join(a.o, f"model_{steps:08d}.bin"), cfg, model.numpy_params())


def cmd_write_init(a):
    cfg = make_config(a.vocab, a.depth, a.max_seq_len)
    write_model(a.write_init, cfg, random_init(cfg, a.seed))
    print(f"wrote {a.write_init}: d{a.depth} V={cfg['V']} Vp={cfg['Vp']} C={cfg['C']} maxT={cfg['maxT']}")


def cmd_write_debug_state(a):
    """x, y, logits (unpadded), loss, all grads (flat padded layout), then the losses of K AdamW steps
    (lr DEBUG_LR, wd DEBUG_WD, clip 1.0) on the same batch. --double computes all of it in float64."""
    dtype = torch.float64 if a.double else torch.float32
    cfg, params = read_model(a.e)
    model = GPT2(cfg, params, dtype)
    B, T, V = a.b, a.t, cfg["V"]
    if a.i:
        x, y = DataLoader(a.i, B, T, V, a.rows, a.seed).next_batch()
    else:
        g = torch.Generator().manual_seed(a.seed)
        buf = torch.randint(0, V, (B * T + 1,), generator=g)
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
    logits, loss = model.forward(x, y)
    loss.backward()
    grads = model.flat_grads()
    logits = logits[:, :, :V].detach().to(torch.float32).numpy()
    loss0 = float(loss)
    opt, losses = AdamW(model), []
    for _ in range(DEBUG_STEPS):
        zero_grad(model)
        _, l = model.forward(x, y)
        l.backward()
        opt.step(DEBUG_LR, DEBUG_WD, clip_scale(grad_norm(model)))
        losses.append(float(l))
    h = np.zeros(256, dtype=np.int32)
    h[:6] = [DEBUG_MAGIC, DEBUG_VERSION, B, T, V, DEBUG_STEPS]
    with open(a.write_debug_state, "wb") as f:
        f.write(h.tobytes())
        f.write(x.numpy().astype(np.int32).tobytes())
        f.write(y.numpy().astype(np.int32).tobytes())
        f.write(logits.astype(np.float32).tobytes())
        f.write(np.float32(loss0).tobytes())
        f.write(grads.astype(np.float32).tobytes())
        f.write(np.array(losses, dtype=np.float32).tobytes())
    print(f"wrote {a.write_debug_state}: B={B} T={T} V={V} loss {loss0:.6f} "
          f"losses {' '.join(f'{v:.6f}' for v in losses)}")


def cmd_dump_batches(a):
    """the first N (inputs, targets) of the train loader, int32, for checking the C loader's order"""
    n, path = int(a.dump_batches[0]), a.dump_batches[1]
    loader = DataLoader(a.i or "data/default/train_*.bin", a.b, a.t, a.vocab, a.rows, a.seed)
    with open(path, "wb") as f:
        for _ in range(n):
            x, y = loader.next_batch()
            f.write(x.numpy().astype(np.int32).tobytes())
            f.write(y.numpy().astype(np.int32).tobytes())


def cmd_bench(a):
    """a.bench full training steps (forward, backward, clip, AdamW) on random tokens; median after warm-up"""
    vocab = 50257
    model = load_or_init(a.e, vocab, a.seed)
    cfg, B, T = model.cfg, a.b, a.t
    g = torch.Generator().manual_seed(a.seed)
    opt, times = AdamW(model), []
    for step in range(a.bench):
        buf = torch.randint(0, cfg["V"], (B * T + 1,), generator=g)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            train_step(model, opt, [(buf[:-1].view(B, T), buf[1:].view(B, T))], 1e-4, 0.0)
        times.append(time.perf_counter() - t0)
    warm = min(2, len(times) - 1)
    med = float(np.median(times[warm:]))
    print(json.dumps({"model": a.e, "B": B, "T": T, "threads": torch.get_num_threads(), "steps": a.bench,
                      "autocast": a.autocast,
                      "median_ms": med * 1000.0, "tok_s": B * T / med,
                      "flops_per_token": flops_per_token(cfg, T)}))


def main():
    p = argparse.ArgumentParser(description="PyTorch reference for train_gpt2.c (see the module docstring)")
    p.add_argument("-i", default=None, help="train data glob (default data/default/train_*.bin; "
                   "--write-debug-state: the batch, default random tokens)")
    p.add_argument("-j", default="data/default/val_*.bin", help="val data glob ('' = none)")
    p.add_argument("-e", default="d6", help="llm.c model file, or dN for a random init of depth N")
    p.add_argument("-o", default="", help="output dir (metrics.jsonl, final model)")
    p.add_argument("-b", type=int, default=4, help="micro batch size B")
    p.add_argument("-t", type=int, default=64, help="sequence length T")
    p.add_argument("-d", type=int, default=-1, help="total batch tokens (grad accumulation), -1 = B*T")
    p.add_argument("--rows", default="random", choices=["contiguous", "random"],
                   help="a micro batch's rows: random = each from its own place; contiguous = llm.c's layout")
    p.add_argument("-x", type=int, default=-1, help="max steps, -1 = one epoch")
    p.add_argument("-l", type=float, default=3e-4, help="peak learning rate")
    p.add_argument("-u", type=int, default=0, help="warmup steps")
    p.add_argument("-q", type=float, default=1.0, help="final lr fraction")
    p.add_argument("-k", default="cosine", choices=["cosine", "linear", "constant", "wsd"], help="lr schedule")
    p.add_argument("-c", type=float, default=0.0, help="weight decay")
    p.add_argument("--beta1", type=float, default=BETA1, help="AdamW beta1")
    p.add_argument("--beta2", type=float, default=-1.0,
                   help=f"AdamW beta2 (-1: {BETA2_SMALL} at up to {BETA2_SMALL_TOKENS} tokens per step, {BETA2} above)")
    p.add_argument("-v", type=int, default=20, help="val loss every N steps (0 = off)")
    p.add_argument("-m", type=int, default=20, help="val batches (<= 0: all)")
    p.add_argument("-a", type=int, default=0, help="overfit a single batch")
    p.add_argument("--seed", type=int, default=1337, help="seed: init, data order, debug batch")
    p.add_argument("--threads", type=int, default=int(os.environ.get("TORCH_NUM_THREADS", "0")),
                   help="torch threads (0 = torch's default)")
    p.add_argument("--write-init", default="", metavar="PATH", help="write a random-init llm.c checkpoint")
    p.add_argument("--depth", type=int, default=2, help="--write-init: depth (C = 64*depth, depth heads)")
    p.add_argument("--vocab", type=int, default=50257, help="--write-init: vocab size V")
    p.add_argument("--max-seq-len", type=int, default=1024, help="--write-init: maxT")
    p.add_argument("--write-debug-state", default="", metavar="PATH", help="write the debug state for the C test")
    p.add_argument("--double", action="store_true", help="--write-debug-state: compute in float64")
    p.add_argument("--dump-batches", nargs=2, metavar=("N", "PATH"),
                   help="write the first N train batches (x, y as int32) of -i to PATH (tokens < --vocab)")
    p.add_argument("--bench", type=int, default=0, metavar="N", help="time N training steps on random tokens")
    p.add_argument("--autocast", default="off", choices=["off", "bf16"], help="--bench: under torch.autocast (bf16)")
    a = p.parse_args()
    for flag in ("b", "t"):
        if getattr(a, flag) <= 0:
            fail(f"flag -{flag}: expected a positive integer, got '{getattr(a, flag)}'")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.write_init:
        cmd_write_init(a)
    elif a.write_debug_state:
        cmd_write_debug_state(a)
    elif a.dump_batches:
        cmd_dump_batches(a)
    elif a.bench:
        cmd_bench(a)
    else:
        cmd_train(a)


if __name__ == "__main__":
    main()
