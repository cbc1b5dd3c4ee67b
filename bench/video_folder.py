#!/usr/bin/env python3
"""Video classification from files: a folder of MP4 videos (DIR/{train,test}/CLASS/INDEX.mp4) streamed from disk by
lamina and by PyTorch's DataLoader over OpenCV, on the same files in one run: the data path alone (uint8 clip batches
delivered to the GPU) and training the clip net of bench/nets/clip_max.txt on it (lamina streamed, PyTorch eager and
compiled), test accuracy over --test-clips clips a video (issue #33).

Data:    lamina data clips --format mp4 --out TMP/videos --n N --test M --size HxW --seconds 2:4 --seed 1
         (Moving-MNIST-style videos from Fashion-MNIST: two items, one still, one moving; the label the moving one's
         class, 10 classes; grey, 25 frames a second, each 2 to 4 s long (50 to 100 frames), H.264 where the FFmpeg
         lamina loads has an encoder, else MPEG-4 Part 2). --seconds MIN:MAX sets the lengths (the issue: 2 to 4 s;
         lamina's default, 1 to 4 s, gives videos shorter than a 31-frame span, which repeat their last frame).
         --data DIR: such a folder made already (nothing is made: the H200's FFmpeg may have no encoder, so the set
         can be made elsewhere and carried; 2,000 + 500 videos of 112x112 in H.264 take about 25 MB).
A clip:  T = --frames frames, every S-th (--frame-stride), so a span of (T-1)*S+1 frames; last = frames - span
         (0 where the video is shorter: its last frame repeats). Training: the start drawn uniformly from
         [0, last] each epoch (each side its own draws). Test (--test-clips K): K clips evenly spaced, start_k =
         floor(k*last/(K-1) + 1/2), the middle (floor(last/2)) where K = 1; the softmax outputs of a video's K clips
         averaged, accuracy per video. Both sides read grey uint8 clips (T, 1, H, W) at the videos' size.
Data path alone (--parts data; E = --epochs, default 2):
  lamina:  lamina bench data --data DIR --frames T --frame-stride S --batch B --epochs E --json: the training part
           streamed (each clip seeked and decoded on the host threads into pinned buffers a few batches ahead,
           copied to the device as uint8); its clips/s is the median epoch; frames/s = clips/s * T.
  PyTorch: a Dataset reading the clip as a careful user writes it with OpenCV: cv2.VideoCapture(path, CAP_FFMPEG)
           (one decoder thread a worker where cv2 has CAP_PROP_N_THREADS: --cv-threads), CAP_PROP_FRAME_COUNT,
           set(CAP_PROP_POS_FRAMES, start) (OpenCV seeks to the key frame before it and decodes up to it), then the
           span's frames: grab() for the ones skipped, read() + cvtColor(BGR2GRAY) for every S-th; uint8
           (T, 1, H, W). DataLoader(batch B, shuffle, num_workers W for each W of --workers, pin_memory,
           persistent_workers=False), each batch .cuda(non_blocking=True), a synchronize at the end of each epoch;
           clips/s of each epoch, the median; frames/s = clips/s * T (the frames delivered, as lamina's; PyTorch's
           frames read after the seek are counted too: span per clip where the video is long enough).
  Both:    host CPU seconds a clip (user + system, from getrusage: lamina's whole run, its probe of the files
           included; the DataLoader's workers, reaped at each epoch's end, and this process): what a clip costs
           the host whatever else the machine runs (a shared machine's wall clock says little).
Training (--parts train; E = --train-epochs, default 5; epoch time the median of epochs 2..E, the last if E <= 2):
  lamina:  lamina train --data DIR --model bench/nets/clip_max.txt --frames T --frame-stride S --cache '' --epochs E
           --batch B --opt adam --lr LR --seed S --precision P --test-clips K --no-progress --json (a video folder
           always streams: no cache, no resident copy); per epoch seconds (the training pass: its test pass is not
           in them, as PyTorch's is not), clips/s, data_wait_ms (the time the GPU waited for batch copies; its share
           of the epoch) and test_acc. Where this lamina has no --test-clips,
           K = 1 on both sides (said in the output). --lr-schedule cosine: lamina's --lr-schedule cosine, and PyTorch's
           rate set before each step to lr (1 + cos(pi t / steps)) / 2, as src/nn/schedule.c computes it. --lamina-decode gpu: the same run with --decode gpu added
           (NVDEC; run only where this lamina says it has a GPU video decoder: lamina info --json's 'nvdec' or
           'video_gpu', or NVDEC in train --help; dev/lab_video_decode.c measured it slower than the host at every
           size, docs/bench/JOURNAL.md, "Video folders streamed from their files").
  PyTorch: the same net written out (bench/clips.py's 'max': per frame conv-bn-relu 32, maxpool, 64, maxpool, 64,
           maxpool, 128 on (B*T, 1, H, W); max over the T frames; global average pool; Linear to 10; PyTorch's
           default init, uniform(+-1/sqrt(fan_in)), which is lamina's (src/nn/ops/conv.c, dense.c)), the Dataset above in a DataLoader (--train-workers, pin_memory,
           shuffle), normalization (x/255 - 0.5)/0.5 on the GPU, cross-entropy, Adam(lr), bf16 autocast; 'eager'
           (channels_last) and 'compile' (torch.compile(mode="max-autotune-no-cudagraphs") of the step and a CUDA
           graph of forward, backward and Adam captured by hand (bench/trainbench.py capture_graph), each batch
           copied into its static tensors; drop_last: the graph has one shape). Per epoch: seconds, clips/s and the
           loader wait (time in next(it), iter(loader)'s worker start-up and the H2D copy's launch) as a share of
           the epoch. Test accuracy over K clips a video (a DataLoader over the test videos, each item its K clips)
           after each of the last --acc-last epochs (default 3), outside the timing.
  ratio:   PyTorch's best median epoch / lamina streamed's (the issue: >= 2), and the test accuracy difference
           (the issue: within 1 point), also averaged over the last --acc-last epochs.
  NVDEC:   said whether this lamina offers --decode gpu for videos (lamina info --json, train --help); the host
           path is what is measured unless --lamina-decode gpu.
  /usr/bin/python3 bench/video_folder.py --lamina build/lamina [--n 2000] [--test 500] [--size 112] [--seconds 2:4]
      [--frames 16] [--frame-stride 2] [--batch 8] [--epochs 2] [--train-epochs 5] [--test-clips 5]
      [--workers 8,16] [--train-workers 16] [--ways eager,compile] [--parts data,train] [--data DIR] [--keep DIR]
      [--lamina-decode cpu|gpu] [--json FILE]
  On a machine without a GPU (a check of the script): --device cpu --n 40 --test 10 --size 32 --frames 4
      --batch 4 --epochs 1 --train-epochs 2 --workers 2 --train-workers 2 --ways eager --test-clips 2"""
