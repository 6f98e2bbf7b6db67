#!/usr/bin/env python3
"""bench/ncu_times.py on a CSV shaped as Nsight Compute writes it: its own lines and the
program's before the header, demangled template kernels in an anonymous namespace, times in
mixed units with thousands separators, rows of other metrics ignored; and no rows at all is
an error, not an empty table.

  tests/report/test_ncu_times.py bench/
"""
import os
import subprocess
import sys
import tempfile

bench = os.path.abspath(sys.argv[1])
sys.path.insert(0, bench)
from ncu_times import read_rows, short_name, table  # noqa: E402

assert short_name("void nn::kernels::(anonymous namespace)::attention_bwd_q_tc<__half, 64>"
                  "(const T1 *, const T1 *, nn::kernels::AttnLayout, long, float)") \
    == "attention_bwd_q_tc<__half, 64>"
assert short_name("void f<ns::A<int>, 2>(int)") == "f<ns::A<int>, 2>"
assert short_name("plain_kernel") == "plain_kernel"

head = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"')
k1 = "void nn::kernels::(anonymous namespace)::attention_fwd_tc<__half, 64>(const T1 *, int)"
k2 = "void nn::kernels::(anonymous namespace)::attention_delta<__half>(const T1 *, long)"


def row(i, kernel, grid, unit, value, metric="gpu__time_duration.sum"):
    return (f'"{i}","1","kernels_bench","h","{kernel}","1","7","(128, 1, 1)","{grid}","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


text = "\n".join([
    "==PROF== Connected to process 1 (kernels_bench)",
    '{"impl": "libnn-default", "op": "attention forward"}',
    head,
    row(0, k1, "(768, 1, 1)", "usecond", "50.00"),
    row(1, k1, "(768, 1, 1)", "nsecond", "70,000"),
    row(2, k2, "(192, 1, 1)", "usecond", "4.00"),
    row(3, k1, "(768, 1, 1)", "usecond", "1.0", metric="sm__cycles_elapsed.avg"),
    row(4, k1, "(192, 1, 1)", "msecond", "0.2"),
])
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "ncu.csv")
    with open(path, "w") as f:
        f.write(text + "\n")
    rows = read_rows(path)
    assert rows == [("attention_fwd_tc<__half, 64>", "(768, 1, 1)", 50.0),
                    ("attention_fwd_tc<__half, 64>", "(768, 1, 1)", 70.0),
                    ("attention_delta<__half>", "(192, 1, 1)", 4.0),
                    ("attention_fwd_tc<__half, 64>", "(192, 1, 1)", 200.0)], rows
    t = table(rows).splitlines()
    assert t[2] == "| attention_fwd_tc<__half, 64> | (192, 1, 1) | 1 | 200.0 | 200.0 |", t
    assert t[3] == "| attention_fwd_tc<__half, 64> | (768, 1, 1) | 2 | 60.0 | 120.0 |", t
    assert t[4] == "| attention_delta<__half> | (192, 1, 1) | 1 | 4.0 | 4.0 |", t
    with open(path, "w") as f:
        f.write("==ERROR== Failed to initialize the profiler\n")
    r = subprocess.run([sys.executable, os.path.join(bench, "ncu_times.py"), path],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "no gpu__time_duration.sum rows" in r.stderr, r
print("ok: 4 launches in 3 groups, units and separators read, an empty run refused")
