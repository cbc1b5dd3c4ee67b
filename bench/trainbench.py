"""What bench/clips.py, bench/segment.py, bench/seg_folder.py and bench/video_folder.py share: lamina's training run read from its --json, IDX files, a
DataLoader epoch timed for the loop's wait, and PyTorch's two ways of training the same net on the same uint8 data resident on the GPU — 'eager' (channels_last;
bf16: autocast) and 'compile' (torch.compile(mode="max-autotune-no-cudagraphs") of the loss step, its forward,
backward and Adam in one CUDA graph captured by hand after warm-up, each batch gathered into static buffers), its
fastest way. Epoch time is the median of epochs 2..E; the batch count per epoch is whole (the graph has one shape)."""
import json, statistics, subprocess, time

import numpy as np


def say(*x):
    print(*x, flush=True)


# ---- the folder benches' (seg_folder.py, video_folder.py) small helpers

def hw(s):
    h, _, w = s.lower().partition("x")
    return int(h), int(w or h)


def run(cmd):
    """cmd's stdout and wall seconds; None (its stderr said) where it failed or could not start."""
    say(f"  $ {' '.join(c if c else repr(c) for c in cmd)}")
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as ex:
        say(f"    could not start: {ex}")
        return None, 0.0, str(ex)
    wall = time.perf_counter() - t
    if p.returncode:
        say(f"    failed (exit {p.returncode}): {(p.stderr or p.stdout)[-1500:].strip()}")
        return None, wall, (p.stderr or p.stdout)[-2000:]
    return p.stdout, wall, None


def last_json(text):
    """The last JSON object in text: a line that is one, else the whole text."""
    for line in reversed(text.splitlines()):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return json.loads(text)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def epoch_med(xs):  # the median of epochs 2..E, the last where E <= 2
    return (xs[-1] if len(xs) <= 2 else statistics.median(xs[1:])) if xs else None


def f(x, fmt=".3f"):
    return "n/a" if x is None else format(x, fmt)


def pct(x, fmt=".2f"):
    return f(None if x is None else 100 * x, fmt)


def idx(path):
    """An IDX file (plain) as a NumPy array of its shape."""
    with open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def lamina_train(lamina, data, spec, epochs, batch, lr, precision, extra=()):
    """lamina train ... --json; the epochs' test accuracies and seconds, the device peak."""
    cmd = [lamina, "train", "--data", data, "--model", spec, "--epochs", str(epochs), "--batch", str(batch), "--opt",
           "adam", "--lr", repr(lr), "--seed", "1", "--precision", precision, "--no-progress", "--json", *extra]
    say(f"  $ {' '.join(cmd)}")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        say("    lamina failed:", p.stderr[-2000:])
        return dict(status="failed", stderr=p.stderr[-2000:])
    r = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    times = [e["seconds"] for e in r["epochs"]]
    for e in r["epochs"]:
        say(f"    epoch {e['epoch']}: loss {e['train_loss']:.4f} test acc {100 * e['test_acc']:.2f}%  {e['seconds']:.3f} s")
    return dict(status="ok", acc=r["test_acc"], accs=[e["test_acc"] for e in r["epochs"]], epoch_times=times,
                epoch_s=statistics.median(times[1:] or times), peak_bytes=r.get("memory", {}).get("peak"),
                graph=r.get("graph"), params=r.get("params"))


def parse_augment(s):
    """--augment's value, as lamina's: 'none' or comma-separated crop:P and flip -> (pad, flip)."""
    pad, flip = 0, False
    for part in ([] if s in (None, "none") else s.split(",")):
        if part == "flip":
            flip = True
        elif part.startswith("crop:") and part[5:].isdigit():
            pad = int(part[5:])
        else:
            raise SystemExit(f"--augment: {part!r} is not crop:P or flip")
    return pad, flip


def crop_flip(batches, pad, flip):
    """torchvision's RandomCrop(padding=pad) then RandomHorizontalFlip, per sample, on the GPU, as lamina --augment:
    each (tensor (B, M, H, W), fill) of batches moved by the same draws (a sample's frames and its mask alike), fill
    in the padding (0 for pixels, 255 = ignored for labels). Returns the moved tensors."""
    import torch, torch.nn.functional as F

    t0 = batches[0][0]
    B, H, W, dev = t0.shape[0], t0.shape[-2], t0.shape[-1], t0.device
    rows = torch.randint(0, 2 * pad + 1, (B, 1), device=dev) + torch.arange(H, device=dev)  # in the padded image
    cols = torch.randint(0, 2 * pad + 1, (B, 1), device=dev) + torch.arange(W, device=dev)
    if flip:  # the crop mirrored: output column x shows the crop's W-1-x
        cols = torch.where(torch.rand(B, 1, device=dev) < 0.5, cols.flip(1), cols)
    b = torch.arange(B, device=dev)[:, None, None]
    out = []
    for t, fill in batches:
        tp = F.pad(t, (pad, pad, pad, pad), value=fill) if pad else t
        out.append(tp[b, :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2))  # (B, H, W, M) -> (B, M, H, W)
    return out


