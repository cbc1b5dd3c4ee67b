#!/usr/bin/env python3
"""Image folders: a JPEG folder decoded and trained on by lamina and by PyTorch's DataLoader, in one run.

Data:    lamina data images --out DIR --format jpeg --n N --test M --seed 1 (Fashion-MNIST in colour: each image its own
         tint and background, 28x28, quality 90), in the ImageFolder layout both sides read.
lamina:  lamina train --data DIR --cache '' --decode cpu|gpu --model cnn --epochs 1 --batch B --json: the training
         part's decoding seconds (libjpeg on all host threads, or nvJPEG on the GPU: the JPEG engines, and with
         LAMINA_NVJPEG=cuda nvJPEG's CUDA backend) and the epoch's; a decoding epoch = decode + train.
         Cached: the same run with --cache DIR2 twice (the second reads the cache) against the same images as an IDX
         folder (the cache's two files under IDX names): process wall time and epoch time.
PyTorch: torchvision.datasets.ImageFolder (PIL decode) + ToTensor + Normalize(0.5, 0.5) through a DataLoader
         (shuffle, pin_memory, W workers), the same CNN (Conv2d 3->32 3, ReLU, MaxPool 2, Conv2d 32->64 3, ReLU,
         MaxPool 2, Linear 1600->10), Adam 1e-3, one epoch (its first: the workers start in it, as a user's do);
         the same DataLoader iterated without training (decode only); and torchvision.io.decode_jpeg on the GPU
         (nvJPEG, in batches of B) over the files' bytes read beforehand (decode only).
  /usr/bin/python3 bench/decode.py --lamina build/lamina [--n 60000] [--test 10000] [--batch 256] [--workers 8,16]
      [--json FILE]"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--lamina", default="build/lamina")
ap.add_argument("--n", type=int, default=60000)
ap.add_argument("--test", type=int, default=10000)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--workers", default="8,16")
ap.add_argument("--json")
ap.add_argument("--keep", help="make the folder here and keep it")
ap.add_argument("--sides", default="64,128,256,512",
                help="also decode folders of larger JPEGs (the first --big-n training images scaled to SxS by PIL, "
                     "quality 90), lamina libjpeg against nvJPEG: where --decode auto turns to the GPU")
ap.add_argument("--big-n", type=int, default=4000)
ap.add_argument("--parts", default="main,sides", help="main (the 28x28 folder: epochs, cache, DataLoader), sides")
a = ap.parse_args()


def say(*x):
    print(*x, flush=True)


def run(cmd, env=None):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if p.returncode:
        say(f"  $ {' '.join(cmd)}\n    failed: {p.stderr[-1500:]}")
        return None, wall
    return p.stdout, wall


def _scale(job):
    from PIL import Image
    src, dst, side = job
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    Image.open(src).convert("RGB").resize((side, side), Image.BICUBIC).save(dst, quality=90)


def lamina_epoch(data, extra, env=None):
    cmd = [a.lamina, "train", "--data", data, "--model", "cnn", "--epochs", "1", "--batch", str(a.batch), "--opt",
           "adam", "--lr", "1e-3", "--seed", "1", "--no-progress", "--json", *extra]
    out, wall = run(cmd, env)
    if out is None:
        return None
    r = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    f = r.get("image_folder", {})
    e = r["epochs"][0]
    return dict(decode_s=f.get("decode_s", 0.0), decoded_gpu=f.get("decoded_gpu", 0), cache_hit=f.get("cache_hit"),
                epoch_s=e["seconds"], acc=r["test_acc"], wall_s=wall, device=r["device_name"])


res = dict(n=a.n, test=a.test, batch=a.batch, date=time.strftime("%Y-%m-%d"))
root = a.keep or tempfile.mkdtemp(prefix="lamina-decode-")
folder = os.path.join(root, "jpegs")
if not os.path.isdir(folder):
    t = time.perf_counter()
    out, _ = run([a.lamina, "data", "images", "--out", folder, "--format", "jpeg", "--n", str(a.n), "--test",
                  str(a.test), "--seed", "1"])
    if out is None:
        sys.exit(1)
    say(out.strip().splitlines()[-1], f"({time.perf_counter() - t:.1f} s)")
say(f"JPEG folder {folder}: {a.n} training, {a.test} test images; batch {a.batch}")

MAIN = "main" in a.parts.split(",")
if MAIN:
    say("== lamina: a decoding epoch (decode the training part, then train one epoch)")
    for name, extra, env in (("libjpeg (host threads)", ["--decode", "cpu"], None),
                             ("nvJPEG, JPEG engines", ["--decode", "gpu"], None),
                             ("nvJPEG, CUDA backend", ["--decode", "gpu"], dict(os.environ, LAMINA_NVJPEG="cuda"))):
        r = lamina_epoch(folder, ["--cache", "", *extra], env)
        if r is None:
            continue
        r["decode_ips"] = a.n / r["decode_s"]
        r["epoch_ips"] = a.n / (r["decode_s"] + r["epoch_s"])
        res.setdefault("lamina", {})[name] = r
        say(f"  {name:24s} decode {r['decode_s']:.3f} s ({r['decode_ips']:.0f}/s, {r['decoded_gpu']} by nvJPEG)  "
            f"train {r['epoch_s']:.3f} s  decoding epoch {r['epoch_ips']:.0f} images/s  acc {100 * r['acc']:.2f}%")

    say("== lamina: a cached epoch against an IDX-resident one")
    cache = os.path.join(root, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    first = lamina_epoch(folder, ["--cache", cache])
    cached = lamina_epoch(folder, ["--cache", cache])
    idxdir = os.path.join(root, "idx")
    os.makedirs(idxdir, exist_ok=True)
    for f in os.listdir(cache):  # train-<key>-images-idx4-ubyte -> train-images-idx4-ubyte
        part, _, rest = f.partition("-")
        name = part + "-" + rest.split("-", 1)[1]
        dst = os.path.join(idxdir, name)
        if os.path.lexists(dst):
            os.unlink(dst)
        os.symlink(os.path.join(cache, f), dst)
    resident = lamina_epoch(idxdir, [])
    if first and cached and resident:
        res["cached"] = dict(first=first, cached=cached, idx=resident, epoch_ratio=cached["epoch_s"] / resident["epoch_s"],
                             wall_ratio=cached["wall_s"] / resident["wall_s"])
        say(f"  first run (decode, write the cache)  wall {first['wall_s']:.2f} s  epoch {first['epoch_s']:.3f} s")
        say(f"  cached run (hit: {cached['cache_hit']})              wall {cached['wall_s']:.2f} s  epoch {cached['epoch_s']:.3f} s")
        say(f"  IDX folder                            wall {resident['wall_s']:.2f} s  epoch {resident['epoch_s']:.3f} s")
        say(f"  cached / IDX: epoch {res['cached']['epoch_ratio']:.3f}x, wall {res['cached']['wall_ratio']:.3f}x")

say("== PyTorch")
import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision import transforms  # noqa: E402

if not torch.cuda.is_available():
    say("  no CUDA device: PyTorch's side needs one")
    sys.exit(0 if not a.json else 1)
dev = torch.device("cuda")
tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)])
ds = torchvision.datasets.ImageFolder(os.path.join(folder, "train"), transform=tf)
torch.manual_seed(1)


def net():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                               torch.nn.Linear(64 * 5 * 5, 10)).to(dev)


res["torch"] = {}
for w in [] if not MAIN else [int(x) for x in a.workers.split(",")]:
    for train in (True, False):
        dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=w, pin_memory=True,
                                         drop_last=False)
        m = net()
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        torch.cuda.synchronize()
        t = time.perf_counter()
        seen = 0
        for x, y in dl:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            seen += len(y)
            if train:
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(m(x), y).backward()
                opt.step()
        torch.cuda.synchronize()
        s = time.perf_counter() - t
        key = f"DataLoader {w} workers, {'train' if train else 'decode only'}"
        res["torch"][key] = dict(seconds=s, ips=seen / s)
        say(f"  {key:40s} {s:.3f} s  {seen / s:.0f} images/s")
        del dl

files = [p for p, _ in ds.samples] if MAIN else []
datas = [torchvision.io.read_file(p) for p in files]


def gpu_decode_s(datas):
    """Seconds of torchvision's decode_jpeg on the GPU over the bytes, in batches of B: the second pass (the first
    starts nvJPEG)."""
    for rep in range(2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(0, len(datas), a.batch):
            torchvision.io.decode_jpeg(datas[i:i + a.batch], device="cuda")
        torch.cuda.synchronize()
        s = time.perf_counter() - t
    return s


if MAIN:
    s = gpu_decode_s(datas)
    res["torch"]["decode_jpeg on the GPU, decode only"] = dict(seconds=s, ips=len(datas) / s)
    say(f"  {'torchvision decode_jpeg(cuda), decode only':40s} {s:.3f} s  {len(datas) / s:.0f} images/s (second pass, "
        "files read beforehand)")

def scaled_folder(side):
    """The first big_n training images of the JPEG folder scaled to side x side (bicubic), in the same layout."""
    from concurrent.futures import ProcessPoolExecutor
    out = os.path.join(root, f"big{side}")
    jobs = [(p, os.path.join(out, "train", os.path.basename(os.path.dirname(p)), os.path.basename(p)), side)
            for p, _ in spread]
    jobs += [(p, d.replace(os.sep + "train" + os.sep, os.sep + "test" + os.sep), side) for p, d, _ in jobs[:200]]
    with ProcessPoolExecutor() as ex:
        list(ex.map(_scale, jobs, chunksize=64))
    return out


spread = ds.samples[::max(1, len(ds.samples) // a.big_n)][:a.big_n]  # every class (samples are in class order)
say("== larger JPEGs: libjpeg (host threads) against nvJPEG, decode only (the training part; --size 32x32)")
res["sides"] = {}
for side in [int(x) for x in a.sides.split(",") if x] if "sides" in a.parts.split(",") else []:
    big = scaled_folder(side)
    row = {}
    for name, extra, env in (("libjpeg", ["--decode", "cpu"], None), ("nvJPEG engines", ["--decode", "gpu"], None),
                             ("nvJPEG CUDA", ["--decode", "gpu"], dict(os.environ, LAMINA_NVJPEG="cuda"))):
        r = lamina_epoch(big, ["--cache", "", "--size", "32x32", "--classes", "10", *extra], env)
        if r:
            row[name] = dict(decode_s=r["decode_s"], ips=a.big_n / r["decode_s"], decoded_gpu=r["decoded_gpu"])
    datas = [torchvision.io.read_file(os.path.join(big, "train", os.path.basename(os.path.dirname(p)),
                                                   os.path.basename(p))) for p, _ in spread]
    s = gpu_decode_s(datas)
    row["torchvision decode_jpeg(cuda)"] = dict(decode_s=s, ips=len(datas) / s)
    res["sides"][side] = row
    say(f"  {side}x{side}: " + ", ".join(f"{k} {v['ips']:.0f}/s" + (f" ({v['decoded_gpu']} on the GPU)" if "decoded_gpu" in v
                                          and k != "libjpeg" else "") for k, v in row.items()))
    shutil.rmtree(big, ignore_errors=True)

say("== summary")
lam = res.get("lamina", {})
best_lam = max(lam.items(), key=lambda kv: kv[1]["epoch_ips"]) if lam else None
dl_train = {k: v for k, v in res["torch"].items() if k.endswith("train")}
best_dl = max(dl_train.items(), key=lambda kv: kv[1]["ips"]) if dl_train else None
if best_lam and best_dl:
    res["decoding_epoch_ratio"] = best_lam[1]["epoch_ips"] / best_dl[1]["ips"]
    say(f"  decoding epoch: lamina ({best_lam[0]}) {best_lam[1]['epoch_ips']:.0f} images/s, PyTorch ({best_dl[0]}) "
        f"{best_dl[1]['ips']:.0f} images/s: {res['decoding_epoch_ratio']:.2f}x (goal >= 2x)")
if "cached" in res:
    say(f"  cached epoch / IDX-resident epoch: {res['cached']['epoch_ratio']:.3f}x (wall {res['cached']['wall_ratio']:.3f}x;"
        " goal <= 1.1x)")
if a.json:
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
if not a.keep:
    shutil.rmtree(root, ignore_errors=True)
