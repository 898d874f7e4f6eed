#!/usr/bin/env python3
"""Soak test: a 2-rank job under `qk run --max-restarts` while ranks are
SIGKILLed, SIGTERMed and SIGSTOPped (then SIGCONTed) at random times.

At the end it checks what a long run must keep:
  * the job finishes (exit 0) and its final model and optimizer state equal an
    uninterrupted run's of the same steps, bit for bit;
  * every checkpoint the job left verifies (`qk checkpoint verify`, run each
    minute while it trains: the driver keeps the newest 3 of qk pretrain-gpt's);
  * the metrics hold every iteration (GPT) / epoch (CIFAR-10) once, in order;
and reports each fault, the time from it to the next training step, and the
goodput (the uninterrupted run's wall time / the soaked run's).

    bench/soak.py --workload gpt --minutes 60 --qk build/release/src/cli/qk --out /tmp/soak_gpt
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

STEP_GPT = re.compile(r"iteration\s+(\d+)/\s*(\d+) \| consumed samples")
STEP_CIFAR = re.compile(r"\[rank0\]: Epoch\s+(\d+)/(\d+)")
# CIFAR-10 logs epochs, not steps: its recovery ends where the restarted job resumes.
RESUMED_CIFAR = re.compile(r"resumed from|--resume auto: no checkpoint")
RESTART = "restarting all workers"


def gpt_args(ckpt, iters, save_interval):
    return ["pretrain-gpt", "--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8",
            "--seq-length", "128", "--max-position-embeddings", "128", "--position-embedding-type", "rope",
            "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4095", "--micro-batch-size", "4",
            "--global-batch-size", "16", "--lr", "3e-4", "--lr-decay-style", "constant", "--train-iters",
            str(iters), "--log-interval", "1", "--eval-interval", str(10 ** 9), "--attention-dropout", "0.1",
            "--hidden-dropout", "0.1", "--save", ckpt, "--load", ckpt, "--save-interval", str(save_interval)]


def cifar_args(out, data, epochs, every):
    return ["train", "cifar10", "--data-dir", data, "--synth-train", "20000", "--synth-test", "500",
            "--global-batch-size", "64", "--epochs", str(epochs), "--num-workers", "1", "--out", out,
            "--resume", "auto", "--checkpoint-every", str(every), "--keep-checkpoints", "3"]


class Job:
    """One `qk run` job; its lines are timestamped as they arrive."""

    def __init__(self, argv, log_path, env):
        self.lines = []  # (time, line)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     bufsize=1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))
            self.log.write(line)
        self.log.flush()

    def wait(self):
        code = self.proc.wait()
        self.reader.join()
        self.log.close()
        return code


def worker_pid(agent_pid, rank):
    """The pid of the agent's worker with RANK == rank (None while restarting)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != agent_pid:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if f"RANK={rank}".encode() in env:
                return int(name)
        except (OSError, IndexError, ValueError):
            continue
    return None


def inject_faults(job, minutes, mean_gap, rng, events):
    end = time.monotonic() + minutes * 60
    while time.monotonic() < end and job.proc.poll() is None:
        time.sleep(max(5.0, rng.expovariate(1.0 / mean_gap)))
        if time.monotonic() >= end or job.proc.poll() is not None:
            break
        rank = rng.randrange(2)
        pid = worker_pid(job.proc.pid, rank)
        if pid is None:
            continue  # between attempts
        kind = rng.choices(["SIGKILL", "SIGTERM", "SIGSTOP"], weights=[45, 35, 20])[0]
        t = time.monotonic()
        try:
            if kind == "SIGSTOP":
                pause = rng.uniform(1, 8)
                os.kill(pid, signal.SIGSTOP)
                time.sleep(pause)
                os.kill(pid, signal.SIGCONT)
                events.append({"t": t, "kind": f"SIGSTOP {pause:.1f} s", "rank": rank, "resume_t": time.monotonic()})
            else:
                os.kill(pid, getattr(signal, kind))
                events.append({"t": t, "kind": kind, "rank": rank})
        except ProcessLookupError:
            continue


