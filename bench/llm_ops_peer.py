#!/usr/bin/python3
"""The PyTorch peer of bench/llm_ops_bench.cc: the same ops at the same sizes.

  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \\
      /usr/bin/python3 bench/llm_ops_peer.py THREADS [--qk-json FILE] [--filter REGEX]

Prints, per benchmark of llm_ops_bench, the wall and CPU-time figures
(GFLOP/s for products, GB/s for the rest) of the fastest call, with
torch.set_num_threads(THREADS). With --qk-json (llm_ops_bench's
--benchmark_format=json output from the same run), prints both side by side
with the ratio qk / torch. bench/llm_ops_compare.sh runs the pair.

The CPU-time figure is the work divided by (process CPU seconds / threads):
on a machine other jobs share, it estimates the rate with the cores to
ourselves, as llm_ops_bench's "cpu" counters do.
"""
import json
import re
import sys
import time

import torch
import torch.nn.functional as F

TOKENS, HIDDEN, FFN, VOCAB, LAYERS = 256, 768, 3072, 50257, 12
LINEARS = [("qkv", HIDDEN, 3 * HIDDEN, LAYERS), ("attn_proj", HIDDEN, HIDDEN, LAYERS),
           ("fc1", HIDDEN, FFN, LAYERS), ("fc2", FFN, HIDDEN, LAYERS),
           ("lm_head", HIDDEN, VOCAB, 1)]
LLAMA_BATCH, LLAMA_SEQ, LLAMA_HEADS, HEAD_DIM = 4, 1024, 8, 64
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def best(fn, threads, reps=None):
    """(wall, CPU/threads) seconds of the fastest call by each clock, over
    5 rounds of reps calls (llm_ops_bench reports its fastest iteration)."""
    fn()
    if reps is None:  # about 0.2 s per round
        t = time.perf_counter()
        fn()
        reps = max(1, int(0.2 / max(time.perf_counter() - t, 1e-6)))
    wall, cpu = float("inf"), float("inf")
    for _ in range(5 * reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - t)
        cpu = min(cpu, (time.process_time() - c) / threads)
    return wall, cpu


def gemm_case(n_in, n_out, product, dt, g):
    x = torch.randn(TOKENS, n_in, generator=g).to(dt)
    w = (torch.randn(n_out, n_in, generator=g) * 0.02).to(dt)
    gy = torch.randn(TOKENS, n_out, generator=g).to(dt)
    if product == "fwd":
        return lambda: F.linear(x, w), 2.0 * TOKENS * n_out * n_in
    if product == "dx":
        return lambda: torch.mm(gy, w), 2.0 * TOKENS * n_in * n_out
    return lambda: torch.mm(gy.t(), x), 2.0 * n_out * n_in * TOKENS


