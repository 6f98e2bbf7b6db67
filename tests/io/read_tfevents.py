#!/usr/bin/env python3
"""An independent TensorBoard event file reader (Python standard library only), written from
the TFRecord and protobuf specifications, not from libnn's C++.

TFRecord: each record is
  uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
little-endian, with masked_crc = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32).
Each data is a protobuf tensorflow.Event:
  Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
            SessionLog session_log = 7; }
  Summary { repeated Value value = 1; }
  Value   { string tag = 1; float simple_value = 2; }
  SessionLog { SessionStatus status = 1; }   (START = 1: readers drop the events of earlier
             files at this step and later, the record of a run resumed from a checkpoint)

  read_tfevents.py FILE_OR_DIR                   prints the events
  read_tfevents.py --expect-sample FILE_OR_DIR   checks what tests/io/write_samples.cpp writes
  read_tfevents.py --expect-resumed DIR          checks the two files of a run and its resumption
"""
import glob
import os
import struct
import sys
import time


class FormatError(Exception):
    pass


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    pos = 0
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise FormatError("truncated record header at byte %d" % pos)
        (length,) = struct.unpack_from("<Q", blob, pos)
        (len_crc,) = struct.unpack_from("<I", blob, pos + 8)
        if len_crc != masked(crc32c(blob[pos:pos + 8])):
            raise FormatError("bad length CRC at byte %d" % pos)
        start = pos + 12
        if start + length + 4 > len(blob):
            raise FormatError("truncated record at byte %d" % pos)
        data = blob[start:start + length]
        (data_crc,) = struct.unpack_from("<I", blob, start + length)
        if data_crc != masked(crc32c(data)):
            raise FormatError("bad data CRC in the record at byte %d" % pos)
        yield data
        pos = start + length + 4


