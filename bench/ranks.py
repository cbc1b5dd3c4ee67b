#!/usr/bin/env python3
"""ranks.py — images/s of `lamina train` on 1 GPU against N GPU ranks (--gpus N, NCCL), at equal global
batches, in one run; and the all-reduce's time per step from a profiled run of the ranks.

    python3 bench/ranks.py build/lamina [--gpus 2] [--epochs 3] [--data .data/fashion-mnist] [--extra=--bucket-mb=25]

The reference CNN on Fashion-MNIST at global batch 512, 4096, 16384 and `air` (bench/nets/air.txt) on a
random 3x32x32 set at 1024 and 4096. Each run trains --epochs epochs; the figure is the median of the
epochs after the first (which captures the graph and warms cuDNN and NCCL up), images/s over the whole
training set. The speed-up is N ranks' images/s over 1 GPU's. Where the machine has fewer GPUs than
--gpus, the ranks share them (LAMINA_SHARE_GPU=1): the run then checks the path, and its speed-up means
nothing (said in the table).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from graph_nets import make_data  # noqa: E402


def gpus_here():
    p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for line in p.stdout.splitlines() if line.startswith("GPU"))


EXTRA = []  # --extra: more options for the ranks' runs (e.g. --bucket-mb=25)


def train(lamina, data, spec, batch, epochs, gpus, extra=()):
    cmd = [lamina, "train", "--data", data, "--model", spec, "--batch", str(batch), "--epochs", str(epochs),
           "--json", "--no-progress"] + (["--gpus", str(gpus)] + EXTRA if gpus > 1 else []) + list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-2000:]}")
    j = json.loads(p.stdout)
    ips = [e["images_per_s"] for e in j["epochs"][1:]] or [j["epochs"][0]["images_per_s"]]
    return statistics.median(ips), j


def allreduce_ms(lamina, data, spec, batch, gpus):
    """The per-op profile's all-reduce row (eager steps, marks between ops) of rank 0."""
    cmd = [lamina, "train", "--data", data, "--model", spec, "--batch", str(batch), "--epochs", "1", "--profile",
           "--no-progress", "--gpus", str(gpus)] + EXTRA
    p = subprocess.run(cmd, capture_output=True, text=True)
    step = reduce = None
    for line in (p.stdout + p.stderr).splitlines():
        w = line.split()
        if line.startswith("profile of") and "ms a step" in line:
            step = float(line.split("(")[1].split()[0])
        if w and w[0] == "allreduce":
            reduce = float(w[3]) / 1e3  # mean us -> ms
    return reduce, step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lamina")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--data", default=".data/fashion-mnist")
    ap.add_argument("--air-images", type=int, default=32768)
    ap.add_argument("--extra", action="append", default=[], help="an option for the ranks' runs, e.g. --extra=--bucket-mb=25")
    a = ap.parse_args()
    EXTRA.extend(a.extra)
    have = gpus_here()
    shared = have < a.gpus
    if shared:
        os.environ["LAMINA_SHARE_GPU"] = "1"
    print(f"# {have} GPU(s) here; {a.gpus} ranks{' sharing them: speed-ups below mean nothing' if shared else ''}")
    with tempfile.TemporaryDirectory() as d:
        make_data(d, (3, 32, 32), 10, False, a.air_images)
        cases = [("cnn", a.data, "cnn", b) for b in (512, 4096, 16384)] + \
                [("air", d, "bench/nets/air.txt", b) for b in (1024, 4096)]
        print(f"{'net':5} {'batch':>6} {'1 GPU img/s':>12} {f'{a.gpus} GPUs img/s':>13} {'speed-up':>9} "
              f"{'allreduce ms':>13} {'step ms':>8} {'acc 1':>7} {f'acc {a.gpus}':>7}")
        for name, data, spec, batch in cases:
            one, j1 = train(a.lamina, data, spec, batch, a.epochs, 1)
            many, jn = train(a.lamina, data, spec, batch, a.epochs, a.gpus)
            red, step = allreduce_ms(a.lamina, data, spec, batch, a.gpus)
            print(f"{name:5} {batch:6d} {one:12.0f} {many:13.0f} {many / one:8.2f}x "
                  f"{(f'{red:.3f}' if red is not None else '-'):>13} {(f'{step:.3f}' if step else '-'):>8} "
                  f"{j1['test_acc'] * 100:6.2f}% {jn['test_acc'] * 100:6.2f}%", flush=True)


if __name__ == "__main__":
    main()