def torch_ways(ways, run, describe):
    """run(way) for each of PyTorch's ways (comma-separated), a failure recorded rather than raised, each summed up
    in a line (describe(result): its accuracy figures); {way: result}."""
    import traceback

    import torch

    res = {}
    for way in ways.split(","):
        say(f"== PyTorch {way}")
        try:
            res[way] = r = run(way)
            say(f"  PyTorch {way}: {describe(r)}, median epoch {r['epoch_s']:.3f} s, peak {r['peak_bytes'] / 1e6:.0f} MB")
        except Exception as ex:
            traceback.print_exc()
            res[way] = dict(status="failed", note=repr(ex)[:500])
        torch.cuda.empty_cache()
    return res


def cosine_lr(lr, t, steps, epochs, warmup):
    """lamina's --lr-schedule cosine --warmup W (src/nn/schedule.c) at step t of the run: a linear warm-up over W
    epochs, then lr (1 + cos(pi (t - W) / (T - W))) / 2 to 0 at the last step, stepped every batch."""
    import math
    T = epochs * steps
    t = min(max(t, 0), T - 1)
    W = min(int(math.floor(warmup * steps + 0.5)), T)
    r = lr * (1 + math.cos(math.pi * (t - W) / (T - W))) / 2 if t >= W else lr
    return r * (t + 1) / W if t < W else r


def unet(classes):
    """The U-Net of bench/nets/unet.txt in PyTorch, 1 channel in, `classes` out: conv-bn-relu twice a level, max-pool
    down, a 2x2 transposed conv up, the skip concatenated after it (as lamina's concat: the current tensor's channels,
    then the skip's), a 1x1 conv to the classes."""
    import torch, torch.nn as nn, torch.nn.functional as F

    def two(cin, cout):  # conv, bn, relu, twice
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1, self.e2, self.mid = two(1, 32), two(32, 64), two(64, 128)
            self.up2, self.d2 = nn.ConvTranspose2d(128, 64, 2, stride=2), two(128, 64)
            self.up1, self.d1 = nn.ConvTranspose2d(64, 32, 2, stride=2), two(64, 32)
            self.head = nn.Conv2d(32, classes, 1)

        def forward(self, x):
            e1 = self.e1(x)
            e2 = self.e2(F.max_pool2d(e1, 2))
            m = self.mid(F.max_pool2d(e2, 2))
            d2 = self.d2(torch.cat((self.up2(m), e2), 1))
            d1 = self.d1(torch.cat((self.up1(d2), e1), 1))
            return self.head(d1)

    return UNet()


def data_path_ratio(D, L, rate, unit):
    """The data path's verdict: PyTorch's best loader of D["torch"] (the highest D["torch"][k][rate] among those that
    ran) in D["torch_best"], and lamina's rate L[rate] over it in D["ratio"], said in unit ("clips/s")."""
    ok = {k: v for k, v in D["torch"].items() if v.get("status") == "ok"}
    if not ok:
        return
    best = max(ok, key=lambda k: ok[k][rate])
    D["torch_best"] = best
    if L.get("status") == "ok" and L.get(rate):
        D["ratio"] = L[rate] / ok[best][rate]
        say(f"  data path: lamina {L[rate]:.0f} {unit}, PyTorch's best ({best}) {ok[best][rate]:.0f} {unit}: "
            f"lamina / PyTorch {D['ratio']:.2f}x")


