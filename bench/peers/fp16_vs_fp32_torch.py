#!/usr/bin/env python3
"""PyTorch peer of bench/fp16_vs_fp32: torchvision's resnet50 (or the CIFAR ResNet-20, or the
Keras MNIST CNN), channels-last for the ResNets, torch.autocast + GradScaler, the same batch,
steps, synthetic data, optimizer (SGD momentum 0.9, lr 0.1 per 256 images, weight decay 1e-4)
and label smoothing. Prints the
same table and writes the same JSON (schema libnn-bench-1)."""
import argparse
import datetime
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from ieee_fp32 import ieee_fp32


def keras_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, 10))


class BasicBlock(nn.Module):
    """The CIFAR ResNet block with the parameter-free shortcut (option A), as libnn's."""

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride, self.extra = stride, planes - cin

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        s = x[:, :, ::self.stride, ::self.stride] if self.stride != 1 else x
        if self.extra:
            s = F.pad(s, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))
        return F.relu(h + s)


def cifar_resnet(depth=20, classes=10):
    n = (depth - 2) // 6
    layers, cin = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
    for planes, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(n):
            layers.append(BasicBlock(cin, planes, stride if b == 0 else 1))
            cin = planes
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    model = nn.Sequential(*layers)
    for m in model.modules():  # libnn's init (and torchvision's ResNets'): He normal, fan_out
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


def run(a, precision, dev):
    torch.manual_seed(a.seed)
    resnet, cifar = a.model == "resnet50", a.model == "resnet20"
    if resnet:
        import torchvision
        model = torchvision.models.resnet50(num_classes=1000)
    elif cifar:
        model = cifar_resnet()
    else:
        model = keras_cnn()
    nhwc = resnet or cifar  # channels-last, PyTorch's recipe for AMP convolutions
    model = model.to(dev).to(memory_format=torch.channels_last if nhwc else torch.contiguous_format)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=(0.1 if resnet or cifar else 0.05) * a.batch_size / 256,
                          momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")
    half = torch.bfloat16 if precision == "bf16" else torch.float16
    classes = 1000 if resnet else 10
    shape = ((a.batch_size, 3, a.image_size, a.image_size) if resnet
             else (a.batch_size, 3, 32, 32) if cifar else (a.batch_size, 1, 28, 28))
    g = torch.Generator(device="cpu").manual_seed(a.seed + 1)
    xs = [torch.randn(shape, generator=g).to(dev) for _ in range(a.synthetic_batches)]
    if nhwc:
        xs = [x.to(memory_format=torch.channels_last) for x in xs]
    ys = [torch.randint(0, classes, (a.batch_size,), generator=g).to(dev)
          for _ in range(a.synthetic_batches)]

    def step(i):
        with torch.autocast(dev.type, dtype=half, enabled=precision != "fp32"):
            loss = F.cross_entropy(model(xs[i % len(xs)]), ys[i % len(ys)],
                                   label_smoothing=0.1 if resnet else 0.0)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()

    losses = [step(i).item() for i in range(a.num_warmup_batches)]
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    timed = [step(a.num_warmup_batches + i) for i in range(a.num_batches)]
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    losses += [l.item() for l in timed]
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else 0.0
    return {"precision": precision, "seconds": seconds,
            "images_per_second": a.batch_size * a.num_batches / seconds, "peak_mb": peak,
            "final_loss": losses[-1], "losses": losses}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "resnet20", "mnist_cnn"])
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--num-batches", type=int, default=50)
    ap.add_argument("--num-warmup-batches", type=int, default=10)
    ap.add_argument("--precisions", default="fp32,fp16,bf16")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--synthetic-batches", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--machine", default="gpu")
    ap.add_argument("--loss-curve", default=None)
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.backends.cudnn.benchmark = True
    ieee_fp32()
    print(f"fp16_vs_fp32 (PyTorch {torch.__version__}): {a.model}, batch {a.batch_size}, "
          f"{a.num_warmup_batches}+{a.num_batches} steps on {dev}")
    results = []
    for p in a.precisions.split(","):
        r = run(a, p, dev)
        results.append(r)
        print(f"  {p:5} {r['images_per_second']:9.1f} images/s  peak {r['peak_mb']:8.0f} MiB  "
              f"final loss {r['final_loss']:.4f}", flush=True)
    base = next((r for r in results if r["precision"] == "fp32"), None)  # wherever it is listed
    for r in results:
        if base and r is not base:
            print(f"  {r['precision']} speedup over fp32: "
                  f"{r['images_per_second'] / base['images_per_second']:.2f}x")
    if a.loss_curve:
        with open(a.loss_curve, "w") as f:
            f.write("step,precision,loss\n")
            for r in results:
                for i, l in enumerate(r["losses"]):
                    f.write(f"{i},{r['precision']},{l}\n")
    if a.json:
        host = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
        recs = [{"benchmark": "fp16_vs_fp32", "model": a.model, "impl": "pytorch",
                 "device": dev.type, "precision": r["precision"], "phase": "train",
                 "seconds": r["seconds"], "samples": a.batch_size * a.num_batches,
                 "batch_size": a.batch_size,
                 "samples_per_second": r["images_per_second"], "peak_memory_mb": r["peak_mb"],
                 "final_loss": r["final_loss"]} for r in results]
        with open(a.json, "w") as f:
            json.dump({"schema": "libnn-bench-1", "date": datetime.date.today().isoformat(),
                       "machine": a.machine, "host": f"{host}, PyTorch {torch.__version__}",
                       "command": " ".join(sys.argv), "records": recs}, f, indent=1)


if __name__ == "__main__":
    main()
