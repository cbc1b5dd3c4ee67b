#!/usr/bin/env python3
"""Segmentation: the small U-Net of bench/nets/unet.txt trained on `lamina data segment` (M2NIST-style scenes of
64x84, one to three Fashion-MNIST items; a class per pixel, 0 the background, an item's class + 1 where it is
visible: 11 classes) by lamina and by PyTorch (the same net written out below), same optimizer, hyper-parameters,
normalization and epochs; epoch time (median of epochs 2..E), test mean IoU and pixel accuracy after the last
epoch, device peak memory; and lamina's `predict --grid` picture of a few test scenes (input | truth | prediction).

Data:    lamina data segment --out DIR --n N --test M --seed 1 (from Fashion-MNIST: LAMINA_DATA_DIR or Debian's);
         both sides read DIR's IDX files; PyTorch holds them resident on the GPU as uint8, each batch gathered there
         and normalized as (x/255 - 0.5)/0.5, as lamina does.
lamina:  lamina train --data DIR --model bench/nets/unet.txt --epochs E --batch B --opt adam --lr LR --seed 1
         --precision P --no-progress --json --save MODEL (its step is one CUDA graph); lamina eval --load MODEL
         --data DIR --json for the IoU of each class; lamina predict --load MODEL --data DIR --grid FILE.png.
PyTorch: Conv2d(bias=False), BatchNorm2d, ReLU, MaxPool2d(2), ConvTranspose2d(2, stride 2), torch.cat((x, skip)),
         Conv2d(32, 11, 1); F.cross_entropy over every pixel; Adam(lr); the order torch.randperm each epoch; 'eager'
         and 'compile' (+ a hand-captured CUDA graph), as bench/trainbench.py says. N is a multiple of B.
Mean IoU, both sides: over the whole test set, IoU = TP / (TP + FP + FN) of each class that is in the truth or the
         predictions, averaged over those classes (as lamina eval).
  /usr/bin/python3 bench/segment.py --lamina build/lamina [--n 19200] [--test 2000] [--epochs 10] [--batch 64]
      [--lr 1e-3] [--precision bf16|fp16|tf32] [--torch-precision P] [--ways eager,compile] [--augment crop:P,flip] [--grid FILE.png]
      [--json FILE]"""
import argparse, json, os, subprocess, sys, tempfile, time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainbench import crop_flip, idx, lamina_train, parse_augment, say, torch_train, torch_ways, unet  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--lamina", default=os.path.join(HERE, "..", "build", "lamina"))
ap.add_argument("--spec", default=os.path.join(HERE, "nets", "unet.txt"))
ap.add_argument("--data", help="a segment folder made already (else made under a temporary folder)")
ap.add_argument("--n", type=int, default=19200)
ap.add_argument("--test", type=int, default=2000)
ap.add_argument("--epochs", type=int, default=10)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "tf32"], help="lamina's (fp16: its loss "
                "scaling on the device)")
ap.add_argument("--torch-precision", choices=["bf16", "fp16", "tf32"], help="PyTorch's (default: --precision; "
                "fp16: autocast float16 and GradScaler); #34 compares lamina fp16 with PyTorch bf16")
ap.add_argument("--ways", default="eager,compile", help="PyTorch's ways (eager, compile)")
ap.add_argument("--grid", help="write lamina's predict --grid picture here")
ap.add_argument("--augment", default="none", help="both sides: crop:P,flip as lamina train --augment (default none)")
ap.add_argument("--json")
a = ap.parse_args()
a.torch_precision = a.torch_precision or a.precision
assert a.n % a.batch == 0, "--n must be a multiple of --batch"
K = 11

out = dict(meta=dict(args=vars(a), date=time.strftime("%Y-%m-%d %H:%M:%S")), lamina={}, torch={})
tmp = tempfile.mkdtemp(prefix="lamina-segment-")
data = a.data
if not data:
    data = os.path.join(tmp, "segment")
    cmd = [a.lamina, "data", "segment", "--out", data, "--n", str(a.n), "--test", str(a.test), "--seed", "1"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    say(f"  $ {' '.join(cmd)}  ({time.perf_counter() - t0:.1f} s)")


def miou_of(conf):  # conf[true, predicted] over the test set -> mean IoU of the classes present, as lamina eval
    tp = np.diag(conf).astype(np.float64)
    fp, fn = conf.sum(0) - tp, conf.sum(1) - tp
    have = tp + fp + fn > 0
    return float((tp[have] / (tp + fp + fn)[have]).mean())


say("== lamina")
model = os.path.join(tmp, "unet.lamina")
extra = ["--save", model] + (["--augment", a.augment] if a.augment != "none" else [])
out["lamina"] = L = lamina_train(a.lamina, data, a.spec, a.epochs, a.batch, a.lr, a.precision, extra)
if L["status"] == "ok":
    p = subprocess.run([a.lamina, "eval", "--load", model, "--data", data, "--json"], capture_output=True, text=True)
    ev = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1]) if not p.returncode else {}
    L["miou"], L["iou"] = ev.get("mean_iou"), ev.get("iou")
    if ev.get("confusion"):
        L["miou_here"] = miou_of(np.array(ev["confusion"], dtype=np.int64))  # the same formula as PyTorch's below
    say(f"  lamina: mean IoU {100 * (L['miou'] or 0):.2f}% (from its confusion here: {100 * L.get('miou_here', 0):.2f}%),"
        f" pixel acc {100 * L['acc']:.2f}%, median epoch {L['epoch_s']:.3f} s, peak {L['peak_bytes'] / 1e6:.0f} MB")
    if a.grid:
        g = subprocess.run([a.lamina, "predict", "--load", model, "--data", data, "--grid", a.grid, "--count", "6"],
                           capture_output=True, text=True)
        say("  " + (g.stdout.strip() or g.stderr.strip()))

