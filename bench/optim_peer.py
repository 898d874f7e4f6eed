#!/usr/bin/python3
"""The peer of bench/optim_bench.cc: torch.optim steps on the same sizes.

  /usr/bin/python3 bench/optim_peer.py [threads]

Prints ms per step for SGD-momentum and AdamW (foreach and single-tensor)
over one 10M-element parameter and over SimpleCNN's parameter list.
"""
import sys
import time

import torch

SIMPLE_CNN = [(32, 3, 3, 3), (32,), (64, 32, 3, 3), (64,), (512, 4096), (512,), (10, 512), (10,)]


def params(shapes):
    g = torch.Generator().manual_seed(1)
    ps = []
    for s in shapes:
        p = torch.randn(*s, generator=g).requires_grad_()
        p.grad = torch.randn(*s, generator=g)
        ps.append(p)
    return ps


def time_step(make, shapes, reps=20):
    ps = params(shapes)
    opt = make(ps)
    opt.step()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            opt.step()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e3


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads()
    torch.set_num_threads(threads)
    print(f"torch {torch.__version__}, {threads} threads")
    for label, shapes in (("10M", [(10_000_000,)]), ("SimpleCNN", SIMPLE_CNN)):
        for foreach in (False, True):
            sgd = time_step(lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, foreach=foreach), shapes)
            adamw = time_step(lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=foreach), shapes)
            print(f"{label:10s} foreach={foreach!s:5s}  SGD-momentum {sgd:8.3f} ms   AdamW {adamw:8.3f} ms")


if __name__ == "__main__":
    main()