import argparse, json, math, os, resource, shutil, subprocess, sys, tempfile, time, traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainbench import (LoaderEpoch, capture_graph, data_path_ratio, epoch_med, f, hw, last_json, med,  # noqa: E402
                        pct, run, say, torch_ways)

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--lamina", default=os.path.join(HERE, "..", "build", "lamina"))
ap.add_argument("--spec", default=os.path.join(HERE, "nets", "clip_max.txt"),
                help="lamina's net; PyTorch's twin is bench/clips.py's 'max' (clip_max.txt): keep them the same")
ap.add_argument("--data", help="a video folder made already (DIR/{train,test}/CLASS/*.mp4; else made)")
ap.add_argument("--keep", help="make the set here and keep it (else a temporary folder, removed at the end)")
ap.add_argument("--n", type=int, default=2000)
ap.add_argument("--test", type=int, default=500)
ap.add_argument("--size", default="112", help="the videos made: S or SxS (default 112)")
ap.add_argument("--seconds", default="2:4", help="the videos' lengths, MIN:MAX seconds (lamina data clips --seconds)")
ap.add_argument("--frames", type=int, default=16)
ap.add_argument("--frame-stride", type=int, default=2)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--epochs", type=int, default=2, help="epochs of the data path alone")
ap.add_argument("--train-epochs", type=int, default=5)
ap.add_argument("--test-clips", type=int, default=5, help="K clips a test video, softmax averaged (both sides)")
ap.add_argument("--lr", type=float, default=2e-3)
ap.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant",
                help="both sides: lamina --lr-schedule; PyTorch the same rate each step, lr (1 + cos(pi t / steps)) / 2 "
                     "(a cosine to 0 over the run calms the test accuracy's epoch-to-epoch swings)")
ap.add_argument("--seed", type=int, default=1, help="the training seed of both sides (lamina --seed, torch.manual_seed)")
ap.add_argument("--acc-last", type=int, default=3,
                help="also the test accuracy averaged over the last K epochs, both sides (one epoch's moves by points)")
ap.add_argument("--precision", default="bf16", choices=["bf16", "tf32", "fp32"])
ap.add_argument("--workers", default="8,16", help="DataLoader worker counts of the data path, e.g. 8,16")
ap.add_argument("--train-workers", type=int, default=16)
ap.add_argument("--cv-threads", type=int, default=1,
                help="FFmpeg threads of each cv2.VideoCapture (CAP_PROP_N_THREADS, where cv2 has it; 0: OpenCV's "
                     "default): one, as every DataLoader worker decodes its own clip")
