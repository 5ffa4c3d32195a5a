#!/usr/bin/env python3
"""Seeds of fuzz_store for the journal's format 2 (issue 30): written here
from the format as store.h documents it, independently of store.c, so that
the replay in `make check` also checks that the C reader reads what the
documented format says.  Run from the repository root:

    python3 fuzz/store_seeds.py fuzz/corpus/fuzz_store

Format 2, one record after another:
    b"\\xffTJ\\x02" | payload length (u32 LE) | sequence (u64 LE)
    | CRC32C of the 16 bytes before (u32 LE) | CRC32C of the payload (u32 LE)
    | payload: {"entries":[...],"format":1} + b"\\n"
The first byte of a seed picks fuzz_store's mode: b"1" a journal, b"3"
records built by the writer's encoder from the bytes after it.
"""
import json
import os
import struct
import sys


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def entry(name, enabled=None, plans=()):
    e = {"format": 1, "name": name}
    if enabled is not None:
        e["enabled"] = enabled
    e["plans"] = [{"hooks": h, "step": s} for s, h in plans]
    return e


def record(seq, entries, payload=None):
    if payload is None:
        payload = json.dumps({"entries": entries, "format": 1}, sort_keys=True,
                             separators=(",", ":")).encode() + b"\n"
    head = b"\xffTJ\x02" + struct.pack("<IQ", len(payload), seq)
    return head + struct.pack("<II", crc32c(head), crc32c(payload)) + payload


def seeds():
    a1 = record(1, [entry("a", "resid_post:1")])
    b2 = record(2, [entry("b", None, [(5, "attn_out:*"), (9, "")])])
    a3 = record(3, [entry("a", "after"), entry("c@7", "x")])
    yield "journal2-one", b"1" + a1
    yield "journal2-three", b"1" + a1 + b2 + a3
    yield "journal2-torn-payload", b"1" + a1 + b2 + a3[:-5]
    yield "journal2-torn-header", b"1" + a1 + a3[:10]
    yield "journal2-zero-tail", b"1" + a1 + bytes(64)
    flipped = bytearray(b2)
    flipped[-8] ^= 0x01
    yield "journal2-flipped-middle", b"1" + a1 + bytes(flipped) + a3
    yield "journal2-cut-middle", b"1" + a1 + b2[:30] + b2[36:] + a3
    yield "journal2-bad-magic", b"1" + a1 + b"\xfeTJ\x02" + b2[4:] + a3
    yield "journal2-seq-gap", b"1" + a1 + a3
    yield "journal2-seq-stale", b"1" + a1 + b2 + record(2, [entry("a", "stale")])
    yield "journal2-after-old", bytes([0x81]) + record(3, [entry("a", "live")])
    yield "journal2-stale-after-old", bytes([0x81]) + record(1, [entry("a", "old")])
    yield "journal2-intact-not-state", b"1" + a1 + record(2, [], b'{"format":2}\n') + a3
    yield "journal2-twice", b"1" + record(1, [entry("x"), entry("x", "y")])
    yield "journal2-huge-length", b"1" + b"\xffTJ\x02" + struct.pack("<IQ", 0xFFFFFFF0, 1) + b"xxxx"
    # A header whose length runs past the end, followed by an intact record: after its
    # header (long-header-overlaps), or inside its header, where its payload CRC would be
    # (record-inside-header: the damaged stretch is shorter than a header; found by review,
    # an ASan heap-buffer-overflow in the log's name search before the fix).
    long_head = b"\xffTJ\x02" + struct.pack("<IQ", 4000, 9)
    long_head += struct.pack("<I", crc32c(long_head))
    r1 = record(1, [entry("a", "x")])
    yield "journal2-long-header-overlaps", b"1" + long_head + struct.pack("<I", 0) + r1
    yield "journal2-record-inside-header", b"1" + long_head + r1
    garbage = bytearray(a1 * 3)
    garbage[30:40] = b"\xffTJ\x02\xffTJ\x02\xff\xff"
    yield "journal2-garbage-magic", b"1" + bytes(garbage)
    # Mode 3: n records, first seq, then per record: entries, (name, length, letters)...,
    # then damage steps: count, (position hi, lo, kind, argument).
    yield "records-clean", b"3" + bytes([3, 0, 1, 0, 3, 1, 2, 4, 1, 1, 5, 2, 0, 0, 1])
    yield "records-flip", b"3" + bytes([3, 0, 1, 0, 3, 1, 2, 4, 1, 1, 5, 2, 0, 0, 1,
                                         1, 0, 60, 0, 0x20])
    yield "records-cut", b"3" + bytes([4, 1, 0, 1, 2, 3, 2, 7, 1, 1, 2, 0, 0, 0, 0, 2,
                                        1, 0, 40, 1, 20])
    yield "records-truncated", b"3" + bytes([2, 0, 1, 0, 3, 1, 2, 4, 1, 1, 0, 2, 0, 150, 2, 0])
    yield "records-many-steps", b"3" + bytes([7, 2] + [3, 0, 2, 1, 1, 3, 3, 2, 0] * 7 +
                                             [4, 0, 10, 0, 7, 0, 90, 1, 5, 1, 0, 0, 3, 2, 0])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/fuzz_store"
    os.makedirs(out, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
