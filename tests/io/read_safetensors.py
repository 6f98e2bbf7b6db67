#!/usr/bin/env python3
"""An independent safetensors reader (Python standard library only), written from the
format's specification, not from libnn's C++:

  8 bytes   N, the header size, unsigned little-endian 64-bit
  N bytes   UTF-8 JSON object, may be padded with spaces:
            {"__metadata__": {str: str}, NAME: {"dtype": D, "shape": [..], "data_offsets": [b, e]}}
  rest      the byte buffer; offsets are relative to its start, it is entirely indexed and
            has no holes; values are little-endian.

  read_safetensors.py FILE               prints the metadata and tensors
  read_safetensors.py --expect-sample FILE
                                         checks FILE holds what tests/io/write_samples.cpp writes
"""
import json
import struct
import sys
import zlib

DTYPES = {  # name: (bytes per element, struct code or None for bf16)
    "F64": (8, "d"), "F32": (4, "f"), "F16": (2, "e"), "BF16": (2, None),
    "I64": (8, "q"), "I32": (4, "i"), "I16": (2, "h"), "I8": (1, "b"),
    "U64": (8, "Q"), "U32": (4, "I"), "U16": (2, "H"), "U8": (1, "B"), "BOOL": (1, "?"),
}


class FormatError(Exception):
    pass


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise FormatError("duplicate key in the JSON header")
    return dict(pairs)


def _reject(token):
    raise FormatError("non-integer number %r in the JSON header" % token)


