#!/usr/bin/env python3
"""Edits the header of a safetensors file for a hostile case (the tensor bytes are kept as they are).

  st_edit.py IN OUT [--meta KEY=VALUE ...] [--rename OLD=NEW ...]

--meta sets `__metadata__[KEY]` to the string VALUE (an empty VALUE is kept as ""); --rename renames
a tensor. The header is written back with its 8-byte little-endian length, padded with spaces to
a multiple of 8 as the format recommends.
"""
import json
import struct
import sys


def main():
    args = sys.argv[1:]
    src, dst = args[0], args[1]
    with open(src, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    i = 2
    while i < len(args):
        key, _, value = args[i + 1].partition("=")
        if args[i] == "--meta":
            header.setdefault("__metadata__", {})[key] = value
        elif args[i] == "--rename":
            header[value] = header.pop(key)
        else:
            raise SystemExit(f"st_edit.py: unknown option {args[i]}")
        i += 2
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


if __name__ == "__main__":
    main()
