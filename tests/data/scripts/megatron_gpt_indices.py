#!/usr/bin/env python3
"""Megatron-Core's GPTDataset index construction, transcribed to plain numpy.

The functions below follow megatron/core/datasets/gpt_dataset.py
(_get_num_epochs, separate_final_epoch, _build_document_index,
_build_shuffle_index, _query_document_sample_shuffle_indices),
blended_megatron_dataset_builder.py (_parse_and_normalize_split,
_get_split_indices) and helpers.cpp (build_sample_idx), using numpy's own
RandomState, so the test checks qianka's C++ port (and its bit-exact
RandomState) against the real numpy generator.

  /usr/bin/python3 megatron_gpt_indices.py PREFIX SEQ_LEN NUM_SAMPLES SEED SPLIT SPLIT_NAME
prints JSON with document_index, sample_index, shuffle_index and samples.
"""
import json
import math
import re
import sys

import numpy

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from read_indexed_dataset import read  # noqa: E402


def parse_split(split):
    s = list(map(float, re.findall(r"[.0-9]+", split)))
    s = s + [0.0 for _ in range(3 - len(s))]
    return [x / sum(s) for x in s]


def split_indices(split, n):
    idx = [0]
    for pct in split:
        idx.append(idx[-1] + int(round(pct * float(n))))
    idx[1:] = [x - (idx[-1] - n) for x in idx[1:]]
    return idx


def build_document_index(documents, num_epochs, rs, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        d = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        d[:] = documents
        d = d.reshape(-1).astype(numpy.int32)
        rs.shuffle(d)
        return d
    first = build_document_index(documents, num_epochs - 1, rs, False)
    last = build_document_index(documents, 1, rs, False)
    return numpy.concatenate((first, last))


def build_shuffle_index(num_samples, total_size, rs):
    dtype_ = numpy.uint32 if total_size < numpy.iinfo(numpy.uint32).max - 1 else numpy.int64
    first = numpy.arange(0, num_samples, 1, dtype=dtype_)
    rs.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(num_samples, total_size, 1, dtype=dtype_)
    rs.shuffle(last)
    return numpy.concatenate((first, last))


def build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch, drop_last, extra):
    if drop_last:
        num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    else:
        num_samples = math.ceil((num_epochs * tokens_per_epoch - extra) / seq_length)
    out = [[0, 0]]
    di, offset = 0, 0
    while len(out) <= num_samples:
        remaining = seq_length + extra
        while remaining != 0:
            doc_len = sizes[doc_idx[di]] - offset
            remaining -= doc_len
            if remaining <= 0:
                offset += remaining + doc_len - extra
                remaining = 0
            else:
                if di == len(doc_idx) - 1:
                    offset = sizes[doc_idx[di]] - extra
                    break
                di += 1
                offset = 0
        out.append([di, offset])
    return numpy.array(out, dtype=numpy.int64)


def main():
    prefix, seq_length, num_samples, seed, split, split_name = sys.argv[1:7]
    seq_length, num_samples, seed = int(seq_length), int(num_samples), int(seed)
    ds = read(prefix)
    sizes = numpy.array(ds["sequence_lengths"], dtype=numpy.int32)
    which = {"train": 0, "valid": 1, "test": 2}[split_name]
    b = split_indices(parse_split(split), len(sizes))
    indices = numpy.arange(b[which], b[which + 1], 1, dtype=numpy.int32)
    extra = 1
    tokens_per_epoch = int(numpy.sum(sizes[indices]))
    num_epochs, t = 1, tokens_per_epoch
    while t < num_samples * seq_length + extra:
        num_epochs += 1
        t += tokens_per_epoch
    separate = False
    if num_epochs > 1:
        sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // seq_length
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - extra) // seq_length
        separate = from_final < int(0.80 * per_epoch)
    rs = numpy.random.RandomState(seed)
    doc_idx = build_document_index(indices, num_epochs, rs, separate)
    sample_idx = build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch, True, extra)
    n = sample_idx.shape[0] - 1
    shuffle = build_shuffle_index(sans_final if separate else n, n, rs)
    seqs = ds["sequences"]
    samples = []
    for i in range(n):
        j = shuffle[i]
        (b0, o0), (b1, o1) = sample_idx[j], sample_idx[j + 1]
        if b0 == b1:
            s = seqs[doc_idx[b0]][o0:o1 + extra]
        else:
            s = []
            for k in range(b0, b1 + 1):
                seq = seqs[doc_idx[k]]
                off = 0 if k > b0 else o0
                s += seq[off:] if k < b1 else seq[off:o1 + extra]
        samples.append([int(x) for x in s])
    json.dump({"num_epochs": num_epochs, "document_index": doc_idx.tolist(),
               "sample_index": sample_idx.tolist(), "shuffle_index": [int(x) for x in shuffle],
               "samples": samples}, sys.stdout)


if __name__ == "__main__":
    main()
