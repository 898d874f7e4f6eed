#!/usr/bin/python3
"""The PyTorch peer of bench/flash_attention_bench.cc: causal attention at the
same shapes, PyTorch 1.13 (Debian's python3-torch has no
scaled_dot_product_attention, which came in 2.0), so the unfused composition
every 1.13 model uses: q k^T * scale, masked_fill, softmax, @ v.

  /usr/bin/python3 bench/flash_attention_peer.py [threads]
  /usr/bin/python3 bench/flash_attention_peer.py --peak-memory T   (one process per T)

Prints wall and process-CPU milliseconds per forward and per forward+backward
(best of 5 rounds), f32 and bf16 (as torch.autocast("cpu", bfloat16) runs it:
bf16 matmuls, f32 softmax), with torch.set_num_threads(threads).
--peak-memory prints the growth of the process's peak RSS over one f32
forward+backward at B=1, H=8, D=64 (torch 1.13 has no CPU allocator statistics).
"""
import resource
import sys
import time

import torch


def attention(q, k, v, hide):
    # q, k, v [B, T, H, D] -> [B, T, H, D], as flash_attention's layout
    scale = q.shape[-1] ** -0.5
    s = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) * scale
    p = torch.softmax(s.masked_fill(hide, float("-inf")), dim=-1)
    return (p @ v.transpose(1, 2)).transpose(1, 2).contiguous()


def best_ms(fn, reps):
    fn()
    best, best_cpu = float("inf"), float("inf")
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
        best_cpu = min(best_cpu, (time.process_time() - c) / reps)
    return best * 1e3, best_cpu * 1e3


def case(B, T, H, D, bf16):
    g = torch.Generator().manual_seed(1)
    q, k, v, dout = (torch.randn(B, T, H, D, generator=g) for _ in range(4))
    if bf16:
        q, k, v, dout = (t.bfloat16() for t in (q, k, v, dout))
    for t in (q, k, v):
        t.requires_grad_()
    hide = torch.ones(T, T, dtype=torch.bool).triu(1)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else torch.autocast("cpu", enabled=False)

    def fwd():
        with ctx:
            return attention(q, k, v, hide)

    def fwd_bwd():
        out = fwd()
        torch.autograd.grad(out, [q, k, v], dout.to(out.dtype))

    return fwd, fwd_bwd


def peak_memory(T):
    q, k, v = (torch.randn(1, T, 8, 64, requires_grad=True) for _ in range(3))
    dout = torch.randn(1, T, 8, 64)
    hide = torch.ones(T, T, dtype=torch.bool).triu(1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = attention(q, k, v, hide)
    torch.autograd.grad(out, [q, k, v], dout)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"BM_PeakMemory/{T} torch peak_MB={(after - before) * 1024 / 1e6:.1f}")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--peak-memory":
        torch.set_num_threads(1)
        peak_memory(int(sys.argv[2]))
        return
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads()
    torch.set_num_threads(threads)
    print(f"torch {torch.__version__}, {threads} thread(s)")
    for bf16 in (False, True):
        for B, T, H, D in ((4, 64, 12, 64), (1, 1024, 8, 64), (2, 1024, 8, 64), (4, 1024, 8, 64)):
            fwd, fwd_bwd = case(B, T, H, D, bf16)
            reps = 20 if T == 64 else 2
            dt = "bf16" if bf16 else "f32"
            for name, fn, mul in (("BM_Forward", fwd, 1.0), ("BM_ForwardBackward", fwd_bwd, 3.5)):
                wall, cpu = best_ms(fn, reps)
                gflops = 2.0 * B * H * T * T * D * mul / (wall * 1e-3) * 1e-9
                print(f"{name}/{B}/{T}/{H}/{D} torch {dt}: {wall:.2f} ms (cpu {cpu:.2f} ms) "
                      f"{gflops:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