def rows(threads, pattern):
    g = torch.Generator().manual_seed(1)
    out = []  # (name, unit, work per call, wall s, cpu s)

    def add(name, unit, work, fn, reps=None):
        if re.search(pattern, name):
            out.append((name, unit, work, *best(fn, threads, reps)))
    for d, dt in DTYPES.items():
        for name, n_in, n_out, _ in LINEARS:
            for p in ("fwd", "dx", "dw"):
                fn, flops = gemm_case(n_in, n_out, p, dt, g)
                add(f"Gemm/{name}_{p}/{d}", "GFLOPS", flops, fn)
        for lm in (False, True):
            cases = [(*gemm_case(i, o, p, dt, g), c) for name, i, o, c in LINEARS
                     if lm or o != VOCAB for p in ("fwd", "dx", "dw")]
            flops = sum(f * c for _, f, c in cases)

            def step(cases=cases):
                for fn, _, c in cases:
                    for _ in range(c):
                        fn()
            tag = "with_lm_head" if lm else "blocks"
            add(f"GptStepGemms/{tag}/{d}", "GFLOPS", flops, step, 1)
        # The unfused output layer + cross entropy (PyTorch has no fused one);
        # bf16 logits are taken up to f32 for the loss, as Megatron does.
        h = torch.randn(TOKENS, HIDDEN, generator=g).to(dt).requires_grad_()
        w = (torch.randn(VOCAB, HIDDEN, generator=g) * 0.02).to(dt).requires_grad_()
        t = torch.tensor([(i * 7919) % VOCAB for i in range(TOKENS)])
        tw = torch.full((TOKENS,), 1.0 / TOKENS)

        def lce(h=h, w=w, t=t, tw=tw):
            h.grad = w.grad = None
            logits = F.linear(h, w).float()
            (F.cross_entropy(logits, t, reduction="none") * tw).sum().backward()
        add(f"LinearCrossEntropy/unfused/{d}", "GFLOPS", 3 * 2.0 * TOKENS * HIDDEN * VOCAB, lce, 1)
        if out and out[-1][0] == f"LinearCrossEntropy/unfused/{d}":  # qk's fused against it too
            out.append((f"LinearCrossEntropy/fused/{d}",) + out[-1][1:])
        # Rotary: Megatron's _apply_rotary_pos_emb_bshd, unfused, forward + backward.
        x = torch.randn(LLAMA_BATCH, LLAMA_SEQ, LLAMA_HEADS, HEAD_DIM, generator=g).to(dt)
        x.requires_grad_()
        cos = torch.randn(LLAMA_SEQ, 1, HEAD_DIM, generator=g).to(dt)
        sin = torch.randn(LLAMA_SEQ, 1, HEAD_DIM, generator=g).to(dt)
        dy = torch.randn_like(x)

        def rotary(x=x, cos=cos, sin=sin, dy=dy):
            x1, x2 = torch.chunk(x, 2, dim=-1)
            y = x * cos + torch.cat((-x2, x1), dim=-1) * sin
            torch.autograd.grad(y, x, dy)
        add(f"Rotary/{d}", "GB/s", 4.0 * x.numel() * x.element_size(), rotary)
        # SwiGLU (Megatron's bias_swiglu without bias), forward + backward.
        f = 1408
        x = torch.randn(LLAMA_BATCH * LLAMA_SEQ, 2 * f, generator=g).to(dt).requires_grad_()
        dy = torch.randn(LLAMA_BATCH * LLAMA_SEQ, f, generator=g).to(dt)

        def swiglu(x=x, dy=dy):
            a, b = torch.chunk(x, 2, dim=-1)
            torch.autograd.grad(F.silu(a) * b, x, dy)
        add(f"Swiglu/{d}/{f}", "GB/s", 4.0 * x.numel() * x.element_size(), swiglu)
        # Norms over [4096, C], forward + backward w.r.t. x, weight (and bias).
        for rms in (False, True):
            for c in (512, 768):
                x = torch.randn(4096, c, generator=g).to(dt).requires_grad_()
                wt = torch.ones(c, dtype=dt, requires_grad=True)
                b = torch.zeros(c, dtype=dt, requires_grad=True)
                dy = torch.randn(4096, c, generator=g).to(dt)
                if rms:  # Megatron's unfused RMSNorm
                    def norm(x=x, wt=wt, dy=dy):
                        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * wt
                        torch.autograd.grad(y, [x, wt], dy)
                else:
                    def norm(x=x, wt=wt, b=b, dy=dy, c=c):
                        torch.autograd.grad(F.layer_norm(x, (c,), wt, b, 1e-5), [x, wt, b], dy)
                kind = "RmsNorm" if rms else "LayerNorm"
                add(f"{kind}/{d}/4096/{c}", "GB/s", 5.0 * x.numel() * x.element_size(), norm)
    # AdamW over GPT-2 124M's parameters (foreach: PyTorch's fastest CPU path).
    if not re.search(pattern, "AdamW124M/f32"):
        return out
    shapes = [(VOCAB, HIDDEN), (1024, HIDDEN)]
    for _ in range(LAYERS):
        shapes += [(HIDDEN,), (HIDDEN,), (3 * HIDDEN, HIDDEN), (3 * HIDDEN,), (HIDDEN, HIDDEN),
                   (HIDDEN,), (HIDDEN,), (HIDDEN,), (FFN, HIDDEN), (FFN,), (HIDDEN, FFN),
                   (HIDDEN,)]
    shapes += [(HIDDEN,), (HIDDEN,)]
    ps = [torch.nn.Parameter(torch.randn(s, generator=g) * 0.02) for s in shapes]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g) * 1e-3
    opt = torch.optim.AdamW(ps, lr=6e-4, weight_decay=0.1, foreach=True)
    n = sum(p.numel() for p in ps)
    add("AdamW124M/f32", "GB/s", 7 * 4.0 * n, opt.step, 2)
    return out


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else 2
    pattern = sys.argv[sys.argv.index("--filter") + 1] if "--filter" in sys.argv else "."
    torch.set_num_threads(threads)
    qk = {}
    if "--qk-json" in sys.argv:
        with open(sys.argv[sys.argv.index("--qk-json") + 1]) as f:
            for b in json.load(f)["benchmarks"]:
                name = re.sub(r"/(iterations:\d+|real_time)", "", b["name"])
                unit = "GFLOPS" if "GFLOPS" in b else "GB/s"
                peak = f" {b['%peak_cpu']:.0f}% of peak" if "%peak_cpu" in b else ""
                qk[name] = (b.get(unit, 0.0), b.get("cpu" + unit, 0.0), b.get("label", "") + peak)
    print(f"{'benchmark':36} {'unit':6} {'torch':>8} {'qk':>8} {'qk/t':>6}   "
          f"{'torch':>8} {'qk':>8} {'qk/t':>6}   (wall | by CPU time)  {threads} thread(s)")
    for name, unit, work, wall, cpu in rows(threads, pattern):
        tw, tc = work / wall / 1e9, work / cpu / 1e9
        if name in qk:
            qw, qc, label = qk[name]
            print(f"{name:36} {unit:6} {tw:8.1f} {qw:8.1f} {qw / tw:6.2f}   "
                  f"{tc:8.1f} {qc:8.1f} {qc / tc:6.2f}   {label}")
        else:
            print(f"{name:36} {unit:6} {tw:8.1f} {'':>8} {'':>6}   {tc:8.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
