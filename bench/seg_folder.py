#!/usr/bin/env python3
"""Segmentation from files: a Pascal VOC folder (JPEG scenes, palette-PNG masks) streamed from disk by lamina and by
PyTorch's DataLoader, on the same files in one run: the data path alone (uint8 image and mask batches, fitted to
HxW, delivered to the GPU) and training the small U-Net of bench/nets/unet.txt on it (streamed and resident lamina,
PyTorch eager and compiled).

Data:    lamina data segment --out TMP/gen --format folder-jpeg --n N --test M --size SxS --seed 1 (M2NIST-style
         scenes of Fashion-MNIST items, grey JPEG, an 8-bit grey PNG mask whose value is the class, 11 classes),
         rearranged (a process pool) into Pascal VOC's layout TMP/voc: JPEGImages/NAME.jpg (the JPEG's bytes as
         they are), SegmentationClass/NAME.png (a palette PNG, VOC's colour map, the index the class: 'P' pixels,
         not a conversion of the grey image's colours), ImageSets/Segmentation/{train,val}.txt (stems trNNNNNN,
         teNNNNNN) and classes.txt (11 names: VOC's layout otherwise means VOC's 21 classes to lamina).
         --data DIR: such a VOC folder made already (nothing is made).
Fit:     both sides scale an image to cover HxW (--fit) and keep the middle: lamina as its --size (the mean of the
         covered pixels, nearest for the mask); PyTorch as a user writes it with PIL: the shorter side to the target,
         the other rounded, Image.BOX for the image and Image.NEAREST for the mask, then a centre crop (an integer
         offset where lamina's is fractional: the same at the default 320 -> 256, which crops nothing).
Data path alone (--parts data; E = --epochs, default 2):
  lamina:  lamina bench data --data VOC --size HxW --batch B --epochs E --json (its images_per_s: the median epoch).
  PyTorch: a Dataset over the same files (PIL: the image 'L', the mask 'P' -> np.uint8 of the palette indices),
           uint8 tensors (1,H,W) and (H,W); DataLoader(batch B, shuffle, num_workers W for each W of --workers,
           pin_memory, persistent_workers=False, drop_last=False), each batch .cuda(non_blocking=True), a synchronize
           at the end of each epoch; images/s of each epoch, the median. Loader 'tvjpeg' (--loaders): the image by
           torchvision.io.decode_jpeg on the CPU in the workers and F.interpolate(mode='area'), the mask by PIL.
Training (--parts train; E = --train-epochs, default 5; epoch time the median of epochs 2..E, the last if E <= 2):
  lamina:  lamina train --data VOC --size HxW --model bench/nets/unet.txt [--stream] --cache '' --epochs E --batch B
           --opt adam --lr LR --seed 1 --precision P --no-progress --json: 'streamed' (--stream: a loader thread
           decodes into pinned buffers; the share of the epoch the GPU waited = data_wait_ms / epoch ms) and
           'resident' (decoded once, held on the device); its last epoch's test_miou.
  PyTorch: the same U-Net written out (bench/segment.py's), the DataLoader above (--train-workers, pin_memory),
           normalization (x/255 - 0.5)/0.5 on the GPU, F.cross_entropy(ignore_index=255), Adam(lr), bf16 autocast;
           'eager' (channels_last) and 'compile' (torch.compile(mode="max-autotune-no-cudagraphs") of the step and a
           CUDA graph of forward, backward and Adam captured by hand, each batch copied into its static tensors, as
           bench/trainbench.py): 'compile' drops the last partial batch (drop_last=True: the graph has one shape),
           'eager' keeps it. Per epoch: seconds, images/s, and the loader wait (time in next(it), iter(loader)'s
           worker start-up and the H2D copy's launch) as a share of the epoch; after the last epoch the test mean
           IoU over the val part (one confusion over the whole part, classes in the truth or the predictions, as
           lamina eval and bench/segment.py's miou_of).
           Also each side's mean IoU averaged over the last --miou-last epochs (default 3), PyTorch's evaluated after
           each of them outside its timing, lamina's its own test pass each epoch; --seed S seeds both sides.
  ratio:   PyTorch's best median epoch / lamina streamed's (the issue: > 1, and mean IoU within 1 point);
           lamina streamed / resident epoch (the issue: <= 1.05).
  /usr/bin/python3 bench/seg_folder.py --lamina build/lamina [--n 5000] [--test 500] [--size 320] [--fit 256]
      [--batch 16] [--epochs 2] [--train-epochs 5] [--workers 8,16] [--train-workers 16] [--loaders pil,tvjpeg]
      [--ways eager,compile] [--parts data,train] [--data VOC] [--keep DIR] [--json FILE]
  On a machine without a GPU (a check of the script): --device cpu --n 64 --test 16 --size 64 --fit 48 --batch 8
      --epochs 2 --train-epochs 2 --workers 2 --train-workers 2 --ways eager"""
