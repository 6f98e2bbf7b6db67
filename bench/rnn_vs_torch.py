#!/usr/bin/env python3
"""LSTM, GRU and RNN, libnn against PyTorch in one call: runs build/bin/rnn_bench and
bench/peers/rnn_torch.py with the same flags on the same device and prints one table of
forward (inference) and forward + backward (training) times with the libnn/PyTorch ratio.

  TORCH_PYTHON=/path/to/venv/bin/python bench/rnn_vs_torch.py --device cpu --threads 2
  bench/rnn_vs_torch.py --device cuda --seq-len 512 --precision fp16 --out results/rnn_h100.json

Every flag not listed below is passed to both programs (see `build/bin/rnn_bench --help`).
Results are also written as JSON (--out, schema libnn-bench-1) for bench/report."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import add_torch_python, check_paths, peer_context, run_json_lines  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "rnn_bench"))
    add_torch_python(ap)
    ap.add_argument("--machine", default=None, help="machine kind for bench/report's price table")
    ap.add_argument("--out", default=None, help="write the results as JSON (schema libnn-bench-1)")
    a, rest = ap.parse_known_args()
    check_paths(a.out, [("--bench", a.bench), ("--python", a.python)])
    shared = ["--device", a.device, "--threads", str(a.threads)] + rest
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    torch_version, host, date, machine = peer_context(a.python, a.device, a.threads, a.machine)

    def write_out(ours, theirs):
        records = [{"benchmark": "rnn", "model": f"{r['cell']}-{r['layers']}x{r['hidden']}"
                    + ("-bi" if r["bidirectional"] else ""), "impl": r["impl"], "device": r["device"],
                    "precision": r["precision"], "phase": r["phase"], "batch_size": r["batch"],
                    "seq_len": r["seq_len"], "seconds": r["ms"] / 1e3, "samples": r["batch"],
                    "samples_per_second": r["sequences_per_second"]} for r in ours + theirs]
        with open(a.out, "w") as f:
            json.dump({"schema": "libnn-bench-1", "date": date, "machine": machine,
                       "host": f"{host}, PyTorch {torch_version}", "command": " ".join(sys.argv),
                       "records": records}, f, indent=1)

    ours = run_json_lines([a.bench] + shared, env)
    if a.out:  # libnn's records first: a peer that fails or is cut leaves them written
        write_out(ours, [])
    theirs = run_json_lines([a.python, os.path.join(ROOT, "bench", "peers", "rnn_torch.py")] + shared, env)
    peer = {(r["cell"], r["phase"]): r for r in theirs}
    print(f"\nLSTM / GRU / RNN on {host}, PyTorch {torch_version}, {date}")
    print("\n| cell | layers x hidden | phase | precision | T x batch | libnn ms | PyTorch ms | libnn / PyTorch speed |")
    print("|---|---|---|---|---|---:|---:|---:|")
    for r in ours:
        t = peer.get((r["cell"], r["phase"]))
        ratio = f"{t['ms'] / r['ms']:.2f}x" if t else "n/a"
        shape = f"{r['layers']} x {r['hidden']}" + (" bi" if r["bidirectional"] else "")
        print(f"| {r['cell']} | {shape} | {r['phase']} | {r['precision']} | {r['seq_len']} x {r['batch']} "
              f"| {r['ms']:.1f} | {t['ms'] if t else float('nan'):.1f} | {ratio} |")
    if a.out:
        write_out(ours, theirs)


if __name__ == "__main__":
    main()