class LoaderEpoch:
    """One epoch of a DataLoader's batches, each moved to dev (non-blocking), and the time the training loop waited for
    them (wait, seconds): iter() (the workers start there: persistent_workers=False), each next() and the copy's
    launch; n counts the samples. The iterator is kept until close(), so that its workers are shut down outside the
    epoch's timing."""

    def __init__(self, dl, dev):
        self.dl, self.dev, self.wait, self.n, self.it = dl, dev, 0.0, 0, None

    def __iter__(self):
        t0 = time.perf_counter()
        self.it = iter(self.dl)
        self.wait += time.perf_counter() - t0
        while True:
            tw = time.perf_counter()
            try:
                xb, yb = next(self.it)
            except StopIteration:
                self.wait += time.perf_counter() - tw
                return
            xb, yb = xb.to(self.dev, non_blocking=True), yb.to(self.dev, non_blocking=True)
            self.wait += time.perf_counter() - tw
            self.n += xb.shape[0]
            yield xb, yb

    def close(self):
        self.it = None


def capture_graph(step):
    """A CUDA graph of step() (a compiled training step on static tensors): three warm-up runs on a side stream
    (compiling and autotuning), then the capture. The peak-memory counter is reset between the two, so the caller's
    peak covers the capture: the step's activations live in the graph's private pool, allocated while it is captured
    and never again (a reset after the capture would leave them out, as lamina's peak does not), and autotuning's
    scratch stays out."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def torch_train(way, net, X, Y, norm, epochs, batch, lr, precision, evaluate, loss_fn=None, augment=None,
                schedule=None):
    """Trains net (on the GPU, channels_last) on uint8 X, labels Y (both on the GPU) for epochs; norm(u8) gives the
    float batch; evaluate(net, autocast) -> dict with 'acc' (and whatever else) after each epoch. augment(x, y) ->
    (x, y), if given, moves each uint8 batch before norm (outside the captured step, as a PyTorch user's transform).
    schedule: None (a constant rate) or ("cosine", warmup epochs), as lamina's; the rate is a tensor the captured
    step reads, filled before each step. precision "fp16" is PyTorch's fp16 recipe: float16 autocast and
    torch.amp.GradScaler, with a fused Adam that takes the scale and the found-inf flag on the device (so the step
    needs no host synchronisation and can be captured; GradScaler.update is device ops too)."""
    import torch, torch.nn.functional as F

    dev = X.device
    loss_fn = loss_fn or F.cross_entropy
    fp16 = precision == "fp16"
    lr_t = torch.tensor(lr, dtype=torch.float32, device=dev) if schedule and way == "compile" else lr
    opt = torch.optim.Adam(net.parameters(), lr=lr_t, capturable=(way == "compile"), **({"fused": True} if fp16 else {}))
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    ac = torch.autocast("cuda", dtype=half or torch.bfloat16, enabled=half is not None)
    scaler = torch.amp.GradScaler("cuda", enabled=fp16)
    N, B = X.shape[0], batch
    xs = torch.empty(norm(X[:B]).shape, device=dev)  # contiguous, whatever norm's strides
    ys = torch.empty(Y[:B].shape, dtype=Y.dtype, device=dev)

    def make_step(model):  # forward, backward and Adam on the static batch
        def step():
            with ac:
                loss = loss_fn(model(xs), ys)
            scaler.scale(loss).backward()  # without fp16 the scaler is off: the loss as it is, a plain opt.step()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=False)
        return step

    fn = make_step(net)
    if way == "compile":
        step_c = make_step(torch.compile(net, mode="max-autotune-no-cudagraphs"))
        xs.copy_(norm(X[:B])), ys.copy_(Y[:B])
        fn = capture_graph(step_c).replay  # resets the peak before it captures
    else:
        torch.cuda.reset_peak_memory_stats()
    times, evals = [], []
    steps = N // B
    for ep in range(epochs):
        net.train()
        perm = torch.randperm(N, device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, N - B + 1, B):
            j = perm[i:i + B]
            xb, yb = augment(X[j], Y[j]) if augment else (X[j], Y[j])
            xs.copy_(norm(xb)), ys.copy_(yb)
            if schedule:
                r = cosine_lr(lr, ep * steps + i // B, steps, epochs, schedule[1])
                if way == "compile": lr_t.fill_(r)
                else: opt.param_groups[0]["lr"] = r
            fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        net.eval()
        with torch.no_grad():
            evals.append(evaluate(net, ac))
        say(f"    {way} epoch {ep + 1}: " + "  ".join(f"{k} {100 * v:.2f}%" for k, v in evals[-1].items()) +
            f"  {times[-1]:.3f} s")
    out = dict(status="ok", evals=evals, epoch_times=times, epoch_s=statistics.median(times[1:] or times),
               peak_bytes=torch.cuda.max_memory_allocated())
    if fp16:
        out["scale"] = float(scaler.get_scale())
    out.update(evals[-1])
    out["accs"] = [e["acc"] for e in evals]
    return out
