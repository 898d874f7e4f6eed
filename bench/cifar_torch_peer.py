#!/usr/bin/env python3
"""PyTorch peer of bench/simple_cnn_step.cc for the CIFAR-10 comparison
(bench/cifar_vs_torch.sh): the same models (bench/simple_cnn_torch.py, built
exactly as src/models/), batch, optimizer and loss, timed the same way, one
configuration per process so ru_maxrss is that configuration's peak.

  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \
      bench/cifar_torch_peer.py --model simple_cnn --mode train|infer --threads 2 --batch 64 \
      --steps 30 --warmup 5 [--optimizer adam|sgd] [--bf16]

train: zero_grad, forward, cross-entropy, backward, optimizer step, in train
mode (dropout on). infer: eval mode, torch.no_grad(), forward only; --batch 1
is the single-image latency. --bf16 autocasts to bfloat16 (train or infer).
"""
import argparse, json, os, resource, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simple_cnn_torch import SimpleCNN, SimpleResNet  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="simple_cnn", choices=["simple_cnn", "simple_resnet"])
    p.add_argument("--mode", default="train", choices=["train", "infer"])
    p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--bf16", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = SimpleCNN() if a.model == "simple_cnn" else SimpleResNet()
    x = torch.randn(a.batch, 3, 32, 32)
    y = torch.randint(0, 10, (a.batch,))

    if a.mode == "train":
        if a.optimizer == "adam":
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        else:
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        net.train()

        def step():
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss.item()
    else:
        net.eval()

        def step():
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                return net(x).float().sum().item()

    for _ in range(a.warmup):
        step()
    t = time.perf_counter()
    for _ in range(a.steps):
        v = step()
    s = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"impl": "pytorch-bf16" if a.bf16 else "pytorch", "model": a.model, "mode": a.mode,
                      "optimizer": a.optimizer if a.mode == "train" else "none", "threads": a.threads,
                      "batch": a.batch, "images_per_s": round(a.steps * a.batch / s, 1),
                      "ms_per_step": round(1e3 * s / a.steps, 3), "peak_rss_mb": round(rss, 1),
                      "loss": round(v, 4), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
