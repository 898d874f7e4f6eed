#!/usr/bin/env python3
# PyTorch peer for `qk pretrain-gpt --device cuda` (scripts/device-check.sh runs both): a GPT-2 (LayerNorm, GELU, learned
# positions, tied embeddings) or Llama-layout (RMSNorm, SwiGLU, RoPE, untied) decoder,
# bf16 autocast, SDPA flash attention, fused AdamW, eager (or --compile).
# Prints one JSON line: tokens/s (median over timed steps), MFU against --peak, peak memory.
import argparse, json, math, statistics, time
import torch, torch.nn as nn, torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument('--layers', type=int, default=12); ap.add_argument('--d', type=int, default=768)
ap.add_argument('--heads', type=int, default=12); ap.add_argument('--vocab', type=int, default=50257)
ap.add_argument('--seq', type=int, default=1024); ap.add_argument('--batch', type=int, default=16)
ap.add_argument('--ffn', type=int, default=0); ap.add_argument('--llama', action='store_true')
ap.add_argument('--steps', type=int, default=20); ap.add_argument('--warmup', type=int, default=5)
ap.add_argument('--compile', action='store_true'); ap.add_argument('--peak', type=float, default=989e12)
a = ap.parse_args()
dev = 'cuda'; torch.manual_seed(0)
ffn = a.ffn or (int(8 * a.d / 3 / 64 + 0.999) * 64 if a.llama else 4 * a.d)

class RMSNorm(nn.Module):
    def __init__(s, d): super().__init__(); s.w = nn.Parameter(torch.ones(d))
    def forward(s, x): return F.rms_norm(x, (x.shape[-1],), s.w, 1e-5)

def rope(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        Norm = RMSNorm if a.llama else nn.LayerNorm
        s.n1, s.n2 = Norm(a.d), Norm(a.d)
        s.qkv = nn.Linear(a.d, 3 * a.d, bias=not a.llama); s.proj = nn.Linear(a.d, a.d, bias=not a.llama)
        s.fc = nn.Linear(a.d, 2 * ffn if a.llama else ffn, bias=not a.llama)
        s.fc2 = nn.Linear(ffn, a.d, bias=not a.llama)
    def forward(s, x, cos, sin):
        B, T, C = x.shape; h = a.heads
        q, k, v = s.qkv(s.n1(x)).view(B, T, 3, h, C // h).permute(2, 0, 3, 1, 4)
        if a.llama: q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, C))
        u = s.fc(s.n2(x))
        if a.llama: g, u = u.chunk(2, -1); u = F.silu(g) * u
        else: u = F.gelu(u, approximate='tanh')
        return x + s.fc2(u)

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(a.vocab, a.d)
        s.wpe = None if a.llama else nn.Embedding(a.seq, a.d)
        s.blocks = nn.ModuleList([Block() for _ in range(a.layers)])
        s.nf = RMSNorm(a.d) if a.llama else nn.LayerNorm(a.d)
        s.head = nn.Linear(a.d, a.vocab, bias=False)
        if not a.llama: s.head.weight = s.wte.weight
        hd = a.d // a.heads
        f = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(a.seq).float(), f)
        s.register_buffer('cos', ang.cos()[None, None], persistent=False)
        s.register_buffer('sin', ang.sin()[None, None], persistent=False)
    def forward(s, idx, tgt):
        x = s.wte(idx)
        if s.wpe is not None: x = x + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks: x = b(x, s.cos, s.sin)
        logits = s.head(s.nf(x))
        return F.cross_entropy(logits.float().view(-1, a.vocab), tgt.view(-1))

m = GPT().to(dev)
n = sum(p.numel() for p in m.parameters())
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
fwd = torch.compile(m) if a.compile else m
idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast('cuda', dtype=torch.bfloat16):
        loss = fwd(idx, tgt)
    loss.backward(); opt.step()
    return loss
for _ in range(a.warmup): step()
torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
times = []
for _ in range(a.steps):
    t0 = time.perf_counter(); l = step(); l.item(); times.append(time.perf_counter() - t0)
tok = a.batch * a.seq
tps = tok / statistics.median(times)
# Megatron's count: 6N per token for the weights (embedding included as the output layer) + attention 12*L*T*d (causal not halved)
flop_tok = 6 * n + 12 * a.layers * a.seq * a.d
print(json.dumps(dict(peer='pytorch', version=torch.__version__, compile=a.compile, layout='llama' if a.llama else 'gpt2',
                      layers=a.layers, d=a.d, seq=a.seq, batch=a.batch, params=n, tokens_per_s=round(tps),
                      ms_per_step=round(1000 * statistics.median(times), 2), mfu=round(tps * flop_tok / a.peak, 4),
                      peak_mem_gb=round(torch.cuda.max_memory_allocated() / 2**30, 2), loss=float(l))))
