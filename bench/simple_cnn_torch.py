#!/usr/bin/env python3
"""PyTorch peer of bench/simple_cnn_step.cc: the same model, batch, optimizer and
loss, timed the same way. Run with Debian's python3-torch, e.g.
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \
      bench/simple_cnn_torch.py --threads 2 --batch 64 --steps 30 --warmup 5 [--bf16]
"""
import argparse, json, resource, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class SimpleCNN(nn.Module):  # the seed's model.py
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(128 * 4 * 4, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, num_classes)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = self.pool(F.relu(self.conv3(x)))
        x = x.reshape(-1, 128 * 4 * 4)  # a copy when x is channels last
        x = self.dropout(F.relu(self.fc1(x)))
        x = self.dropout(F.relu(self.fc2(x)))
        return self.fc3(x)


class Block(nn.Module):  # the seed's ResNetBlock
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SimpleResNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        stages, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            stages.append(nn.Sequential(Block(cin, cout, stride), Block(cout, cout, 1)))
            cin = cout
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        h = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--model", default="simple_cnn")
    p.add_argument("--bf16", action="store_true", help="autocast to bfloat16 (PyTorch's fastest CPU mode)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the GPU peer of simple_cnn_step --device cuda)")
    p.add_argument("--mode", default="train", choices=["train", "infer"])
    p.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    p.add_argument("--channels-last", action="store_true", help="model and input in torch.channels_last")
    a = p.parse_args()
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = (SimpleCNN() if a.model == "simple_cnn" else SimpleResNet()).to(a.device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, 32, 32).to(a.device)
    if a.channels_last:
        net = net.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (a.batch,)).to(a.device)
    dev_type = "cuda" if a.device.startswith("cuda") else "cpu"

    def step():  # .item() waits for the device, as the qianka program's
        if a.mode == "infer":
            with torch.no_grad(), torch.autocast(dev_type, dtype=torch.bfloat16, enabled=a.bf16):
                return net(x).sum().item()
        opt.zero_grad()
        with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=a.bf16):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    if a.mode == "infer":
        net.eval()

    for _ in range(a.warmup):
        step()
    t = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    s = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    peak = torch.cuda.max_memory_allocated() / 1048576.0 if dev_type == "cuda" else 0.0
    print(json.dumps({"impl": ("pytorch-bf16" if a.bf16 else "pytorch") + ("" if dev_type == "cpu" else "-" + a.device)
                      + ("-cl" if a.channels_last else ""),
                      "model": a.model, "mode": a.mode, "threads": a.threads, "peak_tensor_mb": round(peak, 1),
                      "batch": a.batch, "images_per_s": round(a.steps * a.batch / s, 1),
                      "ms_per_step": round(1e3 * s / a.steps, 2), "peak_rss_mb": round(rss, 1),
                      "loss": round(loss, 4), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
