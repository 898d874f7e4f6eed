#!/usr/bin/python3
"""PyTorch's conv2d on SimpleCNN's layers: the peer figure for conv_bench.

    QK_NUM_THREADS=1 build/release/bench/conv_bench    # qianka
    /usr/bin/python3 bench/conv_torch_peer.py 1         # PyTorch, 1 thread

Same shapes (batch 64, k3 p1), same phases: forward, and backward computing
dx, dw and db. Prints the median of 5 runs of 10 iterations, in ms per call
(wall clock) and CPU ms per call.
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.set_num_threads(threads)
torch.manual_seed(3)
print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
      f"mkldnn {torch.backends.mkldnn.is_available()}")

for c, o, hw in [(3, 32, 32), (32, 64, 16), (64, 128, 8)]:
    x = torch.randn(64, c, hw, hw, requires_grad=True)
    w = torch.randn(o, c, 3, 3, requires_grad=True)
    b = torch.randn(o, requires_grad=True)
    dy = torch.randn(64, o, hw, hw)

    def fwd():
        with torch.no_grad():
            F.conv2d(x, w, b, padding=1)

    y = F.conv2d(x, w, b, padding=1)

    def bwd():
        torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)

    for name, fn in (("fwd", fwd), ("bwd", bwd)):
        for _ in range(3):
            fn()
        wall, cpu = [], []
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(10):
                fn()
            wall.append((time.perf_counter() - t0) / 10 * 1e3)
            cpu.append((time.process_time() - c0) / 10 * 1e3)
        print(f"conv {c}->{o} @{hw}x{hw} {name}: {statistics.median(wall):.2f} ms "
              f"(cpu {statistics.median(cpu):.2f} ms)")
