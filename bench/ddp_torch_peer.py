#!/usr/bin/env python3
"""PyTorch DDP (gloo) peer of `qk run --nproc-per-node N -- qk train cifar10`:
the same model, per-rank batch, optimizer (Adam lr 1e-3) and thread count,
training steps on in-memory random CIFAR-shaped data (no loader: this favours
PyTorch). Prints global images/s over the timed steps. Run with Debian's
python3-torch:
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \
      bench/ddp_torch_peer.py --nproc 2 --threads 1 --model simple_cnn --steps 40
"""
import argparse, os, socket, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from simple_cnn_torch import SimpleCNN, SimpleResNet


def worker(rank, args, port, out):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if args.nproc > 1:
        dist.init_process_group("gloo", rank=rank, world_size=args.nproc)
    torch.manual_seed(42)
    model = SimpleCNN() if args.model == "simple_cnn" else SimpleResNet()
    if args.nproc > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    model.train()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if args.nproc > 1:
                dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    if args.nproc > 1:
        dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        out.put(args.nproc * args.batch * args.steps / dt)
    if args.nproc > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="simple_cnn", choices=["simple_cnn", "simple_resnet"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, port, out)) for r in range(args.nproc)]
    for pr in procs:
        pr.start()
    ips = out.get()
    for pr in procs:
        pr.join()
    print(f"torch ddp gloo nproc {args.nproc} threads {args.threads} model {args.model} "
          f"batch {args.batch}: {ips:.1f} img/s")


if __name__ == "__main__":
    main()