ap.add_argument("--ways", default="eager,compile", help="PyTorch's ways of training (eager, compile)")
ap.add_argument("--parts", default="data,train")
ap.add_argument("--lamina-decode", default="cpu", choices=["cpu", "gpu"],
                help="gpu: also lamina train --decode gpu (NVDEC)")
ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: only to check the script")
ap.add_argument("--json")
a = ap.parse_args()
PARTS = a.parts.split(",")
T, S = a.frames, a.frame_stride
SPAN = (T - 1) * S + 1


SH, SW = hw(a.size)
out = dict(meta=dict(args=vars(a), date=time.strftime("%Y-%m-%d %H:%M:%S")), set={}, data={}, train={})


def save():
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


def cpu_s(children=True):
    """Host CPU seconds (user + system) so far of this process, and of its children that ended (a lamina run, the
    DataLoader's workers once an epoch is over): the cost of a clip whatever else the machine runs."""
    r = [resource.getrusage(resource.RUSAGE_SELF)] + ([resource.getrusage(resource.RUSAGE_CHILDREN)] if children else [])
    return sum(u.ru_utime + u.ru_stime for u in r)


def helps(sub, word):
    """Whether `lamina SUB --help` mentions word (an option this lamina may not have yet)."""
    try:
        p = subprocess.run([a.lamina, *sub, "--help"], capture_output=True, text=True)
        return word in p.stdout + p.stderr
    except OSError:
        return False


# ---- 1. the set: lamina's video folder
VIDEO_EXT = (".mp4", ".avi", ".mkv", ".webm", ".mov")


def listing(root, part):
    """The part's (path, class) pairs, the classes the training part's folder names sorted (as lamina's)."""
    classes = sorted(d for d in os.listdir(os.path.join(root, "train")) if os.path.isdir(os.path.join(root, "train", d)))
    pdir = os.path.join(root, part)
    if part == "test" and not os.path.isdir(pdir):
        pdir = os.path.join(root, "val")
    items = []
    for k, c in enumerate(classes):
        cdir = os.path.join(pdir, c)
        if os.path.isdir(cdir):
            items += [(os.path.join(cdir, n), k) for n in sorted(os.listdir(cdir)) if n.lower().endswith(VIDEO_EXT)]
    return classes, items


def make_set(root):
    vid = os.path.join(root, "videos")
    if os.path.isdir(os.path.join(vid, "test")):
        say(f"  {vid} is there already: kept")
        return vid
    shutil.rmtree(vid, ignore_errors=True)
    o, wall, err = run([a.lamina, "data", "clips", "--format", "mp4", "--out", vid, "--n", str(a.n), "--test",
                        str(a.test), "--size", f"{SH}x{SW}", "--seconds", a.seconds, "--seed", "1"])
    if o is None:
        raise SystemExit(f"lamina data clips --format mp4 failed (make the set elsewhere and give --data): {err}")
    out["set"]["make_s"] = wall
    say(f"    {o.strip().splitlines()[-1] if o.strip() else ''} ({wall:.1f} s)")
    return vid


root = a.keep or tempfile.mkdtemp(prefix="lamina-videofolder-")
os.makedirs(root, exist_ok=True)
say("== the set")
data = a.data or make_set(root)
CLASSES, TRAIN = listing(data, "train")
_, TEST = listing(data, "test")
K = len(CLASSES)
out["set"].update(dir=data, train=len(TRAIN), test=len(TEST), classes=K,
                  bytes=sum(os.path.getsize(p) for p, _ in TRAIN + TEST))
say(f"  {data}: {len(TRAIN)} training and {len(TEST)} test videos, {K} classes, "
    f"{out['set']['bytes'] / 1e6:.1f} MB; clips of {T} frames at stride {S} (a span of {SPAN}), batch {a.batch}")
dev_args = ["--device", "cpu"] if a.device == "cpu" else []

# what this lamina offers: --test-clips (else K = 1 on both sides), a GPU video decoder (NVDEC)
KC = a.test_clips
if KC != 1 and not helps(["train"], "--test-clips"):
    say(f"  NOTE: this lamina's train has no --test-clips: both sides test the middle clip (K = 1), not {KC} clips")
    KC = 1
out["meta"]["test_clips"] = KC
info = {}
o, _, _ = run([a.lamina, "info", "--json"])
try:
    info = last_json(o) if o else {}
except ValueError:
    pass
