#!/usr/bin/env python3
"""PyTorch peer of bench/kernels/kernels_bench: the same ops and sizes, timed the same way
(warm-up, then a synchronised loop), plus torch's device-to-device copy as the bandwidth
yardstick. One JSON object per op. --attention times scaled_dot_product_attention at the
shapes kernels_bench --attention uses (forward, forward + backward, and that with dropout 0.1);
--overhead the host cost per call of ops on tiny tensors."""
import argparse
import json
import time

import torch


def per_call(dev, iters, f):
    for _ in range(3):
        f()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def attention(dev, dt, a):
    """Same shapes, mask and FLOP count as kernels_bench --attention."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for n, h, t in [(32, 12, 128), (8, 12, 512)]:
        q, k, v, g = (torch.randn(n, h, t, 64, device=dev).to(dt) for _ in range(4))
        for x in (q, k, v):
            x.requires_grad_()
        keep = torch.ones(n, 1, 1, t, dtype=torch.bool, device=dev)
        fwd_flops = 4.0 * n * h * t * t * 64

        def forward():
            with torch.no_grad():
                sdpa(q, k, v, attn_mask=keep)

        def both():
            sdpa(q, k, v, attn_mask=keep).backward(g)

        def dropped():
            sdpa(q, k, v, attn_mask=keep, dropout_p=0.1).backward(g)

        for phase, f, flops in [("forward", forward, fwd_flops),
                                ("forward+backward", both, 3.5 * fwd_flops),
                                ("forward+backward, dropout 0.1", dropped, 3.5 * fwd_flops)]:
            s = per_call(dev, a.iters, f)
            print(json.dumps({"impl": "pytorch", "device": str(dev), "dtype": a.dtype,
                              "op": f"attention {phase}", "shape": f"{n}x{h}x{t}x64",
                              "us": round(s * 1e6, 1), "tflops": round(flops / s / 1e12, 2)}),
                  flush=True)


def overhead(dev, dt, a):
    """Same ops on 16-element tensors as kernels_bench --overhead: host cost per call."""
    x, y = torch.randn(4, 4, device=dev).to(dt), torch.randn(4, 4, device=dev).to(dt)
    w = torch.randn(4, 4, device=dev).to(dt).requires_grad_()
    b = torch.randn(4, device=dev).to(dt).requires_grad_()
    xg = x.clone().requires_grad_()
    params = [torch.randn(4, 4, device=dev).requires_grad_() for _ in range(10)]
    for p in params:
        p.grad = torch.randn(4, 4, device=dev)
    opt = torch.optim.AdamW(params, lr=1e-3, fused=dev.type == "cuda")

    ops = [("add, no grad", lambda: torch.add(xg, y), False),  # (no_grad around the whole loop)
           ("add, recorded", lambda: torch.add(xg, y), True),
           ("relu(x w + b) forward + backward", lambda: torch.relu(xg @ w + b).sum().backward(), True),
           ("adamw step, 10 parameters", opt.step, True)]
    for name, f, grad in ops:
        with torch.set_grad_enabled(grad):
            s = per_call(dev, a.iters, f)
        print(json.dumps({"impl": "pytorch", "device": str(dev), "dtype": a.dtype,
                          "op": f"overhead: {name}", "us": round(s * 1e6, 2)}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("-n", "--n", type=int, default=None,
                    help="elements per tensor, a multiple of 1024 (default 64M on CUDA, 4M on CPU)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    ap.add_argument("--attention", action="store_true")
    ap.add_argument("--overhead", action="store_true")
    a = ap.parse_args()
    if a.attention and a.overhead:
        ap.error("--attention and --overhead are different runs: give one")
    if a.iters < 1:
        ap.error(f"--iters must be at least 1, got {a.iters}")
    if a.n is not None and (a.n <= 0 or a.n % 1024):
        ap.error(f"-n must be a positive multiple of 1024, got {a.n}")
    if a.n is not None and (a.attention or a.overhead):
        ap.error("-n sets the memory-bound kernels' size; --attention and --overhead have their own")
    dev = torch.device(a.device)
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    if a.attention:
        return attention(dev, dt, a)
    if a.overhead:
        return overhead(dev, dt, a)
    n = a.n or ((64 << 20) if dev.type == "cuda" else (4 << 20))
    es = torch.tensor([], dtype=dt).element_size()
    x = torch.randn(n, device=dev).to(dt)
    y = torch.randn(n, device=dev).to(dt)
    out = torch.empty_like(x)
    x2 = x.view(-1, 1024)
    w, b = torch.ones(1024, device=dev, dtype=dt), torch.zeros(1024, device=dev, dtype=dt)
    # batch norm in training over (n / 1024, 64, 4, 4) channels-last, f32 parameters as under
    # autocast; PyTorch eager has no fused batch norm + add + ReLU, so both tails are composed
    cl = torch.channels_last
    bx = x.view(-1, 64, 4, 4).contiguous(memory_format=cl)
    bz = y.view(-1, 64, 4, 4).contiguous(memory_format=cl)
    bw, bb = torch.ones(64, device=dev), torch.zeros(64, device=dev)
    brm, brv = torch.zeros(64, device=dev), torch.ones(64, device=dev)
    bn = lambda: torch.nn.functional.batch_norm(bx, brm, brv, bw, bb, training=True)
    ops = [
        ("copy", 2 * es * n, lambda: out.copy_(x)),
        ("add", 3 * es * n, lambda: torch.add(x, y)),
        ("mul_scalar", 2 * es * n, lambda: x * 2.0),
        ("relu", 2 * es * n, lambda: torch.relu(x)),
        ("gelu", 2 * es * n, lambda: torch.nn.functional.gelu(x)),
        ("transpose", 2 * es * n, lambda: x2.t().contiguous()),
        ("sum_all", es * n, lambda: x.sum()),
        ("sum_rows", es * n, lambda: x2.sum(1)),
        ("sum_columns", es * n, lambda: x2.sum(0)),
        ("softmax_rows", 2 * es * n, lambda: torch.softmax(x2, 1)),
        ("layer_norm_rows", 2 * es * n, lambda: torch.nn.functional.layer_norm(x2, (1024,), w, b)),
        ("batch_norm_nhwc", 3 * es * n, bn),
        ("batch_norm_add_relu_nhwc", 4 * es * n, lambda: torch.relu(bn() + bz)),
        ("batch_norm_add_relu_nhwc_composed", 4 * es * n, lambda: torch.relu(bn() + bz)),
    ]
    if dt == torch.float32:
        p = x.clone().requires_grad_()
        p.grad = y.clone()
        opt = torch.optim.AdamW([p], lr=1e-3, fused=dev.type == "cuda")
        ops.append(("adamw_step", 7 * es * n, opt.step))
    for name, nbytes, f in ops:
        s = per_call(dev, a.iters, f)
        print(json.dumps({"impl": "pytorch", "device": str(dev), "dtype": a.dtype, "op": name,
                          "n": n, "us": round(s * 1e6, 2), "gb_per_s": round(nbytes / s / 1e9, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
