#!/usr/bin/env python3
"""PyTorch peer of apps/mnist_train: the same Keras CNN/MLP, data, batch size, optimizer
(Adam, lr 1e-3 with cosine decay by default, inputs standardised), epochs and thread count, so the two can be timed side by side.
Prints one JSON object per epoch with the fields mnist_train --metrics writes."""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from ieee_fp32 import ieee_fp32
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, code, nd = struct.unpack(">HBB", data[:4])
    assert zero == 0 and code == 0x08, path
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def find(root, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(root, name)
        if os.path.exists(p):
            return p
    sys.exit(f"mnist_torch: no {stem}[.gz] in {root}")


def load(root, split):
    x = read_idx(find(root, f"{split}-images-idx3-ubyte"))
    y = read_idx(find(root, f"{split}-labels-idx1-ubyte"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def keras_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, 10))


def keras_mlp():
    return nn.Sequential(
        nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 512),
        nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 10))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--train-samples", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr-schedule", choices=["cosine", "constant"], default="cosine")
    ap.add_argument("--normalize", default="true", choices=["true", "false"])
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    ieee_fp32()
    dev = torch.device(a.device)
    xtr, ytr = load(a.data_dir, "train")
    xte, yte = load(a.data_dir, "t10k")
    if a.train_samples:
        xtr, ytr = xtr[:a.train_samples], ytr[:a.train_samples]
    if a.normalize == "true":  # the training set's own mean and std, as mnist_train does
        mean, std = xtr.mean().item(), xtr.std().item()
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
    xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)
    model = (keras_cnn() if a.model == "cnn" else keras_mlp()).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    n = xtr.shape[0]
    steps_total = a.epochs * ((n + a.batch_size - 1) // a.batch_size)
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps_total)
             if a.lr_schedule == "cosine" else None)
    print(f"mnist_torch: torch {torch.__version__}, {a.model} on {dev}, {n} samples, "
          f"{torch.get_num_threads()} threads", file=sys.stderr)
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(n, device=dev)
        loss_sum = torch.zeros((), device=dev)
        steps = 0
        for i in range(0, n, a.batch_size):
            idx = perm[i:i + a.batch_size]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched:
                sched.step()
            loss_sum += loss.detach()
            steps += 1
        train_loss = loss_sum.item() / steps
        train_seconds = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            vl, correct = 0.0, 0
            for i in range(0, xte.shape[0], 1000):
                out = model(xte[i:i + 1000])
                vl += F.cross_entropy(out, yte[i:i + 1000], reduction="sum").item()
                correct += (out.argmax(1) == yte[i:i + 1000]).sum().item()
        # "seconds" is the epoch's training time, as mnist_train's metrics report it
        # (validation excluded on both sides)
        print(json.dumps({"epoch": epoch, "train_loss": train_loss,
                          "val_loss": vl / xte.shape[0], "val_accuracy": correct / xte.shape[0],
                          "seconds": train_seconds, "samples_per_second": n / train_seconds}),
              flush=True)


if __name__ == "__main__":
    main()
