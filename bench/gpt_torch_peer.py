#!/usr/bin/env python3
"""PyTorch peer for the LLM pre-training benchmarks (bench/gpt_vs_peers.sh):
one training step of a GPT-2 or Llama-layout decoder (the same architecture as
src/transformer: pre-norm, fused QKV, causal attention, GELU or SwiGLU MLP,
tied or untied output layer), AdamW, on random tokens, timed per step; one
configuration per process so ru_maxrss is that configuration's peak.

  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \
      bench/gpt_torch_peer.py --layout gpt2 --layers 12 --hidden 768 --heads 12 \
      --vocab 50257 --seq 64 --batch 4 --threads 2 --steps 6 --warmup 2 [--bf16]

--bf16 runs the forward under torch.autocast(cpu, bfloat16), PyTorch's fastest
CPU training mode (weights and optimizer stay f32). Attention is the explicit
composition (PyTorch 1.13 on the CPU has no fused attention kernel). Prints
one JSON line: median step ms, tokens/s, peak RSS.
"""
import argparse, json, math, resource, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq, dim, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    f = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        c, llama = a.hidden, a.layout == "llama"
        self.h, self.g, self.d = a.heads, a.query_groups or a.heads, c // a.heads
        norm = (lambda: RMSNorm(c, 1e-5)) if llama else (lambda: nn.LayerNorm(c))
        self.ln1, self.ln2 = norm(), norm()
        self.qkv = nn.Linear(c, (self.h + 2 * self.g) * self.d, bias=not llama)
        self.proj = nn.Linear(self.h * self.d, c, bias=not llama)
        ffn = a.ffn or (int((4 * c * 2 / 3) / 64) * 64 if llama else 4 * c)
        self.fc1 = nn.Linear(c, 2 * ffn if llama else ffn, bias=not llama)
        self.fc2 = nn.Linear(ffn, c, bias=not llama)
        self.llama = llama

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split([self.h * self.d, self.g * self.d, self.g * self.d], -1)
        q = q.view(b, t, self.h, self.d).transpose(1, 2)
        k = k.view(b, t, self.g, self.d).transpose(1, 2)
        v = v.view(b, t, self.g, self.d).transpose(1, 2)
        if self.llama:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        if self.g != self.h:
            k = k.repeat_interleave(self.h // self.g, dim=1)
            v = v.repeat_interleave(self.h // self.g, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.d)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        p = torch.softmax(s.masked_fill(mask, float("-inf")).float(), dim=-1).to(v.dtype)
        x = x + self.proj((p @ v).transpose(1, 2).reshape(b, t, self.h * self.d))
        h = self.fc1(self.ln2(x))
        if self.llama:
            g, u = h.chunk(2, dim=-1)
            h = F.silu(g) * u
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.fc2(h)


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.wte = nn.Embedding(a.vocab, a.hidden)
        self.wpe = nn.Embedding(a.seq, a.hidden) if a.layout == "gpt2" else None
        self.blocks = nn.ModuleList([Block(a) for _ in range(a.layers)])
        self.lnf = RMSNorm(a.hidden, 1e-5) if a.layout == "llama" else nn.LayerNorm(a.hidden)
        self.out = None if a.layout == "gpt2" else nn.Linear(a.hidden, a.vocab, bias=False)
        cos, sin = rope_tables(a.seq, a.hidden // a.heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for m in self.modules():  # GPT-2's init (losses start near ln(vocab))
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        x = self.lnf(x)
        logits = x @ self.wte.weight.t() if self.out is None else self.out(x)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layout", default="gpt2", choices=["gpt2", "llama"])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--query-groups", type=int, default=0)
    p.add_argument("--ffn", type=int, default=0)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--bf16", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = GPT(a)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95))
    idx = torch.randint(0, a.vocab, (a.batch, a.seq))
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq))
    times, losses = [], []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = net(idx, tgt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1000 * statistics.median(times)
    print(json.dumps({
        "impl": "pytorch " + torch.__version__ + (" bf16 autocast" if a.bf16 else " f32"),
        "layout": a.layout, "threads": a.threads, "params": sum(q.numel() for q in net.parameters()),
        "median_step_ms": round(ms, 1), "tokens_per_s": round(a.batch * a.seq * 1000 / ms, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4)}))


if __name__ == "__main__":
    main()
