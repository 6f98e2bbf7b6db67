#!/usr/bin/env python3
"""bench/mnist_vs_torch.py's run figures: samples/s is all samples over all seconds, not a mean
of the epochs' rates, which hid a slow first epoch (the GPU's algorithm searches) and could
turn the libnn/PyTorch ratio the wrong way round.

  tests/report/test_mnist_summary.py bench/
"""
import os
import sys

sys.path.insert(0, os.path.abspath(sys.argv[1]))
from mnist_vs_torch import summarise  # noqa: E402


def epochs(seconds, samples=60000):
    return [{"seconds": s, "samples_per_second": samples / s, "val_accuracy": 0.9,
             "train_loss": 0.3} for s in seconds]


ours, theirs = summarise(epochs([4, 1, 1]), 7.0), summarise(epochs([2, 1.5, 1.5]), 6.0)
assert abs(ours["samples_per_second"] - 30000) < 1e-6, ours["samples_per_second"]
assert abs(theirs["samples_per_second"] - 36000) < 1e-6, theirs["samples_per_second"]
assert ours["seconds"] == 6 and ours["epochs"] == 3
assert ours["samples_per_second"] < theirs["samples_per_second"]  # (the mean of rates said 45000)
print("ok: 30000 and 36000 samples/s")