nvdec = bool(info.get("nvdec") or info.get("video_gpu")) or helps(["train"], "NVDEC")
out["meta"].update(lamina_video=info.get("video"), lamina_nvdec=nvdec)
say(f"  lamina reads video files: {info.get('video')}; a GPU video decoder (--decode gpu, NVDEC) in this lamina: "
    f"{'yes' if nvdec else 'no (the host path is what is measured)'}")

# ---- PyTorch's side: the Dataset (OpenCV), the DataLoader, the net
import cv2  # noqa: E402
import torch, torch.nn as nn, torch.nn.functional as F  # noqa: E402

cuda = a.device == "cuda"
dev = torch.device(a.device)
out["meta"].update(torch=torch.__version__, cv2=cv2.__version__, gpu=torch.cuda.get_device_name(0) if cuda else "cpu",
                   cv2_threads_prop=hasattr(cv2, "CAP_PROP_N_THREADS"))
say(f"PyTorch {torch.__version__}, OpenCV {cv2.__version__} (CAP_PROP_N_THREADS: "
    f"{'--cv-threads ' + str(a.cv_threads) if hasattr(cv2, 'CAP_PROP_N_THREADS') else 'absent, its default'}), "
    f"{out['meta']['gpu']}")
_cap = cv2.VideoCapture(TRAIN[0][0], cv2.CAP_FFMPEG)  # the set's size: its first video's, as lamina's
SH, SW = int(_cap.get(cv2.CAP_PROP_FRAME_HEIGHT)), int(_cap.get(cv2.CAP_PROP_FRAME_WIDTH))
_cap.release()
out["set"]["size"] = [SH, SW]
if cuda:
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.precision == "tf32"


def sync():
    if cuda:
        torch.cuda.synchronize()


def test_starts(last, k):
    """The starts of k clips evenly spaced over [0, last] (the middle where k = 1), rounded half up as lamina's."""
    if k == 1:
        return [last // 2]
    return [int(math.floor(j * last / (k - 1) + 0.5)) for j in range(k)]


def worker_init(_):
    cv2.setNumThreads(1)  # cvtColor in 16 processes: no thread pool each


class Clips(torch.utils.data.Dataset):
    """Videos as clips read with OpenCV: training, one clip at a start drawn uniformly in [0, last] (a new draw each
    time the item is asked for: torch's worker seeds differ by epoch); test, the video's k clips (k, T, 1, H, W)."""

    def __init__(self, items, train, k=1):
        self.items, self.train, self.k = items, train, k

    def __len__(self):
        return len(self.items)

    def open(self, path):
        if a.cv_threads and hasattr(cv2, "CAP_PROP_N_THREADS"):
            cap = cv2.VideoCapture(path, cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, a.cv_threads])
        else:
            cap = cv2.VideoCapture(path, cv2.CAP_FFMPEG)
        if not cap.isOpened():
            raise IOError(f"{path}: OpenCV cannot open it")
        return cap

    def clip(self, cap, path, start, fresh=True):
        """The clip from start: seek (not at frame 0 of a video just opened), then the span's frames, every S-th kept
        (grey), the last repeated if the video ends first."""
        if (start or not fresh) and not cap.set(cv2.CAP_PROP_POS_FRAMES, start):
            raise IOError(f"{path}: OpenCV cannot seek to frame {start}")
        x = np.empty((T, 1, SH, SW), np.uint8)
        got = 0
        for j in range(SPAN):
            if j % S:
                if not cap.grab():  # decoded, not converted: skipped
                    break
                continue
            ok, fr = cap.read()
            if not ok:
                break
            if fr.shape[:2] != (SH, SW):
                raise IOError(f"{path}: frames of {fr.shape[1]}x{fr.shape[0]}, not {SW}x{SH}")
            x[got, 0] = cv2.cvtColor(fr, cv2.COLOR_BGR2GRAY)
            got += 1
        if not got:
            raise IOError(f"{path}: no frame read from frame {start} on")
        x[got:] = x[got - 1]
        return x

    def __getitem__(self, i):
        path, y = self.items[i]
        cap = self.open(path)
        try:
            n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
            last = max(n - SPAN, 0)
            if self.train:
                x = self.clip(cap, path, int(torch.randint(0, last + 1, ()).item()))  # torch: seeded per worker
                return torch.from_numpy(x), y
            xs = []
            for j, s in enumerate(test_starts(last, self.k)):  # one open, a seek a clip
                xs.append(self.clip(cap, path, s, fresh=j == 0))
            return torch.from_numpy(np.stack(xs)), y
        finally:
            cap.release()


