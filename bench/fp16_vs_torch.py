#!/usr/bin/env python3
"""Training throughput per precision, libnn against PyTorch in one call: runs
build/bin/fp16_vs_fp32 and bench/peers/fp16_vs_fp32_torch.py with the same flags on the same
device, then prints one markdown table: images/s of each, the libnn/PyTorch ratio, each one's
speedup over its own FP32, peak device memory and the loss after the last step.

  bench/fp16_vs_torch.py --batch-size 256                      # ResNet-50 on cuda
  bench/fp16_vs_torch.py --device cpu --model mnist_cnn --batch-size 64 --num-batches 5
  bench/fp16_vs_torch.py --from libnn.json torch.json          # tabulate existing result files

Every flag not listed below is passed to both programs (see `build/bin/fp16_vs_fp32 --help`;
libnn's `--layout` stays libnn's). --loss-curve FILE.csv writes libnn's curve to FILE.csv and
PyTorch's to FILE.torch.csv. --out writes both runs' records as one result file
(schema libnn-bench-1) for bench/report.py."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import add_torch_python, check_paths  # noqa: E402


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"fp16_vs_torch: cannot read {path}: {e}")
    if doc.get("schema") != "libnn-bench-1" or not doc.get("records"):
        sys.exit(f"fp16_vs_torch: {path} is not a libnn-bench-1 result file with records")
    return doc


def check_pair(ours, theirs, paths):
    """Exits unless the two files are libnn's and PyTorch's records of the same benchmark (model,
    batch size, device): swapped, the ratios would read inverted."""
    def one(doc, field):
        return {r.get(field) for r in doc["records"]}
    for doc, impl, path in ((ours, "libnn", paths[0]), (theirs, "pytorch", paths[1])):
        if one(doc, "impl") != {impl}:
            sys.exit(f"fp16_vs_torch: {path} holds records of {sorted(map(str, one(doc, 'impl')))}, "
                     f"expected {impl}'s (--from LIBNN_JSON TORCH_JSON)")
    for field in ("model", "batch_size", "device"):
        if one(ours, field) != one(theirs, field):
            sys.exit(f"fp16_vs_torch: the files differ in {field}: {sorted(map(str, one(ours, field)))} "
                     f"against {sorted(map(str, one(theirs, field)))}")


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd)
    if p.returncode != 0:
        sys.exit(f"fp16_vs_torch: {cmd[0]} failed ({p.returncode})")


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def table(ours, theirs):
    """Markdown lines comparing the two result files, one row per precision."""
    by = lambda doc: {r["precision"]: r for r in doc["records"]}  # noqa: E731
    o, t = by(ours), by(theirs)
    model = ours["records"][0]["model"]
    layout = "/".join(sorted({r.get("layout", "nchw") for r in ours["records"]}))
    lines = [f"{model}, libnn {layout}: {ours['host']} ({ours['date']}); "
             f"peer: {theirs['host']} ({theirs['date']})", "",
             "| precision | libnn images/s | PyTorch images/s | libnn/PyTorch | libnn vs own FP32 "
             "| PyTorch vs own FP32 | peak MiB libnn / PyTorch | last loss libnn / PyTorch |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in [p for p in ("fp32", "fp16", "bf16") if p in o or p in t]:
        a, b = o.get(p, {}), t.get(p, {})
        sa, sb = a.get("samples_per_second"), b.get("samples_per_second")
        ratio = sa / sb if sa and sb else None
        own = lambda d, s: s / d["fp32"]["samples_per_second"] if s and "fp32" in d else None  # noqa: E731
        lines.append(
            f"| {p} | {fmt(sa, ',.1f')} | {fmt(sb, ',.1f')} | {fmt(ratio, '.2f')}x "
            f"| {fmt(own(o, sa), '.2f')}x | {fmt(own(t, sb), '.2f')}x "
            f"| {fmt(a.get('peak_memory_mb'), ',.0f')} / {fmt(b.get('peak_memory_mb'), ',.0f')} "
            f"| {fmt(a.get('final_loss'), '.4f')} / {fmt(b.get('final_loss'), '.4f')} |")
    # (a non-finite loss is JSON null in libnn's files)
    finite = lambda x: isinstance(x, (int, float)) and math.isfinite(x)  # noqa: E731
    bad = [f"{impl} {r['precision']}" for impl, d in (("libnn", ours), ("PyTorch", theirs))
           for r in d["records"] if not finite(r.get("final_loss"))]
    if bad:
        lines.append(f"\nNot finite last loss: {', '.join(bad)}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="files", nargs=2, metavar=("LIBNN_JSON", "TORCH_JSON"),
                    help="tabulate these result files instead of running the benchmarks")
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "fp16_vs_fp32"))
    add_torch_python(ap)
    ap.add_argument("--layout", default=None, help="libnn's memory format (the peer runs channels-last)")
    ap.add_argument("--out", default=None, help="write both runs' records (schema libnn-bench-1)")
    ap.add_argument("--loss-curve", default=None,
                    help="libnn's loss per step into this CSV, PyTorch's beside it (.torch.csv)")
    a, rest = ap.parse_known_args()
    if a.files:
        if rest or a.loss_curve:
            given = rest + (["--loss-curve", a.loss_curve] if a.loss_curve else [])
            ap.error(f"--from takes no benchmark flags, got {' '.join(given)}")
        check_paths(a.out)
        ours, theirs = load(a.files[0]), load(a.files[1])
        check_pair(ours, theirs, a.files)
    else:
        check_paths(a.out, [("--bench", a.bench), ("--python", a.python)])
        curves = ([], [])
        if a.loss_curve:  # one file each: the peer's run would overwrite libnn's
            stem, ext = os.path.splitext(a.loss_curve)
            curves = (["--loss-curve", a.loss_curve], ["--loss-curve", f"{stem}.torch{ext or '.csv'}"])
        with tempfile.TemporaryDirectory() as tmp:
            mine, peer = os.path.join(tmp, "libnn.json"), os.path.join(tmp, "torch.json")
            layout = ["--layout", a.layout] if a.layout else []
            run([a.bench] + rest + layout + curves[0] + ["--json", mine])
            run([a.python, os.path.join(ROOT, "bench", "peers", "fp16_vs_fp32_torch.py")] + rest
                + curves[1] + ["--json", peer])
            ours, theirs = load(mine), load(peer)
        if a.loss_curve:
            print(f"loss curves: libnn {curves[0][1]}, PyTorch {curves[1][1]}")
    print("\n".join(table(ours, theirs)))
    if a.out:
        merged = dict(ours, host=f"{ours['host']}; peer: {theirs['host']}",
                      command=" ".join(sys.argv), records=ours["records"] + theirs["records"])
        with open(a.out, "w") as f:
            json.dump(merged, f, indent=1)


if __name__ == "__main__":
    main()
