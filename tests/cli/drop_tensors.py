#!/usr/bin/env python3
"""drop_tensors.py FILE PREFIX: rewrites a safetensors file without the tensors whose names
start with PREFIX (and without the checksums, which would no longer match), the way a file
written before those tensors existed looks. Exits 1 when no tensor has the prefix."""
import json
import struct
import sys

path, prefix = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
body = data[8 + n:]
meta = header.pop("__metadata__", {})
dropped = [k for k in header if k.startswith(prefix)]
if not dropped:
    sys.exit(f"{path}: no tensor starts with '{prefix}'")
meta.pop("libnn.crc32", None)
meta.pop("libnn.header_crc32", None)
out, chunks, pos = {"__metadata__": meta}, [], 0
for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    if name in dropped:
        continue
    b, e = info["data_offsets"]
    chunks.append(body[b:e])
    out[name] = dict(info, data_offsets=[pos, pos + e - b])
    pos += e - b
text = json.dumps(out).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
print(f"dropped {len(dropped)} tensors: {', '.join(sorted(dropped))}")