def seek_check(items, k=3):
    """OpenCV's seek is frame-exact on these files: a few videos' clips read by seeking equal the same frames read
    from the start, one after another (a reader that seeks to the wrong frame would bias PyTorch's side)."""
    ds = Clips([], False)
    for path, _ in items[:: max(1, len(items) // k)][:k]:
        cap = ds.open(path)
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        every = []
        while True:
            ok, fr = cap.read()
            if not ok:
                break
            every.append(cv2.cvtColor(fr, cv2.COLOR_BGR2GRAY))
        cap.release()
        if len(every) != n:
            say(f"  NOTE: {path}: CAP_PROP_FRAME_COUNT says {n} frames, {len(every)} were read")
        last = max(n - SPAN, 0)

        def want(s):
            return np.stack([every[min(s + j * S, len(every) - 1)] for j in range(T)])[:, None]

        for s in sorted({last, last // 2, min(1, last)}):
            cap = ds.open(path)
            got = ds.clip(cap, path, s)
            cap.release()
            if not np.array_equal(got, want(s)):
                raise SystemExit(f"{path}: the clip read by seeking to frame {s} differs from frames {s}, {s + S}, ... "
                                 "read from the start: OpenCV's seek is not frame-exact here")
        # the test item: 5 clips from one open, each seek from where the clip before ended (backwards where they overlap)
        got = Clips([(path, 0)], False, 5)[0][0].numpy()
        if not np.array_equal(got, np.stack([want(s) for s in test_starts(last, 5)])):
            raise SystemExit(f"{path}: the test clips (starts {test_starts(last, 5)}) differ from the frames read from "
                             "the start")
    say(f"  OpenCV's seek checked: clips from {k} videos (at 3 starts, and a test item's 5) equal the frames read "
        "from the start")


def loader(ds, workers, shuffle=True, drop_last=False, batch=None):
    return torch.utils.data.DataLoader(ds, batch_size=batch or a.batch, shuffle=shuffle, num_workers=workers,
                                       pin_memory=cuda, persistent_workers=False, drop_last=drop_last,
                                       worker_init_fn=worker_init if workers else None,
                                       multiprocessing_context="fork" if workers else None)  # fork: not the script again


seek_check(TRAIN)

# ---- 2. the data path alone
if "data" in PARTS:
    say(f"== the data path alone: uint8 clips of {T}x{SH}x{SW} (stride {S}) in batches of {a.batch} "
        f"delivered to the {a.device}, {a.epochs} epochs")
    D = out["data"]
    c0 = cpu_s()
    o, wall, err = run([a.lamina, "bench", "data", "--data", data, "--frames", str(T), "--frame-stride", str(S),
                        "--batch", str(a.batch), "--epochs", str(a.epochs), "--json", *dev_args])
    lamina_cpu = cpu_s() - c0
    L = dict(status="failed", error=err, wall_s=wall)
    if o is not None:
        try:
            r = last_json(o)
            eps = [e for e in r.get("epochs", []) if isinstance(e, dict)]
            cps = r.get("images_per_s")
            L = dict(status="ok", clips_per_s=cps, frames_per_s=cps * T if cps else None, wall_s=wall, epochs=eps,
                     cpu_ms_per_clip=1e3 * lamina_cpu / (len(TRAIN) * a.epochs),
                     wait_share=med([e["loader_wait_ms"] / (1000 * e["seconds"]) for e in eps if e.get("seconds")]),
                     raw=r)
            for i, e in enumerate(eps):
                say(f"    lamina epoch {i + 1}: {f(e.get('seconds'))} s  {f(e.get('images_per_s'), '.0f')} clips/s  "
                    f"the loop waited {f(e.get('loader_wait_ms'), '.0f')} ms for the decoder")
            say(f"  lamina bench data: {f(cps, '.0f')} clips/s, {f(L['frames_per_s'], '.0f')} frames/s (median epoch); "
                f"the loop waited for the decoder {pct(L['wait_share'], '.1f')}% of the epoch; host CPU "
                f"{L['cpu_ms_per_clip']:.2f} ms a clip (the whole run's, its probe of the files included)")
            if r.get("frames") not in (None, T):
                say(f"    NOTE: lamina's clips are {r.get('frames')} frames, not {T}")
        except Exception as ex:
            L = dict(status="unparsed", error=repr(ex), stdout=o[-2000:], wall_s=wall)
            say(f"    lamina bench data: could not read its JSON ({ex!r}): {o[-500:]}")
    D["lamina"] = L
    D["torch"] = {}
    for w in [int(x) for x in a.workers.split(",")]:
        key = f"OpenCV, {w} workers"
        try:
            torch.manual_seed(1)
            ds = Clips(TRAIN, True)
            secs, cps = [], []
            c0 = cpu_s()
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
                cps.append(n / secs[-1])
                del dl
            assert tuple(x.shape[1:]) == (T, 1, SH, SW) and x.dtype == torch.uint8, f"a batch of {tuple(x.shape)}"
            r = dict(status="ok", seconds=secs, clips_per_s_epochs=cps, clips_per_s=med(cps),
                     frames_per_s=med(cps) * T, cpu_ms_per_clip=1e3 * (cpu_s() - c0) / (len(TRAIN) * a.epochs))
            say(f"  PyTorch DataLoader {key:18s}: epochs " + ", ".join(f"{s:.3f} s" for s in secs) +
                f"; median {r['clips_per_s']:.0f} clips/s, {r['frames_per_s']:.0f} frames/s (delivered; "
                f"{r['clips_per_s'] * SPAN:.0f} read after the seek at most); host CPU {r['cpu_ms_per_clip']:.2f} ms a "
                f"clip (the workers' and this process's)")
        except Exception as ex:
            traceback.print_exc()
            r = dict(status="failed", note=repr(ex)[:500])
            say(f"  PyTorch DataLoader {key}: failed: {ex!r}")
        D["torch"][key] = r
    data_path_ratio(D, L, "clips_per_s", "clips/s")
    save()


# ---- 3. training the clip net
def norm(u8):  # (B, T, 1, H, W) uint8 -> float, as lamina
    return (u8.float() / 255 - 0.5) / 0.5


def block(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


class Max(nn.Module):
    """bench/nets/clip_max.txt (bench/clips.py's 'max'): every block per frame, the max over the frames after the
    last, global average pool, the classes."""

    def __init__(self, classes):
        super().__init__()
        self.frame = nn.Sequential(*block(1, 32), nn.MaxPool2d(2), *block(32, 64), nn.MaxPool2d(2), *block(64, 64),
                                   nn.MaxPool2d(2), *block(64, 128))
        self.clip = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))

    def forward(self, x):  # x (B, T, 1, H, W) float
        B, t = x.shape[:2]
        fr = self.frame(x.reshape(B * t, *x.shape[2:]).contiguous(memory_format=torch.channels_last))
        return self.clip(fr.reshape(B, t, *fr.shape[1:]).amax(1))


def test_acc(net, ac):
    """Accuracy per test video: the softmax of its KC clips averaged; the net back in train mode after."""
    net.eval()
    right = 0
    with torch.no_grad(), ac:
        for xb, yb in loader(Clips(TEST, False, KC), a.train_workers, shuffle=False):
            B = xb.shape[0]
            logits = net(norm(xb.to(dev, non_blocking=True).reshape(B * KC, T, 1, SH, SW)))
            p = logits.float().softmax(1).reshape(B, KC, -1).mean(1)
            right += (p.argmax(1).cpu() == yb).sum().item()
    net.train()
    return right / len(TEST)


def lamina_clips(decode):
    """lamina train on the video folder (streamed; --decode gpu: the NVDEC hook): its epochs as it reports them."""
    E = a.train_epochs
    cmd = [a.lamina, "train", "--data", data, "--model", a.spec, "--frames", str(T), "--frame-stride", str(S),
           "--cache", "", "--epochs", str(E), "--batch", str(a.batch), "--opt", "adam", "--lr", repr(a.lr), "--seed",
           str(a.seed), "--precision", a.precision, "--lr-schedule", a.lr_schedule, *(["--test-clips", str(KC)] if KC != 1 else []),
           *(["--decode", "gpu"] if decode == "gpu" else []), "--no-progress", "--json", *dev_args]
    o, wall, err = run(cmd)
    if o is None:
        return dict(status="failed", error=err, wall_s=wall)
    try:
        r = last_json(o)
        rows = []
        for i, e in enumerate(r["epochs"]):
            s, dw = e.get("seconds"), e.get("data_wait_ms")
            rows.append(dict(epoch=e.get("epoch", i + 1), seconds=s, clips_per_s=e.get("images_per_s"),
                             data_wait_ms=dw, loader_wait_ms=e.get("loader_wait_ms"),
                             stream_buffers=e.get("stream_buffers"), test_acc=e.get("test_acc"),
                             train_loss=e.get("train_loss"),
                             wait_share=dw / (1000 * s) if dw is not None and s else None))
            q = rows[-1]
            say(f"    epoch {q['epoch']}: loss {f(q['train_loss'], '.4f')}  test acc {pct(q['test_acc'])}%  {f(s)} s  "
                f"{f(q['clips_per_s'], '.0f')} clips/s  data wait {f(dw, '.0f')} ms ({pct(q['wait_share'], '.1f')}%), "
                f"loader wait {f(q['loader_wait_ms'], '.0f')} ms, buffers {q['stream_buffers']}")
        times = [q["seconds"] for q in rows if q["seconds"] is not None]
        accs = [q["test_acc"] for q in rows if q["test_acc"] is not None]
        last = accs[-max(a.acc_last, 1):]
        cps = epoch_med([q["clips_per_s"] for q in rows if q["clips_per_s"] is not None])
        return dict(status="ok", wall_s=wall, epochs=rows, epoch_times=times, epoch_s=epoch_med(times),
                    clips_per_s=cps, frames_per_s=cps * T if cps else None,
                    wait_share=epoch_med([q["wait_share"] for q in rows if q["wait_share"] is not None]),
                    acc=r.get("test_acc", accs[-1] if accs else None), acc_last=last,
                    acc_last_mean=float(np.mean(last)) if last else None,
                    streamed=(r.get("image_folder") or {}).get("streamed"),
                    peak_bytes=(r.get("memory") or {}).get("peak"), device=r.get("device_name"))
    except Exception as ex:
        say(f"    could not read lamina's JSON: {ex!r}")
        return dict(status="unparsed", error=repr(ex), stdout=o[-2000:], wall_s=wall)


def torch_run(way):
    """The clip net trained by PyTorch from the DataLoader; per epoch seconds, clips/s, the loader-wait share."""
    if way == "compile" and not cuda:
        raise RuntimeError("'compile' (torch.compile + a CUDA graph) needs CUDA")
    torch.manual_seed(a.seed)
    net = Max(K).to(dev).to(memory_format=torch.channels_last)
    cosine = a.lr_schedule == "cosine"
    # the captured step reads its rate from a tensor filled before each replay (as bench/trainbench.py's torch_train)
    lr_t = torch.tensor(a.lr, dtype=torch.float32, device=dev) if cosine and way == "compile" else a.lr
    opt = torch.optim.Adam(net.parameters(), lr=lr_t, capturable=(way == "compile"))
    ac = torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    B = a.batch
    ds = Clips(TRAIN, True)
    dl = loader(ds, a.train_workers, drop_last=way == "compile")
    total, t_step = a.train_epochs * len(dl), 0

    def set_rate():  # lamina's cosine (src/nn/schedule.c, no warm-up): the rate of step t of the run
        r = a.lr * (1 + math.cos(math.pi * min(t_step, total - 1) / total)) / 2
        if torch.is_tensor(lr_t):
            lr_t.fill_(r)
        else:
            for g in opt.param_groups:
                g["lr"] = r

    def step_of(model, x, y):
        def step():
            with ac:
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
        return step

    if way == "compile":
        xs = torch.empty(B, T, 1, SH, SW, device=dev)
        ys = torch.empty(B, dtype=torch.int64, device=dev)
        first = [ds[i] for i in range(min(B, len(ds)))]
        xs.copy_(norm(torch.stack([t[0] for t in first]).to(dev))), ys.copy_(torch.tensor([t[1] for t in first]))
        graph = capture_graph(step_of(torch.compile(net, mode="max-autotune-no-cudagraphs"), xs, ys))
    if cuda and way != "compile":  # capture_graph reset it before it captured
        torch.cuda.reset_peak_memory_stats()
    times, cps, waits, accs = [], [], [], []
    for ep in range(a.train_epochs):
        net.train()
        sync()
        t0 = time.perf_counter()
        le = LoaderEpoch(dl, dev)
        for xb, yb in le:
            if cosine:
                set_rate()
                t_step += 1
            if way == "compile":
                xs.copy_(norm(xb)), ys.copy_(yb)
                graph.replay()
            else:
                step_of(net, norm(xb), yb.long())()
        sync()
        times.append(time.perf_counter() - t0)
        cps.append(le.n / times[-1])
        waits.append(le.wait / times[-1])
        le.close()
        say(f"    {way} epoch {ep + 1}: {times[-1]:.3f} s  {cps[-1]:.0f} clips/s  loader wait {100 * waits[-1]:.1f}%")
        if ep >= a.train_epochs - max(a.acc_last, 1):  # after the timed epoch, outside it
            accs.append(test_acc(net, ac))
            say(f"    {way} epoch {ep + 1}: test acc ({KC} clips a video) {100 * accs[-1]:.2f}%")
    return dict(status="ok", epoch_times=times, clips_per_s_epochs=cps, wait_shares=waits,
                epoch_s=epoch_med(times), clips_per_s=epoch_med(cps), frames_per_s=epoch_med(cps) * T,
                wait_share=epoch_med(waits), acc=accs[-1], acc_last=accs, acc_last_mean=float(np.mean(accs)),
                drop_last=way == "compile", peak_bytes=torch.cuda.max_memory_allocated() if cuda else 0)


if "train" in PARTS:
    TR = out["train"]
    say(f"== training {a.spec} on {SH}x{SW} clips of {T} frames: {a.train_epochs} epochs, batch {a.batch}, Adam "
        f"{a.lr}, {a.precision}, test over {KC} clip(s) a video")
    TR["lamina"] = {}
    for name, decode in (("streamed", "cpu"), ("streamed nvdec", "gpu")):
        if decode == "gpu" and a.lamina_decode != "gpu":
            continue
        if decode == "gpu" and not nvdec:  # --decode gpu is JPEG's there: the run would time the host path again
            say(f"== lamina {name}: not run, this lamina has no GPU video decoder (its --decode gpu is for JPEG)")
            TR["lamina"][name] = dict(status="unavailable")
            continue
        say(f"== lamina {name}")
        TR["lamina"][name] = lamina_clips(decode)
        save()
    TR["torch"] = torch_ways(a.ways, torch_run, lambda r: f"test acc {100 * r['acc']:.2f}%, "
                             f"{r['clips_per_s']:.0f} clips/s, loader wait {100 * r['wait_share']:.1f}%")
    save()
    say(f"\n== training from the video folder: lamina vs PyTorch (same net, files, epochs; {out['meta']['gpu']}; "
        f"test: {KC} clip(s) a video)")
    say(f"{'':24s}{'epoch s':>9s}{'clips/s':>9s}{'frames/s':>10s}{'wait %':>8s}{'test acc':>10s}{'last ' + str(a.acc_last):>9s}")
    rows = [(f"lamina {k}", v) for k, v in TR["lamina"].items()] + [(f"PyTorch {k}", v) for k, v in TR["torch"].items()]
    for name, r in rows:
        if r.get("status") != "ok":
            say(f"{name:24s}  {r.get('status')}")
            continue
        say(f"{name:24s}{f(r['epoch_s']):>9s}{f(r['clips_per_s'], '.0f'):>9s}{f(r['frames_per_s'], '.0f'):>10s}"
            f"{pct(r['wait_share'], '.1f'):>8s}{pct(r['acc']):>10s}{pct(r['acc_last_mean']):>9s}")
    say("(wait %: lamina, the time the GPU waited for batch copies (data_wait_ms) / epoch; PyTorch, the time the loop "
        "waited for the DataLoader / epoch)")
    Ls = TR["lamina"].get("streamed", {})
    ok = [w for w, r in TR["torch"].items() if r.get("status") == "ok"]
    if ok:
        best = min(ok, key=lambda w: TR["torch"][w]["epoch_s"])
        TR["torch_best"] = best
        Tb = TR["torch"][best]
        if Ls.get("status") == "ok" and Ls["epoch_s"]:
            TR["torch_over_lamina"] = Tb["epoch_s"] / Ls["epoch_s"]
            say(f"PyTorch's best ({best}) epoch / lamina streamed epoch: {TR['torch_over_lamina']:.2f}x (the issue: >= 2)")
            if Ls.get("acc") is not None:
                TR["acc_gap_points"] = 100 * (Ls["acc"] - Tb["acc"])
                say(f"test accuracy: lamina streamed {100 * Ls['acc']:.2f}%, PyTorch {best} {100 * Tb['acc']:.2f}%: "
                    f"{TR['acc_gap_points']:+.2f} points (the issue: within 1)")
            if Ls.get("acc_last_mean") is not None:
                TR["acc_last_gap_points"] = 100 * (Ls["acc_last_mean"] - Tb["acc_last_mean"])
                say(f"test accuracy over the last {len(Ls['acc_last'])} epochs: lamina streamed "
                    f"{100 * Ls['acc_last_mean']:.2f}%, PyTorch {best} {100 * Tb['acc_last_mean']:.2f}%: "
                    f"{TR['acc_last_gap_points']:+.2f} points")
    Ln = TR["lamina"].get("streamed nvdec", {})
    if Ln.get("status") == "ok" and Ls.get("status") == "ok" and Ln["epoch_s"]:
        TR["host_over_nvdec"] = Ls["epoch_s"] / Ln["epoch_s"]
        say(f"lamina host decode / NVDEC epoch: {TR['host_over_nvdec']:.2f}x")
    elif a.lamina_decode == "gpu":
        say(f"lamina --decode gpu (NVDEC): {Ln.get('status', 'not run')}")
    else:
        say("NVDEC: not measured (" + ("this lamina has no GPU video decoder" if not nvdec else
                                       "give --lamina-decode gpu") + "); the host path above")
save()
if not a.keep and not a.data:
    shutil.rmtree(root, ignore_errors=True)
