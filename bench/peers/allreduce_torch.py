#!/usr/bin/env python3
"""All-reduce throughput of torch.distributed, the peer of build/bin/allreduce_bench: same
sizes, same timing (warm-up calls, then timed calls, the slowest rank's time), same columns.
Reads torchrun's variables, so it starts the same way:

    scripts/dist_launch.sh --nprocs 2 -- python3 bench/peers/allreduce_torch.py

--backend gloo (TCP, CPU tensors, the default) is the like-for-like peer of libnn's ring;
nccl needs CUDA tensors."""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1024,65536,1048576,4194304,16777216", help="f32 elements per call")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--json", help="append one JSON object per size to FILE (rank 0)")
    a = p.parse_args()
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
        assert all(s > 0 for s in sizes)
    except (ValueError, AssertionError):
        sys.exit(f"allreduce_torch: --sizes must be positive numbers, got '{a.sizes}'")
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(a.device)
    if rank == 0:
        print(f"allreduce_torch: {world} ranks, {a.backend}, f32 on {device}, {a.iters} timed calls per size")
        print(f"{'bytes':>12} {'us/call':>12} {'algbw GB/s':>12} {'busbw GB/s':>12}")
    for n in sizes:
        t = torch.ones(n, device=device)
        for _ in range(a.warmup):
            dist.all_reduce(t)
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(t)
        if device.type == "cuda":
            torch.cuda.synchronize()
        sec = torch.tensor([(time.perf_counter() - t0) / a.iters], dtype=torch.float64)
        dist.all_reduce(sec, op=dist.ReduceOp.MAX)
        t = torch.ones(n, device=device)
        dist.all_reduce(t)
        assert torch.all(t == world), "wrong all-reduce result"
        s = float(sec)
        algbw = n * 4 / s / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank != 0:
            continue
        print(f"{n * 4:12d} {s * 1e6:12.1f} {algbw:12.3f} {busbw:12.3f}")
        if a.json:
            name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
            with open(a.json, "a") as f:
                f.write(json.dumps({"impl": f"torch-{a.backend}", "ranks": world, "device": str(device),
                                    "device_name": name, "bytes": n * 4, "seconds_per_call": s,
                                    "algbw_GBps": algbw, "busbw_GBps": busbw}) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
