#!/usr/bin/env python3
# PyTorch peer of bench/cuda_attention.cc: scaled_dot_product_attention,
# causal, bf16, on the GPU, forward and forward+backward at the same shapes;
# one JSON line per shape. Run by scripts/device-check.sh in the same run.
import torch, torch.nn.functional as F, json
torch.manual_seed(0)
for (B, H, T, D) in [(4, 8, 1024, 64), (16, 12, 1024, 64), (16, 8, 1024, 64), (4, 16, 4096, 128)]:
    q, k, v = (torch.randn(B, H, T, D, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    go = torch.randn(B, H, T, D, device='cuda', dtype=torch.bfloat16)
    def fb():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True); o.backward(go)
    def f():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    res = {}
    for name, fn in (('fwd', f), ('fwd_bwd', fb)):
        for _ in range(3): fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(20): fn()
        e.record(); e.synchronize(); ms = s.elapsed_time(e) / 20
        flops = 4 * B * H * T * T * D / 2 * (1 if name == 'fwd' else 3.5)  # causal halves; bwd ~2.5x fwd
        res[name] = dict(ms=round(ms, 3), tflops=round(flops / ms / 1e9, 1))
    print(json.dumps(dict(B=B, H=H, T=T, D=D, **res)))