def watch_checkpoints(job, qk, folder, keep, problems, pattern):
    """Each minute: verify every checkpoint; keep the newest `keep` (if >0)."""
    while job.proc.poll() is None:
        for _ in range(60):
            if job.proc.poll() is not None:
                return
            time.sleep(1)
        if not os.path.isdir(folder):
            continue
        v = subprocess.run([qk, "checkpoint", "verify", folder], capture_output=True, text=True)
        problems.extend(l for l in v.stdout.splitlines() if "CORRUPT" in l)
        if keep:
            names = sorted(n for n in os.listdir(folder) if re.fullmatch(pattern, n))
            for n in names[:-keep]:
                shutil.rmtree(os.path.join(folder, n), ignore_errors=True)


def recovery_times(job, events, step_re, stops_too):
    """Seconds from each fault to the next training step of the new attempt
    (CIFAR-10: to the resumed line; a pause there has no step to wait for)."""
    steps = [t for t, l in job.lines if step_re.search(l)]
    restarts = [t for t, l in job.lines if RESTART in l]
    for e in events:
        if e["kind"].startswith("SIGSTOP"):
            if not stops_too:
                continue
            after = [t for t in steps if t > e["resume_t"]]
            e["recovery_s"] = after[0] - e["t"] if after else None
            continue
        rs = [t for t in restarts if t >= e["t"]]
        after = [t for t in steps if rs and t > rs[0]]
        e["recovery_s"] = after[0] - e["t"] if after else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=["gpt", "cifar"], required=True)
    p.add_argument("--minutes", type=float, default=60, help="how long faults are injected")
    p.add_argument("--mean-gap", type=float, default=60, help="mean seconds between faults (exponential)")
    p.add_argument("--qk", default="build/release/src/cli/qk")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    qk = os.path.abspath(a.qk)
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    env = dict(os.environ, QK_NUM_THREADS="1")
    rng = random.Random(a.seed)
    run = [qk, "run", "--nproc-per-node", "2", "--grace", "2"]

    # Size the run from a calibration: about `minutes` of uninterrupted steps.
    if a.workload == "gpt":
        cal = os.path.join(a.out, "calibrate")
        t0 = time.monotonic()
        c = subprocess.run(run + ["--"] + [qk] + gpt_args(cal, 40, 10 ** 9), capture_output=True, text=True, env=env)
        if c.returncode:
            sys.exit("calibration failed:\n" + c.stdout[-3000:] + c.stderr[-3000:])
        # The steps' own times (the wall would count start-up as training).
        times = [float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", c.stdout)][10:]
        per_step = sum(times) / len(times) / 1000 if times else (time.monotonic() - t0) / 40
        iters = max(100, int(a.minutes * 60 / per_step))
        interval = max(20, iters // 60)
        make = lambda d: gpt_args(d, iters, interval)
        step_re, unit = STEP_GPT, iters
    else:
        data = os.path.join(a.out, "data")
        cal = os.path.join(a.out, "calibrate")
        t0 = time.monotonic()
        c = subprocess.run(run + ["--", qk] + cifar_args(cal, data, 1, 0), capture_output=True, text=True, env=env)
        if c.returncode:
            sys.exit("calibration failed:\n" + c.stdout[-3000:] + c.stderr[-3000:])
        m = re.search(r"Epoch 1/1 .* time ([0-9.]+)(ms|s) ", c.stdout)
        per_epoch = (float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)) if m else time.monotonic() - t0
        epochs = max(2, int(a.minutes * 60 / per_epoch))
        make = lambda d: cifar_args(d, data, epochs, 100)
        step_re, unit = STEP_CIFAR, epochs
    shutil.rmtree(cal, ignore_errors=True)

    soak_dir, ref_dir = os.path.join(a.out, "soak"), os.path.join(a.out, "reference")
    events, problems = [], []
    t0 = time.monotonic()
    job = Job(run + ["--max-restarts", "100000", "--", qk] + make(soak_dir), os.path.join(a.out, "soak.log"), env)
    ckpt_folder = soak_dir if a.workload == "gpt" else os.path.join(soak_dir, "checkpoints")
    pattern = r"iter_\d{10}" if a.workload == "gpt" else r"step-\d+"
    threading.Thread(target=watch_checkpoints, daemon=True,
                     args=(job, qk, ckpt_folder, 3 if a.workload == "gpt" else 0, problems, pattern)).start()
    inject_faults(job, a.minutes, a.mean_gap, rng, events)
    code = job.wait()
    soak_wall = time.monotonic() - t0
    v = subprocess.run([qk, "checkpoint", "verify", ckpt_folder], capture_output=True, text=True)
    problems.extend(l for l in v.stdout.splitlines() if "CORRUPT" in l)
    if a.workload == "gpt":
        recovery_times(job, events, STEP_GPT, True)
    else:
        recovery_times(job, events, RESUMED_CIFAR, False)

    t0 = time.monotonic()
    ref = Job(run + ["--"] + [qk] + make(ref_dir), os.path.join(a.out, "reference.log"), env)
    ref_code = ref.wait()
    ref_wall = time.monotonic() - t0

    # Bit-identical end state.
    if a.workload == "gpt":
        last = f"iter_{unit:010d}"
        files = [f"{last}/model.safetensors", f"{last}/optim.safetensors"]
    else:
        files = ["checkpoints/latest.safetensors"]
    identical = all(os.path.exists(os.path.join(soak_dir, f)) and
                    open(os.path.join(soak_dir, f), "rb").read() == open(os.path.join(ref_dir, f), "rb").read()
                    for f in files)

    # Every iteration / epoch logged, in order, none missing.
    seen = {}
    for _, l in job.lines:
        m = step_re.search(l)
        if m:
            seen[int(m.group(1))] = seen.get(int(m.group(1)), 0) + 1
    missing = [i for i in range(1, unit + 1) if i not in seen]
    redone = sum(n - 1 for n in seen.values())
    if a.workload == "gpt":
        recs = {}
        with open(os.path.join(soak_dir, "metrics.jsonl")) as f:
            for line in f:
                j = json.loads(line)
                if j.get("kind") == "train":
                    recs[j["iteration"]] = j
        bad_samples = [i for i, j in recs.items() if j["consumed_samples"] != i * 16]
        missing += [i for i in range(1, unit + 1) if i not in recs and i not in missing]
    else:
        bad_samples = []

    rec = [e["recovery_s"] for e in events if e.get("recovery_s") is not None and not e["kind"].startswith("SIGSTOP")]
    report = [f"# soak: {a.workload}, faults for up to {a.minutes:g} min (mean gap {a.mean_gap:g} s, seed {a.seed})", "",
              f"- job exit code {code}; {len(events)} faults; {unit} {'iterations' if a.workload == 'gpt' else 'epochs'}",
              f"- final state equals the uninterrupted run's bit for bit: {'yes' if identical else 'NO'}",
              f"- corrupt checkpoints seen: {len(problems)}" + ("" if not problems else ": " + "; ".join(problems[:5])),
              f"- {'iterations' if a.workload == 'gpt' else 'epochs'} missing from the log/metrics: {len(missing)}"
              f"; consumed-samples mismatches: {len(bad_samples)}; redone after restarts: {redone}",
              f"- wall: soaked {soak_wall:.0f} s, uninterrupted {ref_wall:.0f} s (exit {ref_code}): goodput "
              f"{ref_wall / soak_wall:.3f}",
              f"- fault to {'next training step' if a.workload == 'gpt' else 'resumed job'} (kills): median {sorted(rec)[len(rec) // 2]:.1f} s, max {max(rec):.1f} s"
              if rec else "- no kill recovered (none injected?)", "",
              f"| t (s) | fault | rank | to {'next step' if a.workload == 'gpt' else 'resumed'} (s) |", "| --- | --- | --- | --- |"]
    for e in events:
        r = e.get("recovery_s")
        report.append(f"| {e['t'] - events[0]['t']:.0f} | {e['kind']} | {e['rank']} | "
                      f"{'-' if r is None else f'{r:.1f}'} |")
    text = "\n".join(report) + "\n"
    open(os.path.join(a.out, "report.md"), "w").write(text)
    print(text)
    ok = code == 0 and ref_code == 0 and identical and not problems and not missing and not bad_samples
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
