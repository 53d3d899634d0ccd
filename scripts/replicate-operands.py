#!/usr/bin/env python3
"""A whole model's operand set from a few synthesized decoder blocks, for timing verify at full size.

    scripts/replicate-operands.py SRC.index.json BLOCKS OUT.index.json [--shard-size BYTES]

`qconform synth --shapes llama3-70b --layers 77` writes 11 of Llama-3-70B's 80 decoder blocks (7 linear
layers each); synthesizing all 560 layers takes minutes on the GPU machine. This writes BLOCKS blocks as a
sharded set (docs/formats.md, "Sharded operand sets") whose block b holds the tensors of source block
b mod (source blocks), renamed `model.layers.<b>.*`: every layer keeps its own name, shape and the bytes
of a real synthesized layer, and verify reads, uploads, hashes and checks every byte of every layer, so
its time is that of the whole model (the values repeat every source-block count of blocks, which no phase
of verify depends on). Tensor bytes are copied in the kernel (`copy_file_range`), shards in parallel; each
shard's SHA-256 goes into the index as `synth` records it.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import struct
import sys

BLOCK = re.compile(r"^model\.layers\.(\d+)\.(.*)$")
WIDTH = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "BF16": 2, "F16": 2, "I16": 2, "U16": 2,
         "I8": 1, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "BOOL": 1}


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header, 8 + n


def write_shard(path, index_name, layers, tensors):
    """layers: names in order; tensors: [(new key, dtype, shape, src path, src offset, length)], written widest
    element first, then by key, as qconform's writer does, so that every tensor stays aligned to its element."""
    header = {"__metadata__": dict(source_meta, index=index_name, layers=",".join(layers))}
    at = 0
    for key, dtype, shape, _, _, length in tensors:
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + length]}
        at += length
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".partial"
    with open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        out.flush()
        base = out.tell()
        written = 0
        for _, _, _, src, offset, length in tensors:
            with open(src, "rb") as f:
                done = 0
                while done < length:
                    try:  # in the kernel; across file systems some kernels refuse it (EXDEV): then through here
                        got = os.copy_file_range(f.fileno(), out.fileno(), length - done, offset + done,
                                                 base + written + done)
                    except OSError:
                        f.seek(offset + done)
                        out.seek(base + written + done)
                        got = out.write(f.read(min(length - done, 64 << 20)))
                    if got <= 0:
                        raise OSError("copying %s stopped at %d of %d bytes" % (src, done, length))
                    done += got
            written += length
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        while chunk := f.read(64 << 20):
            h.update(chunk)
    os.replace(tmp, path)
    return "sha256:" + h.hexdigest()


def main():
    global source_meta
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("blocks", type=int)
    p.add_argument("out")
    p.add_argument("--shard-size", type=int, default=5_000_000_000)
    a = p.parse_args()
    if not a.out.endswith(".index.json") or not a.src.endswith(".json"):
        sys.exit("expected SRC and OUT to be index files (NAME.index.json)")
    src_dir = os.path.dirname(os.path.abspath(a.src))
    index = json.load(open(a.src))
    meta = index["metadata"]
    order = meta["layers"].split(",")
    # Where each tensor's bytes are: (dtype, shape, shard path, absolute offset, length).
    where = {}
    for shard in sorted(set(index["weight_map"].values())):
        path = os.path.join(src_dir, shard)
        header, base = read_header(path)
        for key, t in header.items():
            if key != "__metadata__":
                where[key] = (t["dtype"], t["shape"], path, base + t["data_offsets"][0], t["data_offsets"][1] - t["data_offsets"][0])
    blocks = {}
    for layer in order:
        m = BLOCK.match(layer)
        if not m:
            sys.exit("layer %s is not model.layers.<b>.<name>" % layer)
        blocks.setdefault(int(m.group(1)), []).append(m.group(2))
    src_blocks = sorted(blocks)
    source_meta = {k: v for k, v in meta.items() if k not in ("format", "layers", "total_size", "index")}
    source_meta["source"] = "%s; blocks repeated by scripts/replicate-operands.py (%d source blocks)" % (
        meta.get("source", ""), len(src_blocks))

    # The new layers in order, each with its tensors; packed into shards of at most --shard-size bytes.
    shards, layers, tensors, size = [], [], [], 0
    all_layers = []
    for b in range(a.blocks):
        sb = src_blocks[b % len(src_blocks)]
        for name in blocks[sb]:
            new, old = "model.layers.%d.%s" % (b, name), "model.layers.%d.%s" % (sb, name)
            parts = sorted(k for k in where if k.startswith(old + ".") and "." not in k[len(old) + 1:])
            layer_bytes = sum(where[k][4] for k in parts)
            if layers and size + layer_bytes > a.shard_size:
                shards.append((layers, tensors))
                layers, tensors, size = [], [], 0
            layers.append(new)
            tensors += [(new + k[len(old):],) + where[k] for k in parts]
            size += layer_bytes
            all_layers.append(new)
    shards.append((layers, tensors))
    stem = os.path.basename(a.out)[: -len(".index.json")]
    out_dir = os.path.dirname(os.path.abspath(a.out))
    names = ["%s-%05d.safetensors" % (stem, i + 1) for i in range(len(shards))]
    index_name = os.path.basename(a.out)
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(shards), os.cpu_count() or 1)) as pool:
        digests = list(pool.map(lambda i: write_shard(os.path.join(out_dir, names[i]), index_name, shards[i][0],
                                                      sorted(shards[i][1], key=lambda t: (-WIDTH[t[1]], t[0]))),
                                range(len(shards))))
    weight_map = {}
    total = 0
    for name, (_, ts) in zip(names, shards):
        for t in ts:
            weight_map[t[0]] = name
            total += t[5]
    out_meta = dict(source_meta, format="qconform-operands", layers=",".join(all_layers), total_size=total)
    out_index = {"metadata": out_meta, "weight_map": dict(sorted(weight_map.items())), "shards": dict(zip(names, digests))}
    tmp = a.out + ".partial"
    with open(tmp, "w") as f:
        json.dump(out_index, f, indent=1)
    os.replace(tmp, a.out)
    print("wrote %d layers (%d blocks from %d) in %d shards, %d bytes of tensors, to %s" % (
        len(all_layers), a.blocks, len(src_blocks), len(shards), total, a.out))


if __name__ == "__main__":
    main()
