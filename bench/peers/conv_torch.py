#!/usr/bin/env python3
"""PyTorch peer of bench/conv_bench: the same convolution shapes one at a time (forward,
input gradient, weight gradient), timed the same way (a warm-up round, then the best of
--reps, each pass between two CUDA events), printed in conv_bench's table format with its
totals line, so the two tables read side by side. The shapes and counts come from a
conv_bench output (--layers-from), so both programs time the same layers. cuDNN's benchmark
mode is on (as in the ResNet-50 peer); FP32 is IEEE FP32 (ieee_fp32.py)."""
import argparse
import re
import sys
import time

import torch

from ieee_fp32 import ieee_fp32

ROW = re.compile(r"^(\d+)->(\d+) k(\d+) s(\d+) @(\d+)\s+(\d+)\s")


def layers_from(path):
    rows = []
    with open(path) as f:
        for line in f:
            m = ROW.match(line)
            if m:
                rows.append(tuple(int(v) for v in m.groups()))
    return rows


def best_seconds(dev, reps, f):
    """The best of `reps` timed calls after one warm-up call."""
    best = float("inf")
    for r in range(reps + 1):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            f()
            end.record()
            end.synchronize()
            s = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            f()
            s = time.perf_counter() - t0
        if r > 0:
            best = min(best, s)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers-from", required=True, help="a conv_bench output: its layer rows")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--layout", default="nhwc", choices=["nhwc", "nchw"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if a.batch_size < 1 or a.reps < 1:
        ap.error("--batch-size and --reps must be at least 1")
    try:
        layers = layers_from(a.layers_from)
    except OSError as e:
        sys.exit(f"conv_torch: cannot read {a.layers_from}: {e.strerror}")
    if not layers:
        sys.exit(f"conv_torch: no layer rows in {a.layers_from} (a conv_bench output)")
    ieee_fp32()
    torch.backends.cudnn.benchmark = True
    dev = torch.device(a.device)
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    fmt = torch.channels_last if a.layout == "nhwc" else torch.contiguous_format
    aten = torch.ops.aten
    print(f"conv_bench (PyTorch {torch.__version__}): ResNet-50 convolutions, batch {a.batch_size}, "
          f"{a.precision}, {a.layout}, {dev}, {torch.get_num_threads()} threads")
    print(f"{'layer (in->out kK sS @HxW)':<26} {'count':>6} {'forward':>17} {'input grad':>17} "
          f"{'weight grad':>17}")
    step, step_flops = [0.0, 0.0, 0.0], 0.0
    torch.manual_seed(1)
    for cin, cout, k, s, hw, count in layers:
        pad = k // 2
        x = torch.randn(a.batch_size, cin, hw, hw, device=dev).to(dt).contiguous(memory_format=fmt)
        w = (torch.randn(cout, cin, k, k, device=dev) * 0.05).to(dt).contiguous(memory_format=fmt)
        with torch.no_grad():
            y = torch.nn.functional.conv2d(x, w, None, s, pad)
        dy = torch.randn(y.shape, device=dev).to(dt).contiguous(memory_format=fmt)
        flops = 2.0 * y.numel() * cin * k * k
        image = cin == 3  # the stem's input needs no gradient

        def forward():
            with torch.no_grad():
                torch.nn.functional.conv2d(x, w, None, s, pad)

        def backward(mask):
            return lambda: aten.convolution_backward(dy, x, w, None, [s, s], [pad, pad], [1, 1],
                                                     False, [0, 0], 1, mask)

        passes = [forward, None if image else backward([True, False, False]),
                  backward([False, True, False])]
        cells = []
        for i, f in enumerate(passes):
            if f is None:
                cells.append(f"{'-':>17}")
                continue
            t = best_seconds(dev, a.reps, f)
            cells.append(f"{t * 1e3:6.2f} ms {flops / t / 1e9:4.0f} GF/s")
            step[i] += t * count
        print(f"{f'{cin}->{cout} k{k} s{s} @{hw}':<26} {count:6d} " + " ".join(cells), flush=True)
        step_flops += flops * count
    print(f"a training step ({step_flops / 1e9:.1f} GFLOP a pass): forward {step[0]:.3f} s, "
          f"input gradient {step[1]:.3f} s, weight gradient {step[2]:.3f} s, "
          f"total {sum(step):.3f} s")


if __name__ == "__main__":
    main()
