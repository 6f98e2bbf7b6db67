#!/usr/bin/env python3
"""Per-kernel device times from Nsight Compute's CSV: `ncu --csv --metrics
gpu__time_duration.sum ...` prints one row per profiled launch; this groups them by kernel
(its name without namespaces or parameters, template arguments kept) and grid, and prints a
table of launches, mean and total microseconds, slowest total first. Used by bench/gpu_suite.sh
to split a fused op (attention's forward, delta, dQ and dK/dV kernels) into its kernels.

  bench/ncu_times.py FILE.csv [--title TEXT]
"""
import argparse
import csv
import re
import sys
from collections import OrderedDict

UNITS = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def top_level(s):
    """(index, character) of s's characters outside template brackets <...>."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            yield i, ch


def short_name(name):
    """'void nn::k::(anonymous namespace)::f<__half, 64>(const T1 *, ...)' -> 'f<__half, 64>'."""
    # the parameter list: the first '(' outside template brackets that opens no namespace
    cut = next((i for i, ch in top_level(name) if ch == "(" and not name.startswith("(anonymous", i)),
               len(name))
    head = name[:cut].strip()
    if head.startswith("void "):
        head = head[5:]
    # the name: past the last '::' outside template brackets
    return head[max((i + 2 for i, _ in top_level(head) if head.startswith("::", i)), default=0):]


def read_rows(path):
    """The launches: (kernel, grid, microseconds). ncu writes its own lines ('==PROF==', the
    program's output) before the CSV header."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    header = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if header is None:
        return []
    rows = []
    for r in csv.DictReader(lines[header:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = UNITS.get(r.get("Metric Unit", ""))
        value = r.get("Metric Value", "").replace(",", "")
        if unit is None or not re.fullmatch(r"[0-9.eE+-]+", value):
            continue
        name = r.get("Kernel Name") or r.get("Function Name") or "?"
        rows.append((short_name(name), r.get("Grid Size", "?"), float(value) * unit))
    return rows


def table(rows):
    groups = OrderedDict()
    for kernel, grid, us in rows:
        groups.setdefault((kernel, grid), []).append(us)
    out = ["| kernel | grid | launches | mean us | total us |", "|---|---|---:|---:|---:|"]
    for (kernel, grid), v in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        out.append(f"| {kernel} | {grid} | {len(v)} | {sum(v) / len(v):.1f} | {sum(v):.1f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --csv output")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    rows = read_rows(a.csv)
    if not rows:
        sys.exit(f"ncu_times: no gpu__time_duration.sum rows in {a.csv} (did ncu run? its log says)")
    if a.title:
        print(f"\n{a.title}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
