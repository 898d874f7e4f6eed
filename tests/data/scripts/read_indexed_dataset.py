#!/usr/bin/env python3
"""Independent reader for Megatron-Core indexed datasets (PREFIX.idx / PREFIX.bin).

Written from the published format description only (no qianka or Megatron code):
  .idx: b"MMIDIDX\\x00\\x00", <Q version (1), <B dtype code, <Q sequence count S,
        <Q document-index count D, then int32 lengths[S], int64 pointers[S],
        int64 document indices[D]; all little-endian, packed.
  .bin: tokens of every sequence back to back in the dtype.
Prints JSON: dtype, lengths, pointers, document indices and every sequence's tokens.

  /usr/bin/python3 read_indexed_dataset.py out_text_document > dump.json
"""
import json
import struct
import sys

import numpy as np

DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
          6: np.float64, 7: np.float32, 8: np.uint16}


def read(prefix):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    if idx[:9] != b"MMIDIDX\x00\x00":
        raise SystemExit(f"{prefix}.idx: bad magic")
    (version,) = struct.unpack_from("<Q", idx, 9)
    (code,) = struct.unpack_from("<B", idx, 17)
    count, doc_count = struct.unpack_from("<QQ", idx, 18)
    if version != 1 or code not in DTYPES:
        raise SystemExit(f"{prefix}.idx: version {version}, dtype code {code}")
    off = 34
    lengths = np.frombuffer(idx, dtype="<i4", count=count, offset=off)
    off += lengths.nbytes
    pointers = np.frombuffer(idx, dtype="<i8", count=count, offset=off)
    off += pointers.nbytes
    docs = np.frombuffer(idx, dtype="<i8", count=doc_count, offset=off)
    off += docs.nbytes
    if off != len(idx):
        raise SystemExit(f"{prefix}.idx: {len(idx)} bytes, header implies {off}")
    dtype = np.dtype(DTYPES[code]).newbyteorder("<")
    data = np.memmap(prefix + ".bin", dtype=np.uint8, mode="r")
    seqs = []
    for ln, ptr in zip(lengths.tolist(), pointers.tolist()):
        seqs.append(np.frombuffer(data, dtype=dtype, count=ln, offset=ptr).tolist())
    return {
        "dtype": np.dtype(DTYPES[code]).name,
        "dtype_code": code,
        "sequence_lengths": lengths.tolist(),
        "sequence_pointers": pointers.tolist(),
        "document_indices": docs.tolist(),
        "sequences": seqs,
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: read_indexed_dataset.py PREFIX")
    json.dump(read(sys.argv[1]), sys.stdout)