import argparse, json, os, shutil, sys, tempfile, time, traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainbench import (LoaderEpoch, capture_graph, data_path_ratio, epoch_med, f, hw, last_json, med,  # noqa: E402
                        pct, run, say, torch_ways, unet)

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--lamina", default=os.path.join(HERE, "..", "build", "lamina"))
ap.add_argument("--spec", default=os.path.join(HERE, "nets", "unet.txt"))
ap.add_argument("--data", help="a Pascal VOC folder made already (else made under a temporary folder)")
ap.add_argument("--keep", help="make the sets here and keep them (else a temporary folder, removed at the end)")
ap.add_argument("--n", type=int, default=5000)
ap.add_argument("--test", type=int, default=500)
ap.add_argument("--size", default="320", help="the scenes made: S or SxS (default 320)")
ap.add_argument("--fit", default="256", help="both sides fit the images to H or HxW (default 256)")
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--epochs", type=int, default=2, help="epochs of the data path alone")
ap.add_argument("--train-epochs", type=int, default=5)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--seed", type=int, default=1, help="the training seed of both sides (lamina --seed, torch.manual_seed)")
ap.add_argument("--lamina-ways", default="streamed,resident", help="lamina's training runs: streamed, resident")
ap.add_argument("--miou-last", type=int, default=3,
                help="also the mean IoU averaged over the last K epochs, both sides (one epoch's moves by points)")
ap.add_argument("--precision", default="bf16", choices=["bf16", "tf32", "fp32"])
ap.add_argument("--workers", default="16", help="DataLoader worker counts of the data path, e.g. 8,16")
ap.add_argument("--train-workers", type=int, default=16)
ap.add_argument("--loaders", default="pil,tvjpeg", help="PyTorch's image decoders of the data path: pil, tvjpeg")
ap.add_argument("--ways", default="eager,compile", help="PyTorch's ways of training (eager, compile)")
ap.add_argument("--parts", default="data,train")
ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: only to check the script")
ap.add_argument("--json")
a = ap.parse_args()
K = 11
PARTS = a.parts.split(",")


H, W = hw(a.fit)
SH, SW = hw(a.size)
assert H % 4 == 0 and W % 4 == 0, "--fit: the U-Net pools twice, H and W must be multiples of 4"
out = dict(meta=dict(args=vars(a), date=time.strftime("%Y-%m-%d %H:%M:%S")), set={}, data={}, train={})


def save():
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


# ---- 1. the set: lamina's mask folder, rearranged as Pascal VOC
def voc_palette():
    """VOC's colour map (the bits of the index spread over R, G, B), 255 VOC's 'void' colour."""
    pal = []
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        pal += [r, g, b]
    pal[765:768] = [224, 224, 192]
    return pal


PALETTE = voc_palette()


def to_voc(job):
    """One scene: the JPEG copied, the grey mask written as a palette PNG whose index is the grey value."""
    from PIL import Image
    img, mask, dimg, dmask = job
    shutil.copyfile(img, dimg)
    arr = np.asarray(Image.open(mask))
    assert arr.dtype == np.uint8 and arr.ndim == 2, f"{mask}: not an 8-bit grey mask"
    p = Image.fromarray(arr)  # 'L', the values as they are
    p.putpalette(PALETTE)  # 'L' -> 'P': the pixels (the indices) kept, the colours VOC's
    assert p.mode == "P"
    p.save(dmask, optimize=False)
    return 1


