"""safetensors_writer.py - the safetensors layout, written here so the
benchmarks need no package beyond torch: an 8-byte little-endian header
length, a JSON header (name -> dtype, shape, [begin, end) in the data;
__metadata__ of strings first), space-padded to a multiple of 8 so the data
is aligned, then each tensor's bytes back to back, in the header's order."""
import json
import struct

import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8"}


def raw_bytes(t):
    """A tensor's bytes as torch stores them (little-endian on x86); bf16,
    which numpy lacks, through its int16 view."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save(tensors, path, metadata):
    """Writes tensors (name -> tensor, in that order) to path, then reads it
    back and checks every entry and its bytes."""
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        b = raw_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    check(tensors, path)


def check(tensors, path):
    """Reads the file back: every tensor's entry and bytes as written."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    assert (8 + n) % 8 == 0 and header.keys() - {"__metadata__"} == tensors.keys(), path
    for name, t in tensors.items():
        begin, end = header[name]["data_offsets"]
        assert header[name]["shape"] == list(t.shape), name
        assert data[begin:end] == raw_bytes(t), name
