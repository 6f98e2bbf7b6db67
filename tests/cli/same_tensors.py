#!/usr/bin/env python3
"""same_tensors.py A B MIN_BYTES: exits 0 when two safetensors files hold the same tensor bytes
(their headers may differ, e.g. in the command line recorded there) and at least MIN_BYTES of
them; else prints what differs and exits 1. Used by the resume tests."""
import struct
import sys


def body(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return data[8 + n:]


a, b = body(sys.argv[1]), body(sys.argv[2])
if len(a) < int(sys.argv[3]):
    sys.exit(f"{sys.argv[1]}: only {len(a)} bytes of tensors")
if a != b:
    sys.exit(f"{sys.argv[2]} differs from {sys.argv[1]} (the resumed model from the uninterrupted one)")
print(f"identical: {len(a)} bytes of tensors")
