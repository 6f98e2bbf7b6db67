#!/usr/bin/env python3
"""Text classifier throughput, libnn against PyTorch in one call: runs build/bin/text_bench and
bench/peers/text_torch.py with the same flags on the same device, then prints the classes table
(training and inference samples/s of the MLP and BERT at each class count and precision, with
the libnn/PyTorch ratio) and, for BERT training, tokens/s and model FLOP utilisation against
the matmul rate measured on the same device (--gemm N).

  bench/text_vs_torch.py --device cpu --threads 2 --precisions fp32 --preset mini
  bench/text_vs_torch.py --device cuda --gemm 8192 --out results/text_h100.json

Every flag not listed below is passed to both programs (see `build/bin/text_bench --help`).
Results are also written as JSON (--out, schema libnn-bench-1) for bench/report."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import add_torch_python, check_paths, peer_context, run_json_lines  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "base": (12, 768, 12, 3072)}


def bert_train_flops(preset, seq_len, classes):
    """Training FLOPs per sequence: 3x the forward's matmuls (weights, attention scores and
    the attention-weighted sum over all T positions, padding included as both libraries
    compute it), pooler and classifier."""
    layers, h, _, ffn = PRESETS[preset]
    per_token = layers * (2 * (4 * h * h + 2 * h * ffn) + 2 * 2 * seq_len * h)
    return 3 * (seq_len * per_token + 2 * h * h + 2 * h * classes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--preset", default="base")
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "text_bench"))
    add_torch_python(ap)
    ap.add_argument("--machine", default=None, help="machine kind for bench/report's price table")
    ap.add_argument("--out", default=None, help="write the results as JSON (schema libnn-bench-1)")
    a, rest = ap.parse_known_args()
    check_paths(a.out, [("--bench", a.bench), ("--python", a.python)])
    shared = ["--device", a.device, "--threads", str(a.threads), "--preset", a.preset] + rest
    # --profile is libnn's alone (the peer has no such flag)
    peer_flags = [f for f in shared if f != "--profile"]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    torch_version, host, date, machine = peer_context(a.python, a.device, a.threads, a.machine)

    def write_out(ours, theirs):
        records = []
        for r in (r for r in ours + theirs if r["kind"] == "model"):
            name = r["model"] + ("-" + r["shape"] if r["model"] == "bert" else "")
            records.append({"benchmark": "text", "model": f"{name}/{r['classes']}cls", "impl": r["impl"],
                            "device": r["device"], "precision": r["precision"], "phase": r["phase"],
                            "batch_size": r["batch"], "seq_len": r["seq_len"],
                            "seconds": r["seconds"], "samples": r["batch"] * r["steps"],
                            "samples_per_second": r["samples_per_second"]})
        out = {"schema": "libnn-bench-1", "date": date, "machine": machine,
               "host": f"{host}, PyTorch {torch_version}", "command": " ".join(sys.argv),
               "records": records, "details": {"libnn": ours, "pytorch": theirs}}
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)

    ours = run_json_lines([a.bench] + shared, env)
    if a.out:  # libnn's records first: a peer that fails or is cut leaves them written
        write_out(ours, [])
    theirs = run_json_lines([a.python, os.path.join(ROOT, "bench", "peers", "text_torch.py")] + peer_flags, env)

    gemm = {(r["impl"], r["precision"]): r["tflops"] for r in ours + theirs if r["kind"] == "gemm"}
    key = lambda r: (r["model"], r["classes"], r["precision"], r["phase"])
    peer = {key(r): r for r in theirs if r["kind"] == "model"}
    print(f"\ntext classifiers on {host}, PyTorch {torch_version}, {date}")
    if gemm:
        print("measured matmul rate: " + ", ".join(
            f"{impl} {p} {tf * 1e3:.0f} GFLOP/s" for (impl, p), tf in sorted(gemm.items())))
    print(f"\n| model | classes | precision | phase | batch x T | libnn samples/s | PyTorch samples/s "
          f"| libnn / PyTorch | libnn tokens/s | libnn MFU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in (r for r in ours if r["kind"] == "model"):
        t = peer.get(key(r))
        ratio = f"{r['samples_per_second'] / t['samples_per_second']:.2f}" if t else "n/a"
        mfu = ""
        ceiling = max(gemm.get(("libnn", r["precision"]), 0), gemm.get(("pytorch", r["precision"]), 0))
        if r["model"] == "bert" and r["phase"] == "train" and ceiling:
            flops = bert_train_flops(r["shape"], r["seq_len"], r["classes"]) * r["samples_per_second"]
            mfu = f"{flops / (ceiling * 1e12):.0%}"
        name = r["model"] + ("-" + r["shape"] if r["model"] == "bert" else "")
        print(f"| {name} | {r['classes']} | {r['precision']} | {r['phase']} | {r['batch']} x {r['seq_len']} "
              f"| {r['samples_per_second']:.1f} | {t['samples_per_second'] if t else float('nan'):.1f} "
              f"| {ratio} | {r['samples_per_second'] * r['seq_len']:.0f} | {mfu} |")
    if a.out:
        write_out(ours, theirs)


if __name__ == "__main__":
    main()
