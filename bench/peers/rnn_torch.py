#!/usr/bin/env python3
"""torch.nn.LSTM / GRU / RNN with build/bin/rnn_bench's flags and JSON lines (impl "pytorch"): forward
alone under no_grad, and forward + backward of the output's sum, best of --reps after a
warm-up. Plain modules, as users write them: cuDNN's fused RNN on CUDA, ATen's on the CPU."""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cells", default="lstm,gru")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--input-size", type=int, default=128)
    ap.add_argument("--hidden-size", type=int, default=256)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--bidirectional", action="store_true")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    T, N, I, H = a.seq_len, a.batch_size, a.input_size, a.hidden_size
    for cell in a.cells.split(","):
        torch.manual_seed(1)
        m = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[cell](
            I, H, num_layers=a.layers, bidirectional=a.bidirectional).to(dev)
        x = torch.randn(T, N, I, device=dev, requires_grad=True)

        def run(train):
            with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
                if not train:
                    with torch.no_grad():
                        m(x)
                    return
                y, _ = m(x)
            y.float().sum().backward()

        for train in (False, True):
            run(train)
            sync()
            best = float("inf")
            for _ in range(a.reps):
                t0 = time.perf_counter()
                run(train)
                sync()
                best = min(best, time.perf_counter() - t0)
            print(json.dumps({"impl": "pytorch", "cell": cell, "phase": "train" if train else "infer",
                              "device": a.device, "precision": a.precision, "seq_len": T, "batch": N,
                              "input": I, "hidden": H, "layers": a.layers, "bidirectional": a.bidirectional,
                              "ms": round(best * 1e3, 3), "sequences_per_second": round(N / best, 1)}),
                  flush=True)


if __name__ == "__main__":
    main()