def fields(msg):
    """Yields (field number, wire type, value) of a protobuf message."""
    pos = 0

    def varint():
        nonlocal pos
        v, shift = 0, 0
        while True:
            if pos >= len(msg) or shift > 63:
                raise FormatError("bad varint")
            b = msg[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while pos < len(msg):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value, pos = msg[pos:pos + 8], pos + 8
        elif wire == 2:
            n = varint()
            value, pos = msg[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = msg[pos:pos + 4], pos + 4
        else:
            raise FormatError("unsupported wire type %d" % wire)
        if pos > len(msg):
            raise FormatError("field %d runs past the message" % number)
        yield number, wire, value


def decode_event(data):
    ev = {"scalars": []}
    for number, wire, value in fields(data):
        if (number, wire) == (1, 1):
            ev["wall_time"] = struct.unpack("<d", value)[0]
        elif (number, wire) == (2, 0):
            ev["step"] = value - (1 << 64) if value >= 1 << 63 else value  # int64
        elif (number, wire) == (3, 2):
            ev["file_version"] = value.decode("utf-8")
        elif (number, wire) == (7, 2):
            for n2, w2, v in fields(value):
                if (n2, w2) != (1, 0):
                    raise FormatError("unexpected SessionLog field %d" % n2)
                ev["session_status"] = v
        elif (number, wire) == (5, 2):
            for n2, w2, v in fields(value):
                if (n2, w2) != (1, 2):
                    raise FormatError("unexpected Summary field %d" % n2)
                tag, simple = None, None
                for n3, w3, x in fields(v):
                    if (n3, w3) == (1, 2):
                        tag = x.decode("utf-8")
                    elif (n3, w3) == (2, 5):
                        simple = struct.unpack("<f", x)[0]
                ev["scalars"].append((tag, simple))
        else:
            raise FormatError("unexpected Event field %d (wire type %d)" % (number, wire))
    return ev


def event_file(path):
    if os.path.isdir(path):
        files = glob.glob(os.path.join(path, "events.out.tfevents.*"))
        if len(files) != 1:
            raise FormatError("expected one event file in %s, found %r" % (path, files))
        return files[0]
    return path


def read(path):
    return [decode_event(r) for r in records(open(path, "rb").read())]


# What tests/io/write_samples.cpp writes: (tag, value, step) after the version event.
SAMPLE = [("loss", 0.5, 1), ("loss", 0.25, 2), ("acc/top1", 0.875, 2),
          ("big_step", -1.5, 2 ** 40), ("neg_step", 3.0, -1)]


def check_sample(path):
    path = event_file(path)
    name = os.path.basename(path)
    assert name.startswith("events.out.tfevents.") and "tfevents" in name, name
    events = read(path)
    assert events[0].get("file_version") == "brain.Event:2", events[0]
    got = [(e["scalars"][0][0], e["scalars"][0][1], e["step"]) for e in events[1:]]
    assert got == SAMPLE, "scalars %r, expected %r" % (got, SAMPLE)
    for e in events:
        assert abs(e["wall_time"] - time.time()) < 3600, "wall_time %r" % e["wall_time"]
        assert len(e["scalars"]) <= 1
    # the checks above must be able to fail: a flipped bit breaks a CRC
    blob = bytearray(open(path, "rb").read())
    blob[len(blob) // 2] ^= 1
    try:
        list(records(bytes(blob)))
        raise AssertionError("a flipped bit went unnoticed")
    except FormatError:
        pass
    try:  # TensorBoard itself, when this machine has it
        from tensorboard.backend.event_processing import event_accumulator
        acc = event_accumulator.EventAccumulator(path)
        acc.Reload()
        tb = [(t, s.value, s.step) for t in ("loss", "acc/top1", "big_step", "neg_step")
              for s in acc.Scalars(t)]
        assert sorted(tb) == sorted(SAMPLE), tb
        print("tensorboard package agrees")
    except ImportError:
        print("tensorboard package not installed; stdlib reader only")
    print("ok: %s holds the version event and %d scalars" % (path, len(SAMPLE)))


def check_resumed(folder):
    """DIR holds an interrupted run's file and its resumption's, which starts with a SessionLog
    START at step P (after the version event); the older file's scalars at P and later are
    dropped, and what is left has each tag's steps once and in order."""
    files = sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*")))
    assert len(files) == 2, "expected two event files in %s, found %r" % (folder, files)
    old, new = read(files[0]), read(files[1])
    assert new[0].get("file_version") == "brain.Event:2", new[0]
    assert new[1].get("session_status") == 1, "no SessionLog START after the version: %r" % new[1]
    purge = new[1]["step"]
    old_steps = [e["step"] for e in old if e["scalars"]]
    assert min(old_steps) < purge <= max(old_steps), \
        "the interrupted run's steps %r do not reach past the purge step %d" % (old_steps, purge)
    series = {}
    for e in [e for e in old if e["step"] < purge] + new:
        for tag, value in e["scalars"]:
            series.setdefault(tag, []).append((e["step"], value))
    for tag, points in series.items():
        steps = [p[0] for p in points]
        assert steps == sorted(set(steps)), "tag %s: steps %r" % (tag, steps)
    try:  # TensorBoard itself, when this machine has it
        from tensorboard.backend.event_processing import event_accumulator
        acc = event_accumulator.EventAccumulator(folder)
        acc.Reload()
        for tag, points in series.items():
            got = [(s.step, s.value) for s in acc.Scalars(tag)]
            want = [(step, struct.unpack("<f", struct.pack("<f", v))[0]) for step, v in points]
            assert got == want, "tag %s: TensorBoard reads %r, expected %r" % (tag, got, want)
        print("tensorboard package agrees")
    except ImportError:
        print("tensorboard package not installed; stdlib reader only")
    print("ok: the resumed run starts again at step %d; %d tags, each step once" % (purge, len(series)))


def main(argv):
    if len(argv) == 3 and argv[1] == "--expect-sample":
        check_sample(argv[2])
    elif len(argv) == 3 and argv[1] == "--expect-resumed":
        check_resumed(argv[2])
    elif len(argv) == 2:
        for e in read(event_file(argv[1])):
            print(e)
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