def decode(dtype, raw):
    size, code = DTYPES[dtype]
    n = len(raw) // size
    if code is None:  # bfloat16: the upper half of a float32
        halves = struct.unpack("<%dH" % n, raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    return list(struct.unpack("<%d%s" % (n, code), raw))


def parse(blob, legacy=True):
    """Returns (metadata, {name: (dtype, shape, values)}, names in buffer order). legacy:
    also take libnn's checksums of files written before 2026-11-29."""
    if len(blob) < 8:
        raise FormatError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise FormatError("header size %d exceeds the file" % n)
    text = blob[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        raise FormatError("header does not start with '{'")
    header = json.loads(text.rstrip(" "), object_pairs_hook=_no_duplicates,
                        parse_float=_reject, parse_constant=_reject)
    buf = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise FormatError("__metadata__ must map strings to strings")
    entries = []
    for name, info in header.items():
        if set(info) != {"dtype", "shape", "data_offsets"}:
            raise FormatError("tensor %r has keys %s" % (name, sorted(info)))
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES:
            raise FormatError("tensor %r: unknown dtype %r" % (name, dtype))
        numel = 1
        for d in shape:
            if not isinstance(d, int) or d < 0:
                raise FormatError("tensor %r: bad shape %r" % (name, shape))
            numel *= d
        if end - begin != numel * DTYPES[dtype][0]:
            raise FormatError("tensor %r: offsets [%d, %d] do not match shape %r" % (name, begin, end, shape))
        entries.append((begin, end, name, dtype, shape))
    entries.sort()
    pos = 0
    for begin, end, name, _, _ in entries:
        if begin != pos:
            raise FormatError("tensor %r starts at %d, expected %d (hole or overlap)" % (name, begin, pos))
        pos = end
    if pos != len(buf):
        raise FormatError("byte buffer is %d bytes, tensors cover %d" % (len(buf), pos))
    tensors = {name: (dtype, shape, decode(dtype, buf[b:e])) for b, e, name, dtype, shape in entries}
    # libnn's own metadata: zlib's CRC-32 of the tensors' bytes, 8 hex digits, the tensors
    # taken in the order of their names (as UTF-8 bytes); files of libnn before 2026-11-29
    # took them in buffer order
    by_name = sorted(entries, key=lambda e: e[2].encode())
    orders = [by_name, entries] if legacy else [by_name]
    if "libnn.crc32" in metadata:
        crcs = [zlib.crc32(b"".join(buf[e[0]:e[1]] for e in order)) for order in orders]
        if int(metadata["libnn.crc32"], 16) not in crcs:
            raise FormatError("libnn.crc32 %s does not match the data (%08x)" % (metadata["libnn.crc32"], crcs[0]))
    # ...and the CRC-32 of the rest of the header: every other metadata entry in key order
    # (by code point, as UTF-8), then each tensor's name, dtype and shape in the same order,
    # NUL-separated
    if "libnn.header_crc32" in metadata:
        meta = b"".join(k.encode() + b"\0" + v.encode() + b"\0"
                        for k, v in sorted(metadata.items(), key=lambda kv: kv[0].encode())
                        if k != "libnn.header_crc32") + b"\1"
        crcs = []
        for order in orders:
            text = meta
            for _, _, name, dtype, shape in order:
                text += name.encode() + b"\0" + dtype.encode() + b"\0"
                text += b"".join(b"%d," % d for d in shape) + b"\0"
            crcs.append(zlib.crc32(text))
        if int(metadata["libnn.header_crc32"], 16) not in crcs:
            raise FormatError("libnn.header_crc32 %s does not match the header (%08x)"
                              % (metadata["libnn.header_crc32"], crcs[0]))
    return metadata, tensors, [e[2] for e in entries]


# What tests/io/write_samples.cpp writes.
SAMPLE_METADATA = {"note": 'hello "world"\n', "unicode": "\u00fcn\u00ef \u20ac"}
SAMPLE = [  # name, dtype, shape, values (row-major), in buffer order
    ("f32_t", "F32", [3, 2], [0.0, 1024.0, 1.5, -0.0, -2.25, 2.0 ** -149]),
    ("f64", "F64", [3], [1.0 / 3, -1e300, 5e-324]),
    ("f16", "F16", [5], [1.0, -2.5, 65504.0, 2.0 ** -24, 2.0 ** -14]),
    ("bf16", "BF16", [2, 2], [1.0, -3.0, 0.15625, 2.0 ** 100]),
    ("i32", "I32", [4], [-2 ** 31, -1, 70000, 2 ** 31 - 1]),
    ("i64", "I64", [3], [-2 ** 63, 2 ** 40, 2 ** 63 - 1]),
    ("u8", "U8", [2, 2], [0, 7, 128, 255]),
    ("scalar", "F32", [], [42.0]),
    ("empty", "F32", [0, 3], []),
]


def check_sample(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert (8 + n) % 8 == 0, "data section not 8-byte aligned"
    metadata, tensors, order = parse(blob, legacy=False)  # (written now: names' order)
    assert "libnn.crc32" in metadata, "no libnn.crc32 in the metadata"
    crc = metadata.pop("libnn.crc32")
    assert "libnn.header_crc32" in metadata, "no libnn.header_crc32 in the metadata"
    header_crc = metadata.pop("libnn.header_crc32")
    assert metadata == SAMPLE_METADATA, "metadata %r" % metadata
    assert order == [s[0] for s in SAMPLE], "buffer order %r" % order
    for name, dtype, shape, values in SAMPLE:
        got = tensors[name]
        assert got[0] == dtype and got[1] == shape, "%s: %r" % (name, got[:2])
        assert got[2] == values, "%s: values %r, expected %r" % (name, got[2], values)
        # -0.0 == 0.0 in Python: compare the sign too
        assert [str(v) for v in got[2]] == [str(v) for v in values], name
    # the checks above must be able to fail: one flipped data bit breaks the checksum
    bad = bytearray(blob)
    bad[-1] ^= 1
    try:
        parse(bytes(bad))
        raise AssertionError("a flipped bit went unnoticed")
    except FormatError:
        pass
    # ...and one changed metadata byte breaks the header's: "hello" -> "jello"
    i = blob.index(b"hello")
    bad = bytearray(blob)
    bad[i] = ord("j")
    try:
        parse(bytes(bad))
        raise AssertionError("a changed metadata byte went unnoticed")
    except FormatError as e:
        assert "header_crc32" in str(e), e
    try:  # the reference implementation, when this machine has it (NumPy has no bf16)
        from safetensors import safe_open
        with safe_open(path, framework="np") as ref:
            assert {**ref.metadata()} == {**SAMPLE_METADATA, "libnn.crc32": crc,
                                          "libnn.header_crc32": header_crc}, ref.metadata()
            assert sorted(ref.keys()) == sorted(s[0] for s in SAMPLE), ref.keys()
            for name, dtype, shape, values in SAMPLE:
                if dtype != "BF16":
                    t = ref.get_tensor(name)
                    assert list(t.shape) == shape and t.flatten().tolist() == values, name
        print("safetensors package agrees")
    except ImportError:
        print("safetensors package not installed; stdlib reader only")
    print("ok: %s holds the %d sample tensors and metadata" % (path, len(SAMPLE)))


def main(argv):
    if len(argv) == 3 and argv[1] == "--expect-sample":
        check_sample(argv[2])
    elif len(argv) == 2:
        metadata, tensors, order = parse(open(argv[1], "rb").read())
        print("metadata:", json.dumps(metadata, ensure_ascii=False))
        for name in order:
            dtype, shape, values = tensors[name]
            print("%s %s %s %s" % (name, dtype, shape, values[:8]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (FormatError, AssertionError) as e:
        print("FAILED:", e, file=sys.stderr)
        sys.exit(1)
