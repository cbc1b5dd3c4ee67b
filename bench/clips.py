#!/usr/bin/env python3
"""Clips: a per-frame CNN with a pool over time (bench/nets/clip.txt; --net early: the frames as channels,
bench/nets/clip_early.txt) trained on `lamina data clips` (Moving-MNIST
style: T frames of 64x64, two items of different classes, one still, one moving; the label is the moving one's
class) by lamina and by PyTorch (the same net written out below), same optimizer, hyper-parameters, normalization
and epochs; epoch time (median of epochs 2..E) and test accuracy after the last epoch. Also lamina's best
single-frame figure: the same per-frame layers on clips of one frame (`--frames 1`), which cannot tell the
moving item from the still one.

Data:    lamina data clips --out DIR --n N --test M --frames T --seed 1 (from Fashion-MNIST: LAMINA_DATA_DIR or
         Debian's); both sides read DIR's IDX files; PyTorch holds them resident on the GPU as uint8, each batch
         gathered there and normalized as (x/255 - 0.5)/0.5, as lamina does.
lamina:  lamina train --data DIR --model bench/nets/clip.txt --epochs E --batch B --opt adam --lr LR --seed 1
         --precision P --no-progress --json (its step is one CUDA graph).
PyTorch: (B, T, 1, H, W) -> (B*T, 1, H, W) -> per-frame layers -> (B, T, C, h, w).mean(1) -> per-clip layers
         (--net early: (B, T, 1, H, W) -> (B, T, H, W), the frames as channels, -> the layers of clip_early.txt);
         Conv2d(bias=False), BatchNorm2d, ReLU, MaxPool2d(2), AdaptiveAvgPool2d(1), Linear; Adam(lr); the order
         torch.randperm each epoch. 'eager' (channels_last; bf16: autocast) and 'compile'
         (torch.compile(mode="max-autotune-no-cudagraphs") of the loss step, its forward, backward and Adam in one
         CUDA graph captured by hand after warm-up, the batch gathered into static buffers) — its fastest way.
         N is a multiple of B so every step is a full batch (the graph has one shape). --augment crop:P,flip: lamina
         train --augment, and on PyTorch's side the same crop and flip of each uint8 batch on the GPU before it is
         normalized (bench/trainbench.py crop_flip), outside its captured step.
  /usr/bin/python3 bench/clips.py --lamina build/lamina [--net late|early] [--augment crop:P,flip] [--n 20000] [--test 2000] [--frames 16] [--epochs 10]
      [--batch 100] [--lr 2e-3] [--precision bf16|fp16|tf32] [--torch-precision P] [--ways eager,compile] [--json FILE]"""
import argparse, json, os, subprocess, sys, tempfile, time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainbench import (crop_flip, idx, lamina_train as lamina_train_, parse_augment, say, torch_train,  # noqa: E402
                        torch_ways)

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--lamina", default=os.path.join(HERE, "..", "build", "lamina"))
ap.add_argument("--net", default="late", choices=["late", "early", "max"],
                help="late: per-frame layers, tpool mean, per-clip layers; early: tcat (the frames as channels); max: "
                     "every block per frame, tpool max after the last (bench/nets/clip_max.txt)")
ap.add_argument("--spec", help="lamina's model (default bench/nets/clip.txt, or clip_early.txt for --net early)")
ap.add_argument("--data", help="a clips folder made already (else made under a temporary folder)")
ap.add_argument("--n", type=int, default=20000)
ap.add_argument("--test", type=int, default=2000)
ap.add_argument("--frames", type=int, default=16)
ap.add_argument("--epochs", type=int, default=10)
ap.add_argument("--batch", type=int, default=100)
ap.add_argument("--lr", type=float, default=2e-3)
ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "tf32"], help="lamina's (fp16: its loss "
                "scaling on the device)")
ap.add_argument("--torch-precision", choices=["bf16", "fp16", "tf32"], help="PyTorch's (default: --precision; "
                "fp16: autocast float16 and GradScaler); #34 compares lamina fp16 with PyTorch bf16")