import torch, torch.nn as nn  # noqa: E402

out["meta"].update(torch=torch.__version__, gpu=torch.cuda.get_device_name(0))
say(f"PyTorch {torch.__version__}, {out['meta']['gpu']}")
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.torch_precision == "tf32"
dev = "cuda"
X = torch.from_numpy(idx(os.path.join(data, "train-images-idx3-ubyte")).copy()).to(dev)  # (N, H, W)
Y = torch.from_numpy(idx(os.path.join(data, "train-labels-idx3-ubyte")).astype(np.int64)).to(dev)  # (N, H, W)
XT = torch.from_numpy(idx(os.path.join(data, "t10k-images-idx3-ubyte")).copy()).to(dev)
YT = torch.from_numpy(idx(os.path.join(data, "t10k-labels-idx3-ubyte")).astype(np.int64)).to(dev)


def norm(u8):  # (B, H, W) uint8 -> (B, 1, H, W) float, as lamina
    return (u8[:, None].float() / 255 - 0.5) / 0.5


def torch_run(way):
    torch.manual_seed(1)
    net = unet(K).to(dev).to(memory_format=torch.channels_last)

    def evaluate(net, ac):
        conf = torch.zeros(K * K, dtype=torch.int64, device=dev)
        with ac:
            for i in range(0, XT.shape[0], a.batch):
                pred = net(norm(XT[i:i + a.batch])).argmax(1)
                conf += torch.bincount((YT[i:i + a.batch] * K + pred).flatten(), minlength=K * K)
        conf = conf.reshape(K, K).cpu().numpy()
        return dict(acc=float(np.diag(conf).sum() / conf.sum()), miou=miou_of(conf))

    pad, flip = parse_augment(a.augment)

    def augment(x, y):  # scene and mask moved alike; the mask's padding ignored
        xm, ym = crop_flip([(x[:, None], 0), (y[:, None], 255)], pad, flip)
        return xm[:, 0], ym[:, 0]

    loss = lambda logits, t: nn.functional.cross_entropy(logits, t, ignore_index=255)  # noqa: E731 (as lamina's)
    return torch_train(way, net, X, Y, norm, a.epochs, a.batch, a.lr, a.torch_precision, evaluate, loss_fn=loss,
                       augment=augment if pad or flip else None)


out["torch"] = torch_ways(a.ways, torch_run, lambda r: f"mean IoU {100 * r['miou']:.2f}%, pixel acc {100 * r['acc']:.2f}%")

say("\n== segmentation: lamina vs PyTorch (same U-Net, data, epochs; H200)")
ok = [w for w in out["torch"] if out["torch"][w].get("status") == "ok"]
if L["status"] == "ok" and ok:
    best = min(ok, key=lambda w: out["torch"][w]["epoch_s"])
    tb = out["torch"][best]
    say(f"{'':24s}{'epoch s':>10s}{'mean IoU':>10s}{'pixel acc':>11s}{'peak MB':>10s}")
    say(f"{'lamina ' + a.precision:24s}{L['epoch_s']:10.3f}{100 * (L['miou'] or 0):10.2f}{100 * L['acc']:11.2f}"
        f"{L['peak_bytes'] / 1e6:10.0f}")
    for w in ok:
        r = out["torch"][w]
        say(f"{'PyTorch ' + w + ' ' + a.torch_precision:24s}{r['epoch_s']:10.3f}{100 * r['miou']:10.2f}{100 * r['acc']:11.2f}"
            f"{r['peak_bytes'] / 1e6:10.0f}")
    out["ratio_vs_fastest"] = tb["epoch_s"] / L["epoch_s"]
    out["miou_gap_points"] = 100 * ((L["miou"] or 0) - tb["miou"])
    say(f"speed: lamina {out['ratio_vs_fastest']:.2f}x PyTorch's fastest ({best}); mean IoU lamina - PyTorch "
        f"{out['miou_gap_points']:+.2f} points")
if a.json:
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
