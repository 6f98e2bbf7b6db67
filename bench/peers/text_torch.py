#!/usr/bin/env python3
"""PyTorch peer of bench/text_bench: the same text classifiers, written as plain PyTorch
modules (nn.EmbeddingBag for the MLP; for BERT, Linear/LayerNorm/GELU blocks with
F.scaled_dot_product_attention and the same post-LN layout, pooler and classifier), the same
flags, synthetic batches and JSON lines, so bench/text_vs_torch.py can put them side by side.
Mixed precision is torch.autocast (+ GradScaler for fp16)."""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from ieee_fp32 import ieee_fp32

PRESETS = {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "base": (12, 768, 12, 3072)}


class TextMLP(nn.Module):
    """Mean of the real tokens' embeddings -> Linear 256, ReLU, Dropout 0.2 -> classes."""

    def __init__(self, vocab, classes, embed=128, hidden=256):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, embed, mode="mean", padding_idx=0)
        self.mlp = nn.Sequential(nn.Linear(embed, hidden), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(hidden, classes))

    def forward(self, ids, keep):
        return self.mlp(self.embed(ids))  # padding_idx 0 is left out of the mean


class Layer(nn.Module):
    def __init__(self, h, heads, ffn, p):
        super().__init__()
        self.heads, self.p = heads, p
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.norm1, self.norm2 = nn.LayerNorm(h, eps=1e-12), nn.LayerNorm(h, eps=1e-12)
        self.ff1, self.ff2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x, mask):
        n, t, h = x.shape
        split = lambda y: y.view(n, t, self.heads, h // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)),
                                           attn_mask=mask,
                                           dropout_p=self.p if self.training else 0.0)
        a = a.transpose(1, 2).reshape(n, t, h)
        x = self.norm1(x + F.dropout(self.o(a), self.p, self.training))
        return self.norm2(x + F.dropout(self.ff2(F.gelu(self.ff1(x))), self.p, self.training))


class Bert(nn.Module):
    def __init__(self, vocab, classes, preset, max_len=512, p=0.1):
        super().__init__()
        layers, h, heads, ffn = PRESETS[preset]
        self.p = p
        self.word = nn.Embedding(vocab, h, padding_idx=0)
        self.pos, self.token_type = nn.Embedding(max_len, h), nn.Embedding(2, h)
        self.norm = nn.LayerNorm(h, eps=1e-12)
        self.layers = nn.ModuleList(Layer(h, heads, ffn, p) for _ in range(layers))
        self.pooler, self.classifier = nn.Linear(h, h), nn.Linear(h, classes)

    def forward(self, ids, keep):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)
        x = self.word(ids) + self.pos(pos) + self.token_type(torch.zeros_like(pos))
        x = F.dropout(self.norm(x), self.p, self.training)
        mask = keep.bool()[:, None, None, :]  # (N, 1, 1, T): True = attend
        for layer in self.layers:
            x = layer(x, mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(F.dropout(pooled, self.p, self.training))


def batches(model, classes, batch, seq_len, vocab, device, seed, pool=2):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(pool):
        ids = torch.randint(5, vocab, (batch, seq_len), generator=g)
        length = torch.randint(seq_len // 2, seq_len + 1, (batch, 1), generator=g)
        keep = (torch.arange(seq_len)[None, :] < length).to(torch.uint8)
        target = torch.randint(0, classes, (batch,), generator=g)
        out.append(((ids * keep).to(device), keep.to(device), target.to(device)))
    return out


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(a, model_name, classes, precision, phase, device):
    torch.manual_seed(a.seed)
    batch = a.mlp_batch if model_name == "mlp" else a.bert_batch
    seq_len = a.mlp_seq_len if model_name == "mlp" else a.bert_seq_len
    model = (TextMLP(a.vocab_size, classes) if model_name == "mlp"
             else Bert(a.vocab_size, classes, a.preset, max_len=max(512, seq_len))).to(device)
    data = batches(model_name, classes, batch, seq_len, a.vocab_size, device, a.seed + 1)
    half = torch.bfloat16 if precision == "bf16" else torch.float16
    amp = precision != "fp32"
    loss_value = math.nan
    if phase == "train":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

        def step(i):
            ids, keep, y = data[i % len(data)]
            with torch.autocast(device.type, dtype=half, enabled=amp):
                loss = F.cross_entropy(model(ids, keep), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss.detach()
    else:
        model.eval()

        def step(i):
            ids, keep, _ = data[i % len(data)]
            with torch.no_grad(), torch.autocast(device.type, dtype=half, enabled=amp):
                return model(ids, keep).argmax(1)
    for i in range(a.num_warmup_batches):
        step(i)
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(a.num_batches):
        last = step(a.num_warmup_batches + i)
    sync(device)
    seconds = time.perf_counter() - t0
    if phase == "train":
        loss_value = float(last)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else 0.0
    return {"impl": "pytorch", "kind": "model", "model": model_name,
            "shape": a.preset if model_name == "bert" else "default", "classes": classes,
            "device": device.type, "precision": precision, "phase": phase, "batch": batch,
            "seq_len": seq_len, "steps": a.num_batches, "seconds": seconds,
            "samples_per_second": batch * a.num_batches / seconds, "peak_memory_mb": peak,
            "loss": None if math.isnan(loss_value) else loss_value}


def gemm_tflops(precision, device, n):
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)
    a @ b
    sync(device)
    best = 0.0
    for _ in range(3):  # a ceiling: the best of three windows, so a busy moment does not lower it
        reps, t0 = 0, time.perf_counter()
        while reps < 3 or time.perf_counter() - t0 < 0.5:
            a @ b
            reps += 1
            if reps % 8 == 0:
                sync(device)
        sync(device)
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="mlp,bert")
    ap.add_argument("--preset", default="base", choices=sorted(PRESETS))
    ap.add_argument("--classes", default="2,10,1000,20000")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--phases", default="train,infer")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--mlp-batch", type=int, default=256)
    ap.add_argument("--mlp-seq-len", type=int, default=256)
    ap.add_argument("--bert-batch", type=int, default=32)
    ap.add_argument("--bert-seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=30522)
    ap.add_argument("--num-batches", type=int, default=20)
    ap.add_argument("--num-warmup-batches", type=int, default=3)
    ap.add_argument("--gemm", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    ieee_fp32()  # (PyTorch's matmuls default to IEEE FP32 already; said here, not assumed)
    device = torch.device(a.device)
    precisions = a.precisions.split(",")
    if a.gemm > 0:
        for p in precisions:
            tf = gemm_tflops(p, device, a.gemm)
            print(json.dumps({"impl": "pytorch", "kind": "gemm", "device": device.type,
                              "precision": p, "n": a.gemm, "tflops": tf}), flush=True)
    for model in a.models.split(","):
        for classes in (int(c) for c in a.classes.split(",")):
            for p in precisions:
                for phase in a.phases.split(","):
                    r = measure(a, model, classes, p, phase, device)
                    print(json.dumps(r), flush=True)
                    print(f"pytorch {model:5} {classes:6} {p:5} {phase:6} "
                          f"{r['samples_per_second']:10.1f} samples/s", file=sys.stderr)


if __name__ == "__main__":
    main()
