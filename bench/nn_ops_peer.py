#!/usr/bin/python3
"""The PyTorch peer of bench/nn_ops_bench.cc: the same ops at the same sizes.

  /usr/bin/python3 bench/nn_ops_peer.py [threads]

Prints wall and process-CPU microseconds per forward+backward (dropout:
forward only), best of 5 rounds, with torch.set_num_threads(threads).
"""
import sys
import time

import torch
import torch.nn.functional as F


def best_us(fn, reps):
    """(wall, process CPU) microseconds per call, best of 5 rounds each. On
    a shared machine the CPU time is the fairer figure; Google Benchmark's
    CPU column is also process-wide."""
    fn()
    best, best_cpu = float("inf"), float("inf")
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
        best_cpu = min(best_cpu, (time.process_time() - c) / reps)
    return best * 1e6, best_cpu * 1e6


def grad_of(f, x, dy):
    # forward + backward w.r.t. x, like the raw forward/backward pair in the C++ bench
    return lambda: torch.autograd.grad(f(x), x, dy)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    rows = []
    for n, c, h in ((64, 32, 32), (64, 64, 16)):
        x = torch.randn(n, c, h, h, requires_grad=True)
        w, b = torch.ones(c, requires_grad=True), torch.zeros(c, requires_grad=True)
        rm, rv = torch.zeros(c), torch.ones(c)
        dy = torch.randn(n, c, h, h)
        f = lambda: torch.autograd.grad(F.batch_norm(x, rm, rv, w, b, True), [x, w, b], dy)
        rows.append((f"BM_BatchNormTrain/{n}/{c}/{h}", best_us(f, 10)))
    x = torch.randn(2048, 768, requires_grad=True)
    w, b = torch.ones(768, requires_grad=True), torch.zeros(768, requires_grad=True)
    dy = torch.randn(2048, 768)
    f = lambda: torch.autograd.grad(F.layer_norm(x, (768,), w, b), [x, w, b], dy)
    rows.append(("BM_LayerNorm/2048/768", best_us(f, 10)))
    x = torch.randn(12 * 8 * 128, 128, requires_grad=True)
    dy = torch.randn(12 * 8 * 128, 128)
    rows.append(("BM_Softmax/12288/128", best_us(grad_of(lambda t: F.softmax(t, -1), x, dy), 10)))
    for n, c in ((64, 10), (2048, 8192)):
        logits = torch.randn(n, c, requires_grad=True)
        target = torch.randint(0, c, (n,))
        f = lambda: torch.autograd.grad(F.cross_entropy(logits, target), logits)
        rows.append((f"BM_CrossEntropy/{n}/{c}", best_us(f, 50 if n == 64 else 5)))
    for n, c in ((64, 512), (2048, 768)):
        x = torch.randn(n, c)
        rows.append((f"BM_Dropout/{n}/{c}", best_us(lambda: F.dropout(x, 0.5, True), 50)))
    w = torch.randn(8192, 768, requires_grad=True)
    idx = torch.randint(0, 8192, (2048,))
    dy = torch.randn(2048, 768)
    f = lambda: torch.autograd.grad(F.embedding(idx, w), w, dy)
    rows.append(("BM_Embedding/8192/768/2048", best_us(f, 10)))
    print(f"torch {torch.__version__}, {threads} thread(s)")
    for name, (us, cpu) in rows:
        print(f"{name:32s} torch {us:10.1f} us (cpu {cpu:.1f})")


if __name__ == "__main__":
    main()
