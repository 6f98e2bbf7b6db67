#!/usr/bin/env python3
"""Plots the per-step training loss that `fp16_vs_fp32 --loss-curve FILE` (and its PyTorch
peer) write, one line per file and precision, and prints for each curve the mean loss of its
first and last tenth of steps and how many steps were not finite: the check that FP16 lowers
the loss as FP32 does, without NaN. Exits 1 if a curve has a non-finite loss, 2 when a file
cannot be read or written.

  bench/plot_loss_curves.py resnet50_loss_curve.csv --out docs/report/resnet50_loss.svg
  bench/plot_loss_curves.py libnn.csv torch.csv --label libnn --label PyTorch --out curves.png
  bench/plot_loss_curves.py resnet50_loss_curve.csv     # the table only (no matplotlib needed)"""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import import_pyplot  # noqa: E402


def die(message):
    print(f"plot_loss_curves: {message}", file=sys.stderr)
    sys.exit(2)


def read(path):
    """{precision: [loss by step]} from a step,precision,loss CSV."""
    curves = {}
    try:
        with open(path, newline="") as f:
            rows = csv.DictReader(f)
            if rows.fieldnames != ["step", "precision", "loss"]:
                die(f"{path}: expected the header step,precision,loss, got {rows.fieldnames}")
            for r in rows:
                try:  # (a short row's missing loss is None)
                    loss = float(r["loss"])
                except (TypeError, ValueError):
                    die(f"{path}, line {rows.line_num}: no loss value in "
                        f"{','.join(v for v in r.values() if v is not None)}")
                curves.setdefault(r["precision"], []).append(loss)
    except OSError as e:
        die(f"cannot read {path}: {e.strerror}")
    if not curves:
        die(f"{path} holds no steps")
    return curves


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="loss curve files (step,precision,loss)")
    ap.add_argument("--label", action="append", default=[], help="a name per file (default: its path)")
    ap.add_argument("--out", default=None, help="image to write (.svg or .png); none: table only")
    ap.add_argument("--title", default="training loss per step")
    a = ap.parse_args()
    if a.label and len(a.label) != len(a.csv):
        ap.error(f"{len(a.label)} --label for {len(a.csv)} files")
    labels = a.label or a.csv
    ax = None
    if a.out:
        try:
            plt = import_pyplot()
        except ImportError as e:
            die(str(e))
        fig, ax = plt.subplots(figsize=(7, 4))
        kinds = fig.canvas.get_supported_filetypes()
        if os.path.splitext(a.out)[1].lower().lstrip(".") not in kinds:
            ap.error(f"--out {a.out}: give a file ending in one of {', '.join('.' + k for k in sorted(kinds))}")
    ok = True
    print("| curve | steps | mean loss, first 10% | mean loss, last 10% | non-finite steps |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for path, label in zip(a.csv, labels):
        for precision, losses in read(path).items():
            name = f"{label} {precision}"
            bad = sum(not math.isfinite(x) for x in losses)
            ok = ok and bad == 0
            k = max(1, len(losses) // 10)
            head = [x for x in losses[:k] if math.isfinite(x)]
            tail = [x for x in losses[-k:] if math.isfinite(x)]
            mean = lambda xs: f"{sum(xs) / len(xs):.4f}" if xs else "-"  # noqa: E731
            print(f"| {name} | {len(losses)} | {mean(head)} | {mean(tail)} | {bad} |")
            if ax:
                ax.plot(range(len(losses)), losses, label=name, linewidth=1)
    if ax:
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title(a.title)
        ax.legend()
        fig.tight_layout()
        try:
            fig.savefig(a.out)
        except OSError as e:
            die(f"cannot write {a.out}: {e.strerror}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