def make_set(root):
    gen, voc = os.path.join(root, "gen"), os.path.join(root, "voc")
    if os.path.isdir(voc) and os.path.isfile(os.path.join(voc, "ImageSets", "Segmentation", "val.txt")):
        say(f"  {voc} is there already: kept")
        return voc
    shutil.rmtree(gen, ignore_errors=True)
    cmd = [a.lamina, "data", "segment", "--out", gen, "--format", "folder-jpeg", "--n", str(a.n), "--test",
           str(a.test), "--size", f"{SH}x{SW}", "--seed", "1"]
    t0 = time.perf_counter()
    o, wall, err = run(cmd)
    if o is None:
        raise SystemExit(f"lamina data segment failed: {err}")
    out["set"]["make_s"] = wall
    say(f"    {o.strip().splitlines()[-1] if o.strip() else ''} ({wall:.1f} s)")
    from multiprocessing import get_context
    t0 = time.perf_counter()
    for d in ("JPEGImages", "SegmentationClass", os.path.join("ImageSets", "Segmentation")):
        os.makedirs(os.path.join(voc, d), exist_ok=True)
    jobs, lists = [], {}
    for part, tag, split in (("train", "tr", "train"), ("test", "te", "val")):
        stems = []
        for name in sorted(os.listdir(os.path.join(gen, part, "images"))):
            stem = tag + os.path.splitext(name)[0]
            stems.append(stem)
            jobs.append((os.path.join(gen, part, "images", name),
                         os.path.join(gen, part, "masks", os.path.splitext(name)[0] + ".png"),
                         os.path.join(voc, "JPEGImages", stem + ".jpg"),
                         os.path.join(voc, "SegmentationClass", stem + ".png")))
        lists[split] = stems
    with get_context("fork").Pool(os.cpu_count()) as pool:  # fork: a spawned child would run this script again
        done = sum(pool.imap_unordered(to_voc, jobs, chunksize=32))
    for split, stems in lists.items():
        with open(os.path.join(voc, "ImageSets", "Segmentation", split + ".txt"), "w") as fh:
            fh.write("".join(s + "\n" for s in stems))
    with open(os.path.join(voc, "classes.txt"), "w") as fh:  # Fashion-MNIST's classes after the background
        fh.write("\n".join(["background", "tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt",
                            "sneaker", "bag", "boot"]) + "\n")
    # a check: a palette mask, its indices the grey source's values
    from PIL import Image
    for j in (jobs[0], jobs[len(jobs) // 2], jobs[-1]):
        m = Image.open(j[3])
        assert m.mode == "P", f"{j[3]}: mode {m.mode}"
        assert np.array_equal(np.asarray(m), np.asarray(Image.open(j[1]))), f"{j[3]}: indices differ from {j[1]}"
    out["set"]["convert_s"] = time.perf_counter() - t0
    out["set"]["files"] = done
    say(f"  VOC layout {voc}: {done} scenes ({len(lists['train'])} train, {len(lists['val'])} val), palette masks "
        f"checked, {out['set']['convert_s']:.1f} s ({os.cpu_count()} processes)")
    shutil.rmtree(gen, ignore_errors=True)
    return voc


root = a.keep or tempfile.mkdtemp(prefix="lamina-segfolder-")
os.makedirs(root, exist_ok=True)
say("== the set")
voc = a.data or make_set(root)
out["set"]["voc"] = voc
for split in ("train", "val"):
    with open(os.path.join(voc, "ImageSets", "Segmentation", split + ".txt")) as fh:
        out["set"][split] = sum(1 for line in fh if line.strip())
say(f"  {out['set']['train']} training and {out['set']['val']} val scenes; fitted to {H}x{W}; batch {a.batch}")
dev_args = ["--device", "cpu"] if a.device == "cpu" else []

# ---- PyTorch's side: the Dataset, the DataLoader, the U-Net
import torch, torch.nn.functional as F  # noqa: E402
from PIL import Image  # noqa: E402

cuda = a.device == "cuda"
dev = torch.device(a.device)
out["meta"]["torch"] = torch.__version__
out["meta"]["gpu"] = torch.cuda.get_device_name(0) if cuda else "cpu"
say(f"PyTorch {torch.__version__}, {out['meta']['gpu']}")
if cuda:
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.precision == "tf32"


def sync():
    if cuda:
        torch.cuda.synchronize()


def cover(w, h):
    """The size (w, h) that covers W x H: the side that binds exactly the target, the other rounded."""
    if H / h >= W / w:
        return max(W, round(w * H / h)), H
    return W, max(H, round(h * W / w))


def centre(im):
    w, h = im.size
    l, t = (w - W) // 2, (h - H) // 2
    return im if (w, h) == (W, H) else im.crop((l, t, l + W, t + H))


class VOCSeg(torch.utils.data.Dataset):
    """A split of a VOC folder: (1, H, W) uint8 image, (H, W) uint8 mask (the palette indices), fitted to H x W."""

    def __init__(self, root, split, loader="pil"):
        with open(os.path.join(root, "ImageSets", "Segmentation", split + ".txt")) as fh:
            self.stems = [s.strip() for s in fh if s.strip()]
        self.root, self.loader = root, loader

    def __len__(self):
        return len(self.stems)

    def __getitem__(self, i):
        s = self.stems[i]
        m = Image.open(os.path.join(self.root, "SegmentationClass", s + ".png"))
        if m.mode not in ("P", "L"):
            raise ValueError(f"{s}.png: a mask of mode {m.mode}")
        size = cover(*m.size)
        if m.size != size:
            m = m.resize(size, Image.NEAREST)
        y = torch.from_numpy(np.array(centre(m), dtype=np.uint8))
        path = os.path.join(self.root, "JPEGImages", s + ".jpg")
        if self.loader == "tvjpeg":
            import torchvision
            x = torchvision.io.decode_jpeg(torchvision.io.read_file(path), mode=torchvision.io.ImageReadMode.GRAY)
            h, w = x.shape[1:]
            nw, nh = cover(w, h)
            if (nh, nw) != (h, w):
                x = F.interpolate(x[None].float(), size=(nh, nw), mode="area")[0].round_().to(torch.uint8)
            t, l = (nh - H) // 2, (nw - W) // 2
            return x[:, t:t + H, l:l + W].contiguous(), y
        im = Image.open(path)
        if im.mode != "L":
            im = im.convert("L")
        size = cover(*im.size)
        if im.size != size:
            im = im.resize(size, Image.BOX)
        return torch.from_numpy(np.array(centre(im), dtype=np.uint8))[None], y


def loader(ds, workers, shuffle=True, drop_last=False):
    return torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=shuffle, num_workers=workers,
                                       pin_memory=cuda, persistent_workers=False, drop_last=drop_last,
                                       multiprocessing_context="fork" if workers else None)  # as above


# ---- 2. the data path alone
if "data" in PARTS:
    say(f"== the data path alone: uint8 batches of {a.batch} fitted to {H}x{W} delivered to the {a.device}, "
        f"{a.epochs} epochs")
    D = out["data"]
    o, wall, err = run([a.lamina, "bench", "data", "--data", voc, "--size", f"{H}x{W}", "--batch", str(a.batch),
                        "--epochs", str(a.epochs), "--json"])  # the interface as given; no --device
    L = dict(status="failed", error=err, wall_s=wall)
    if o is not None:
        try:
            r = last_json(o)
            eps = [e for e in r.get("epochs", []) if isinstance(e, dict)]
            ips = r.get("images_per_s")
            if ips is None:
                ips = med([e.get("images_per_s") for e in eps])
            L = dict(status="ok", images_per_s=ips, batches_per_s=ips / a.batch if ips else None, wall_s=wall,
                     epochs=eps, raw=r)
            for i, e in enumerate(eps):
                say(f"    lamina epoch {e.get('epoch', i + 1)}: {f(e.get('seconds'))} s  "
                    f"{f(e.get('images_per_s'), '.0f')} images/s")
            say(f"  lamina bench data: {f(ips, '.0f')} images/s ({f(L['batches_per_s'], '.1f')} batches/s), median "
                f"epoch; the rest of its JSON: " + json.dumps({k: v for k, v in r.items() if k != "epochs"})[:600])
        except Exception as ex:
            L = dict(status="unparsed", error=repr(ex), stdout=o[-2000:], wall_s=wall)
            say(f"    lamina bench data: could not read its JSON ({ex!r}): {o[-500:]}")
    D["lamina"] = L
    D["torch"] = {}
    for kind in a.loaders.split(","):
        for w in [int(x) for x in a.workers.split(",")]:
            key = f"{kind}, {w} workers"
            try:
                torch.manual_seed(1)
                ds = VOCSeg(voc, "train", kind)
                secs, ips = [], []
                for ep in range(a.epochs):
                    dl = loader(ds, w)
                    sync()
                    t0 = time.perf_counter()
                    n = 0
                    for x, y in dl:
                        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
                        n += x.shape[0]
                    sync()
                    secs.append(time.perf_counter() - t0)
                    ips.append(n / secs[-1])
                    del dl
                assert tuple(x.shape[1:]) == (1, H, W) and tuple(y.shape[1:]) == (H, W) and x.dtype == torch.uint8
                r = dict(status="ok", seconds=secs, images_per_s_epochs=ips, images_per_s=med(ips),
                         batches_per_s=med(ips) / a.batch)
                say(f"  PyTorch DataLoader {key:18s}: epochs " + ", ".join(f"{s:.3f} s" for s in secs) +
                    f"; median {r['images_per_s']:.0f} images/s ({r['batches_per_s']:.1f} batches/s)")
            except Exception as ex:
                traceback.print_exc()
                r = dict(status="failed", note=repr(ex)[:500])
                say(f"  PyTorch DataLoader {key}: failed: {ex!r}")
            D["torch"][key] = r
    data_path_ratio(D, L, "images_per_s", "images/s")
    save()


# ---- 3. training the U-Net
def norm(u8):  # (B, 1, H, W) uint8 -> float, as lamina
    return (u8.float() / 255 - 0.5) / 0.5


def miou_of(conf):  # conf[true, predicted] over the test set -> mean IoU of the classes present, as lamina eval
    tp = np.diag(conf).astype(np.float64)
    fp, fn = conf.sum(0) - tp, conf.sum(1) - tp
    have = tp + fp + fn > 0
    return float((tp[have] / (tp + fp + fn)[have]).mean())


def lamina_seg(stream):
    """lamina train on the VOC folder, --stream or resident: its epochs as it reports them."""
    E = a.train_epochs
    cmd = [a.lamina, "train", "--data", voc, "--size", f"{H}x{W}", "--model", a.spec, *(["--stream"] if stream else []),
           "--cache", "", "--epochs", str(E), "--batch", str(a.batch), "--opt", "adam", "--lr", repr(a.lr), "--seed",
           str(a.seed), "--precision", a.precision, "--no-progress", "--json", *dev_args]
    o, wall, err = run(cmd)
    if o is None:
        return dict(status="failed", error=err, wall_s=wall)
    try:
        r = last_json(o)
        eps = r["epochs"]
        rows = []
        for i, e in enumerate(eps):
            s = e.get("seconds")
            dw = e.get("data_wait_ms")
            rows.append(dict(epoch=e.get("epoch", i + 1), seconds=s, images_per_s=e.get("images_per_s"),
                             data_wait_ms=dw, loader_wait_ms=e.get("loader_wait_ms"),
                             stream_buffers=e.get("stream_buffers"), test_miou=e.get("test_miou"),
                             train_loss=e.get("train_loss"),
                             wait_share=dw / (1000 * s) if dw is not None and s else None))
            q = rows[-1]
            say(f"    epoch {q['epoch']}: loss {f(q['train_loss'], '.4f')}  test mIoU "
                f"{pct(q['test_miou'])}%  {f(s)} s  {f(q['images_per_s'], '.0f')} images/s"
                f"  data wait {f(dw, '.0f')} ms ({pct(q['wait_share'], '.1f')}%), loader wait "
                f"{f(q['loader_wait_ms'], '.0f')} ms, buffers {q['stream_buffers']}")
        times = [q["seconds"] for q in rows if q["seconds"] is not None]
        res = dict(status="ok", wall_s=wall, epochs=rows, epoch_times=times, epoch_s=epoch_med(times),
                   images_per_s=epoch_med([q["images_per_s"] for q in rows if q["images_per_s"] is not None]),
                   wait_share=epoch_med([q["wait_share"] for q in rows if q["wait_share"] is not None]),
                   miou=r.get("test_miou", rows[-1]["test_miou"]), acc=r.get("test_acc"),
                   miou_last=[q["test_miou"] for q in rows[-max(a.miou_last, 1):]],
                   miou_last_mean=float(np.mean([q["test_miou"] for q in rows[-max(a.miou_last, 1):]])),
                   peak_bytes=(r.get("memory") or {}).get("peak"), device=r.get("device_name"))
        return res
    except Exception as ex:
        say(f"    could not read lamina's JSON: {ex!r}")
        return dict(status="unparsed", error=repr(ex), stdout=o[-2000:], wall_s=wall)


def torch_run(way):
    """The U-Net trained by PyTorch from the DataLoader; per epoch seconds, images/s, the loader-wait share."""
    if way == "compile" and not cuda:
        raise RuntimeError("'compile' (torch.compile + a CUDA graph) needs CUDA")
    torch.manual_seed(a.seed)
    net = unet(K).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(net.parameters(), lr=a.lr, capturable=(way == "compile"))
    ac = torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    loss_fn = lambda logits, t: F.cross_entropy(logits, t, ignore_index=255)  # noqa: E731 (as lamina's)
    B = a.batch
    ds = VOCSeg(voc, "train")
    dl = loader(ds, a.train_workers, drop_last=way == "compile")

    def step_of(model, x, y):
        def step():
            with ac:
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
        return step

    if way == "compile":
        xs = torch.empty(B, 1, H, W, device=dev)
        ys = torch.empty(B, H, W, dtype=torch.int64, device=dev)
        first = [ds[i] for i in range(min(B, len(ds)))]
        xs.copy_(norm(torch.stack([t[0] for t in first]).to(dev))), ys.copy_(torch.stack([t[1] for t in first]))
        step_c = step_of(torch.compile(net, mode="max-autotune-no-cudagraphs"), xs, ys)
        graph = capture_graph(step_c)
    if cuda and way != "compile":  # capture_graph reset it before it captured
        torch.cuda.reset_peak_memory_stats()
    times, ips, waits, mious = [], [], [], []
    for ep in range(a.train_epochs):
        net.train()
        sync()
        t0 = time.perf_counter()
        le = LoaderEpoch(dl, dev)
        for xb, yb in le:
            if way == "compile":
                xs.copy_(norm(xb)), ys.copy_(yb)
                graph.replay()
            else:
                step_of(net, norm(xb).contiguous(memory_format=torch.channels_last), yb.long())()
        sync()
        times.append(time.perf_counter() - t0)
        ips.append(le.n / times[-1])
        waits.append(le.wait / times[-1])
        le.close()
        say(f"    {way} epoch {ep + 1}: {times[-1]:.3f} s  {ips[-1]:.0f} images/s  loader wait {100 * waits[-1]:.1f}%")
        if ep >= a.train_epochs - max(a.miou_last, 1):  # after the timed epoch, as lamina's test pass
            conf = val_confusion(net, ac)
            mious.append(miou_of(conf))
            say(f"    {way} epoch {ep + 1}: test mean IoU {100 * mious[-1]:.2f}%")
    return dict(status="ok", epoch_times=times, images_per_s_epochs=ips, wait_shares=waits,
                epoch_s=epoch_med(times), images_per_s=epoch_med(ips), wait_share=epoch_med(waits),
                miou=mious[-1], miou_last=mious, miou_last_mean=float(np.mean(mious)),
                acc=float(np.diag(conf).sum() / conf.sum()), drop_last=way == "compile",
                peak_bytes=torch.cuda.max_memory_allocated() if cuda else 0)


def val_confusion(net, ac):
    """The confusion matrix over the val part (ignored pixels counted nowhere, as lamina's); the net back in train
    mode after."""
    net.eval()
    conf = torch.zeros(K * K, dtype=torch.int64, device=dev)
    with torch.no_grad(), ac:
        for xb, yb in loader(VOCSeg(voc, "val"), a.train_workers, shuffle=False):
            pred = net(norm(xb.to(dev, non_blocking=True)).contiguous(memory_format=torch.channels_last)).argmax(1)
            yb = yb.to(dev).long()
            keep = yb != 255
            conf += torch.bincount(yb[keep] * K + pred[keep], minlength=K * K)
    net.train()
    return conf.reshape(K, K).cpu().numpy()


if "train" in PARTS:
    T = out["train"]
    say(f"== training the U-Net ({a.spec}) at {H}x{W}: {a.train_epochs} epochs, batch {a.batch}, Adam {a.lr}, "
        f"{a.precision}")
    T["lamina"] = {}
    for name, stream in (("streamed", True), ("resident", False)):
        if name not in a.lamina_ways.split(","):
            continue
        say(f"== lamina {name}")
        T["lamina"][name] = lamina_seg(stream)
        save()
    T["torch"] = torch_ways(a.ways, torch_run, lambda r: f"mean IoU {100 * r['miou']:.2f}%, "
                            f"{r['images_per_s']:.0f} images/s, loader wait {100 * r['wait_share']:.1f}%")
    save()
    say(f"\n== training from the VOC folder: lamina vs PyTorch (same U-Net, files, epochs; {out['meta']['gpu']})")
    say(f"{'':22s}{'epoch s':>9s}{'images/s':>10s}{'wait %':>8s}{'mean IoU':>10s}")
    rows = [(f"lamina {k}", v) for k, v in T["lamina"].items()] + [(f"PyTorch {k}", v) for k, v in T["torch"].items()]
    for name, r in rows:
        if r.get("status") != "ok":
            say(f"{name:22s}  {r.get('status')}")
            continue
        say(f"{name:22s}{f(r['epoch_s']):>9s}{f(r['images_per_s'], '.0f'):>10s}"
            f"{pct(r['wait_share'], '.1f'):>8s}{pct(r['miou']):>10s}")
    Ls, Lr = T["lamina"].get("streamed", {}), T["lamina"].get("resident", {})
    if Ls.get("status") == "ok" and Lr.get("status") == "ok" and Ls["epoch_s"] and Lr["epoch_s"]:
        T["streamed_over_resident"] = Ls["epoch_s"] / Lr["epoch_s"]
        say(f"lamina streamed / resident epoch: {T['streamed_over_resident']:.3f}x (the issue: <= 1.05)")
    ok = [w for w, r in T["torch"].items() if r.get("status") == "ok"]
    if ok:
        best = min(ok, key=lambda w: T["torch"][w]["epoch_s"])
        T["torch_best"] = best
        if Ls.get("status") == "ok" and Ls["epoch_s"]:
            T["torch_over_lamina"] = T["torch"][best]["epoch_s"] / Ls["epoch_s"]
            say(f"PyTorch's best ({best}) epoch / lamina streamed epoch: {T['torch_over_lamina']:.2f}x (the issue: > 1)")
            if Ls.get("miou") is not None:
                T["miou_gap_points"] = 100 * (Ls["miou"] - T["torch"][best]["miou"])
                say(f"mean IoU: lamina streamed {100 * Ls['miou']:.2f}%, PyTorch {best} "
                    f"{100 * T['torch'][best]['miou']:.2f}%: {T['miou_gap_points']:+.2f} points (the issue: within 1)")
                Tb = T["torch"][best]
                T["miou_last_gap_points"] = 100 * (Ls["miou_last_mean"] - Tb["miou_last_mean"])
                say(f"mean IoU over the last {len(Ls['miou_last'])} epochs: lamina streamed "
                    f"{100 * Ls['miou_last_mean']:.2f}%, PyTorch {best} {100 * Tb['miou_last_mean']:.2f}%: "
                    f"{T['miou_last_gap_points']:+.2f} points")
save()
if not a.keep and not a.data:
    shutil.rmtree(root, ignore_errors=True)
