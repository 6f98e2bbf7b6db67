#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/ (valid tiny files, Python standard library only).
Run from anywhere; the files are committed, so this is only needed to change them."""
import gzip
import json
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(sub, name, data):
    os.makedirs(os.path.join(ROOT, sub), exist_ok=True)
    with open(os.path.join(ROOT, sub, name), "wb") as f:
        f.write(data)


def idx(code, fmt, dims, values):
    head = bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    return head + struct.pack(">%d%s" % (len(values), fmt), *values)


def safetensors(tensors, metadata=None, crc=True, pad=True):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if crc:
        header.setdefault("__metadata__", {})["libnn.crc32"] = "%08x" % zlib.crc32(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


write("idx", "u8_3x2x2", idx(0x08, "B", [3, 2, 2], list(range(12))))
write("idx", "i8_4", idx(0x09, "b", [4], [-128, -1, 0, 127]))
write("idx", "i16_2x2", idx(0x0B, "h", [2, 2], [-300, 2, 3, 32767]))
write("idx", "i32_3", idx(0x0C, "i", [3], [-5, 70000, 1]))
write("idx", "f32_2x2", idx(0x0D, "f", [2, 2], [1.5, -2.0, 0.0, 3e10]))
write("idx", "f64_1", idx(0x0E, "d", [1], [1.0 / 3]))
write("idx", "u8_empty", idx(0x08, "B", [0, 28, 28], []))
write("idx", "u8_2x3.gz", gzip.compress(idx(0x08, "B", [2, 3], [1, 2, 3, 250, 0, 7]), mtime=0))

f32 = struct.pack("<3f", 1.5, -2.0, 0.25)
write("safetensors", "f32_crc", safetensors([("w", "F32", [3], f32)]))
write("safetensors", "f32_no_crc", safetensors([("w", "F32", [3], f32)], crc=False, pad=False))
write("safetensors", "all_dtypes", safetensors([
    ("a", "F64", [1], struct.pack("<d", 0.5)),
    ("b", "F32", [2, 1], struct.pack("<2f", 1, 2)),
    ("c", "F16", [2], struct.pack("<2e", 1, -2)),
    ("d", "BF16", [1], struct.pack("<H", 0x3F80)),
    ("e", "I32", [], struct.pack("<i", -7)),
    ("f", "I64", [1], struct.pack("<q", 1 << 40)),
    ("g", "U8", [0, 4], b""),
], metadata={"format": "pt"}, crc=False))
write("safetensors", "checkpoint", safetensors([
    ("model.fc.weight", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
    ("optim.steps", "F64", [], struct.pack("<d", 3)),
], metadata={"libnn.step": "3", "rng.seed": "24301", "note": "caf\u00e9 \"q\"\n"}))
write("safetensors", "empty", safetensors([], crc=False, pad=False))