ap.add_argument("--ways", default="eager,compile", help="PyTorch's ways (eager, compile)")
ap.add_argument("--augment", default="none", help="both sides: crop:P,flip as lamina train --augment (default none)")
ap.add_argument("--cosine", type=float, metavar="W", help="both sides: the rate on lamina's --lr-schedule cosine "
                "--warmup W (a warm-up of W epochs, then a cosine to 0, stepped every batch)")
ap.add_argument("--single", type=int, default=1, help="also lamina on one-frame clips (default 1)")
ap.add_argument("--json")
a = ap.parse_args()
a.torch_precision = a.torch_precision or a.precision
a.spec = a.spec or os.path.join(HERE, "nets", {"late": "clip.txt", "early": "clip_early.txt", "max": "clip_max.txt"}[a.net])
a.single = a.single and a.net == "late"  # the one-frame figure is the per-frame net's
assert a.n % a.batch == 0 and a.test % a.batch == 0, "--n and --test must be multiples of --batch"


out = dict(meta=dict(args=vars(a), date=time.strftime("%Y-%m-%d %H:%M:%S")), lamina={}, torch={})
tmp = tempfile.mkdtemp(prefix="lamina-clips-")


def make(frames, where):
    cmd = [a.lamina, "data", "clips", "--out", where, "--n", str(a.n), "--test", str(a.test), "--frames", str(frames),
           "--seed", "1"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    say(f"  $ {' '.join(cmd)}  ({time.perf_counter() - t0:.1f} s)")
    return where


def lamina_train(data, spec):
    extra = ["--augment", a.augment] if a.augment != "none" else []
    if a.cosine is not None:
        extra += ["--lr-schedule", "cosine", "--warmup", repr(a.cosine)]
    return lamina_train_(a.lamina, data, spec, a.epochs, a.batch, a.lr, a.precision, extra)


data = a.data or make(a.frames, os.path.join(tmp, "clips"))
say("== lamina")
out["lamina"]["clips"] = L = lamina_train(data, a.spec)
if L["status"] == "ok":
    say(f"  lamina: test acc {100 * L['acc']:.2f}%, median epoch {L['epoch_s']:.3f} s, peak {L['peak_bytes'] / 1e6:.0f} MB")

import torch, torch.nn as nn

out["meta"].update(torch=torch.__version__, gpu=torch.cuda.get_device_name(0))
say(f"PyTorch {torch.__version__}, {out['meta']['gpu']}")
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.torch_precision == "tf32"
dev = "cuda"
X = torch.from_numpy(idx(os.path.join(data, "train-images-idx5-ubyte")).copy()).to(dev)  # (N, T, H, W, 1)
Y = torch.from_numpy(idx(os.path.join(data, "train-labels-idx1-ubyte")).astype(np.int64)).to(dev)
XT = torch.from_numpy(idx(os.path.join(data, "t10k-images-idx5-ubyte")).copy()).to(dev)
YT = torch.from_numpy(idx(os.path.join(data, "t10k-labels-idx1-ubyte")).astype(np.int64)).to(dev)
N, T, H, W, _ = X.shape


def block(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


class Early(nn.Module):  # bench/nets/clip_early.txt: the frames as channels
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(*block(T, 32), nn.MaxPool2d(2), *block(32, 64), nn.MaxPool2d(2), *block(64, 128),
                                 nn.MaxPool2d(2), *block(128, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(128, 10))

    def forward(self, x):  # x (B, T, 1, H, W) float; channel t = frame t, as lamina's tcat
        return self.net(x.reshape(x.shape[0], T, H, W))


class Max(nn.Module):  # bench/nets/clip_max.txt: every block per frame, the max over the frames after the last
    def __init__(self):
        super().__init__()
        self.frame = nn.Sequential(*block(1, 32), nn.MaxPool2d(2), *block(32, 64), nn.MaxPool2d(2), *block(64, 64),
                                   nn.MaxPool2d(2), *block(64, 128))
        self.clip = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))

    def forward(self, x):  # x (B, T, 1, H, W) float
        B = x.shape[0]
        f = self.frame(x.reshape(B * T, 1, H, W))
        return self.clip(f.reshape(B, T, *f.shape[1:]).amax(1))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.frame = nn.Sequential(*block(1, 32), nn.MaxPool2d(2), *block(32, 64), nn.MaxPool2d(2))
        self.clip = nn.Sequential(*block(64, 64), nn.MaxPool2d(2), *block(64, 128), nn.AdaptiveAvgPool2d(1),
                                  nn.Flatten(), nn.Linear(128, 10))

    def forward(self, x):  # x (B, T, 1, H, W) float
        B = x.shape[0]
        f = self.frame(x.reshape(B * T, 1, H, W))
        f = f.reshape(B, T, *f.shape[1:]).mean(1)
        return self.clip(f)


def norm(u8):  # (B, T, H, W, 1) uint8 -> (B, T, 1, H, W) float, as lamina
    return (u8.permute(0, 1, 4, 2, 3).float() / 255 - 0.5) / 0.5


def torch_run(way):
    torch.manual_seed(1)
    net = {"late": Net, "early": Early, "max": Max}[a.net]().to(dev).to(memory_format=torch.channels_last)

    def evaluate(net, ac):
        correct = 0
        with ac:
            for i in range(0, XT.shape[0], a.batch):
                correct += (net(norm(XT[i:i + a.batch])).argmax(1) == YT[i:i + a.batch]).sum().item()
        return dict(acc=correct / XT.shape[0])

    pad, flip = parse_augment(a.augment)

    def augment(x, y):  # x (B, T, H, W, 1): the frames moved alike
        (m,) = crop_flip([(x[..., 0], 0)], pad, flip)
        return m[..., None], y

    return torch_train(way, net, X, Y, norm, a.epochs, a.batch, a.lr, a.torch_precision, evaluate,
                       augment=augment if pad or flip else None,
                       schedule=("cosine", a.cosine) if a.cosine is not None else None)


out["torch"] = torch_ways(a.ways, torch_run, lambda r: f"test acc {100 * r['acc']:.2f}%")

if a.single:
    say("== lamina on one-frame clips (the same per-frame layers, no tpool)")
    one = make(1, os.path.join(tmp, "clips1"))
    spec1 = ("conv 32 3 pad 1 nobias, bn, relu, maxpool 2, conv 64 3 pad 1 nobias, bn, relu, maxpool 2, "
             "conv 64 3 pad 1 nobias, bn, relu, maxpool 2, conv 128 3 pad 1 nobias, bn, relu, gap, dense 10")
    out["lamina"]["single_frame"] = S = lamina_train(one, spec1)

say(f"\n== clips, net {a.net}: lamina vs PyTorch (same net, data, epochs; H200)")
ok = [w for w in out["torch"] if out["torch"][w].get("status") == "ok"]
if L["status"] == "ok" and ok:
    best = min(ok, key=lambda w: out["torch"][w]["epoch_s"])
    tb = out["torch"][best]
    say(f"{'':24s}{'epoch s':>10s}{'test acc':>10s}{'peak MB':>10s}")
    say(f"{'lamina ' + a.precision:24s}{L['epoch_s']:10.3f}{100 * L['acc']:10.2f}{L['peak_bytes'] / 1e6:10.0f}")
    for w in ok:
        r = out["torch"][w]
        say(f"{'PyTorch ' + w + ' ' + a.torch_precision:24s}{r['epoch_s']:10.3f}{100 * r['acc']:10.2f}{r['peak_bytes'] / 1e6:10.0f}")
    if a.single and out["lamina"]["single_frame"].get("status") == "ok":
        say(f"{'lamina one frame':24s}{out['lamina']['single_frame']['epoch_s']:10.3f}"
            f"{100 * out['lamina']['single_frame']['acc']:10.2f}")
    out["ratio_vs_fastest"] = tb["epoch_s"] / L["epoch_s"]
    out["acc_gap_points"] = 100 * (L["acc"] - tb["acc"])
    say(f"speed: lamina {out['ratio_vs_fastest']:.2f}x PyTorch's fastest ({best}); accuracy lamina - PyTorch "
        f"{out['acc_gap_points']:+.2f} points")
if a.json:
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
