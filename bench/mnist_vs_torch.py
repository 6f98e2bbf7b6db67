#!/usr/bin/env python3
"""Trains the MNIST models with libnn (apps/mnist_train) and with PyTorch
(bench/peers/mnist_torch.py) back to back on the same device, threads, batch, optimizer and
epochs, and prints time, samples/s, accuracy and the libnn/PyTorch throughput ratio.

  bench/mnist_vs_torch.py --device cpu --threads 2 --epochs 3
  TORCH_PYTHON=/opt/torchpeer/bin/python bench/mnist_vs_torch.py --models cnn

Results are also written as JSON (--out) for bench/report."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import add_torch_python, check_paths, cpu_name, run_json_lines  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def summarise(rows, wall):
    """Per-epoch metrics lines -> the run's figures; wall: the process's seconds from start to
    exit (start-up, data loading, the GPU's first-use costs and validation included)."""
    # samples/s of the whole run: all samples over all seconds (a mean of the epochs' rates
    # would hide a slow first epoch, the GPU's algorithm searches say)
    seconds = sum(r["seconds"] for r in rows)
    samples = sum(r["samples_per_second"] * r["seconds"] for r in rows)
    return {"epochs": len(rows), "seconds": seconds, "wall_seconds": wall,
            "samples_per_second": samples / seconds if seconds > 0 else 0.0,
            "val_accuracy": rows[-1]["val_accuracy"], "train_loss": rows[-1]["train_loss"],
            "per_epoch": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="cnn,mlp", help="comma-separated: cnn, mlp")
    ap.add_argument("--dataset", default="fashion-mnist", choices=["mnist", "fashion-mnist"])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--train-samples", type=int, default=0)
    ap.add_argument("--app", default=os.path.join(ROOT, "build", "bin", "mnist_train"))
    add_torch_python(ap)
    ap.add_argument("--machine", default=None,
                    help="machine kind for bench/report's price table (default: cpu-<N>core, "
                         "or gpu-<name> on CUDA)")
    ap.add_argument("--out", default=None,
                    help="write the results here as JSON (schema libnn-bench-1, bench/README.md)")
    a = ap.parse_args()
    check_paths(a.out, [("--app", a.app), ("--python", a.python)])
    data_dir = a.data_dir or ("/usr/share/datasets/fashion-mnist" if a.dataset == "fashion-mnist"
                              else os.path.join(ROOT, "data", "mnist"))
    torch_version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True)
    if torch_version.returncode != 0:
        sys.exit(f"mnist_vs_torch: {a.python} cannot import torch; set TORCH_PYTHON or --python")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    common = ["--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--device", a.device,
              "--threads", str(a.threads), "--data-dir", data_dir,
              "--train-samples", str(a.train_samples)]
    results = {"date": datetime.date.today().isoformat(), "host_cpu": cpu_name(),
               "threads": a.threads, "device": a.device, "dataset": a.dataset,
               "torch": torch_version.stdout.strip(), "runs": []}
    gpu_name = ""
    if a.device.startswith("cuda"):
        q = subprocess.run([a.python, "-c", "import torch; print(torch.cuda.get_device_name())"],
                           capture_output=True, text=True)
        gpu_name = q.stdout.strip()
    for model in a.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            metrics = os.path.join(tmp, "m.jsonl")
            t0 = time.perf_counter()
            run_json_lines([a.app, "--model", model, "--dataset", a.dataset, "--metrics", metrics] + common, env)
            ours = summarise([json.loads(l) for l in open(metrics)], time.perf_counter() - t0)
        t0 = time.perf_counter()
        rows = run_json_lines([a.python, os.path.join(ROOT, "bench", "peers", "mnist_torch.py"),
                               "--model", model] + common, env)
        theirs = summarise(rows, time.perf_counter() - t0)
        results["runs"].append({"model": model, "libnn": ours, "pytorch": theirs,
                                "ratio": ours["samples_per_second"] / theirs["samples_per_second"]})
    print(f"\n{a.dataset} on {a.device} ({results['host_cpu']}, {a.threads} threads), "
          f"batch {a.batch_size}, {a.epochs} epochs, PyTorch {results['torch']}, {results['date']}")
    print("(seconds: the epochs' training time; wall: the process from start to exit; "
          "epoch s: each epoch's training time)")
    print(f"{'model':6} {'impl':8} {'seconds':>8} {'wall':>7} {'samples/s':>10} {'val acc':>8}  "
          f"libnn/PyTorch  epoch s")
    for r in results["runs"]:
        for impl in ("libnn", "pytorch"):
            s = r[impl]
            ratio = f"{r['ratio']:.2f}x" if impl == "libnn" else ""
            epochs = " ".join(f"{e['seconds']:.2f}" for e in s["per_epoch"])
            print(f"{r['model']:6} {impl:8} {s['seconds']:8.1f} {s['wall_seconds']:7.1f} "
                  f"{s['samples_per_second']:10.0f} {100 * s['val_accuracy']:7.2f}%  {ratio:>13}  {epochs}")
    if a.out:
        machine = a.machine or (("gpu-" + gpu_name.lower().replace(" ", "-")) if gpu_name
                                else f"cpu-{a.threads}core")
        host = f"{results['host_cpu']}, {a.threads} threads" + (f", {gpu_name}" if gpu_name else "")
        # both MNIST and Fashion-MNIST have 60,000 training images
        train_n = a.train_samples if 0 < a.train_samples < 60000 else 60000
        records = []
        for r in results["runs"]:
            for impl in ("libnn", "pytorch"):
                s = r[impl]
                records.append({
                    "benchmark": "mnist-" + a.dataset, "model": r["model"], "impl": impl,
                    "device": a.device, "precision": "fp32", "phase": "train",
                    "seconds": s["seconds"], "samples": train_n * s["epochs"],
                    "samples_per_second": s["samples_per_second"], "accuracy": s["val_accuracy"]})
        out = {"schema": "libnn-bench-1", "date": results["date"], "machine": machine,
               "host": host + f", PyTorch {results['torch']}", "command": " ".join(sys.argv),
               "records": records, "details": results}
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
