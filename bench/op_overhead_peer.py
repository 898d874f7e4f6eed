#!/usr/bin/env python3
"""PyTorch's host time per op on the ops of bench/op_overhead_bench.cc (one
element or 8 x 8, so the kernel is nothing): dispatch, allocation, autograd.

    OMP_NUM_THREADS=1 python3 bench/op_overhead_peer.py [SECONDS]

Prints one line per case, microseconds per iteration (best of 5 runs).
"""
import sys
import time

import torch


def timed(fn, seconds):
    for _ in range(1000):
        fn()
    best = float("inf")
    for _ in range(5):
        n, t0 = 0, time.perf_counter()
        while True:
            for _ in range(1000):
                fn()
            n += 1000
            t = time.perf_counter() - t0
            if t >= seconds / 5:
                break
        best = min(best, t / n)
    return best * 1e6


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.5
    torch.set_num_threads(1)
    cases = {}
    with torch.no_grad():
        a, b = torch.ones(1), torch.ones(1)
        cases["BM_AddNoGrad"] = lambda: a + b
        cases["BM_MulScalarNoGrad"] = lambda: a * 2.0
        x8 = torch.randn(8, 8)
        cases["BM_TransposeContiguous"] = lambda: x8.t().contiguous()
        w, bias = torch.randn(8, 8), torch.randn(8)
        cases["BM_LinearNoGrad"] = lambda: torch.nn.functional.linear(x8, w, bias)
    ag = torch.ones(1, requires_grad=True)
    cases["BM_AddRecorded"] = lambda: ag + b
    w1, b1 = torch.randn(8, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    w2, b2 = torch.randn(8, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    F = torch.nn.functional

    def mlp():
        loss = F.linear(F.relu(F.linear(x8, w1, b1)), w2, b2).sum()
        loss.backward()
        for p in (w1, b1, w2, b2):
            p.grad = None

    cases["BM_MlpForwardBackward"] = mlp
    for name, fn in cases.items():
        if name in ("BM_AddNoGrad", "BM_MulScalarNoGrad", "BM_TransposeContiguous", "BM_LinearNoGrad"):
            with torch.no_grad():
                us = timed(fn, seconds)
        else:
            us = timed(fn, seconds)
        print(f"{name:28s} {us:8.2f} us   (torch {torch.__version__})")


if __name__ == "__main__":
    main()
