#!/usr/bin/env python3
"""Accuracy check: the graph-core issue's `res` net adapted to 28x28x1 (bench/nets/res28.txt) trained on
Fashion-MNIST by lamina and by PyTorch (the same net written out below), same optimizer, hyper-parameters,
normalization and epochs, for seeds 1..S. Done when the mean test accuracies (S = 3 seeds, 10 epochs) are
within 0.3 points of each other.

lamina:  LAMINA_DATA_DIR=<parent of --data> lamina train --data fashion-mnist --model bench/nets/res28.txt
         --epochs E --batch B --opt adam --lr LR --seed s --precision P --device D --no-progress --json
         (pixels (x/255 - 0.5)/0.5, its default; a partial last batch each epoch; test accuracy after each epoch
         with the batch-norm running statistics; the figure compared is the one after the last epoch).
PyTorch: the net as nn.Modules (Conv2d bias=False, BatchNorm2d defaults, ReLU, MaxPool2d(2),
         AdaptiveAvgPool2d(1), Linear; PyTorch's default initialization, which lamina's follows), Adam(lr, betas
         (0.9, 0.999), eps 1e-8), cross-entropy; the data resident on the device as uint8, each batch gathered and
         normalized there as (x/255 - 0.5)/0.5; torch.manual_seed(s) before the model is built, the order
         torch.randperm each epoch, ceil(N/B) steps with a partial last batch (as lamina); eager, cuDNN
         benchmark on; test accuracy in eval() mode after every epoch (outside the timed loop; the last one is
         the figure compared).
--schedule cosine: both sides anneal the rate per step as lamina's `--lr-schedule cosine` (lr (1 + cos(pi t / T)) / 2
         over the run's T steps; PyTorch through LambdaLR stepped after each optimizer step), so the last epoch ends at
         a settled model instead of one of a constant rate's swings (1-2 points from epoch to epoch).
--precision tf32 (default): lamina --precision tf32, PyTorch allow_tf32 on for cuBLAS and cuDNN; fp32: both off.
On --device cpu, tf32 (CUDA only) falls back to fp32 on both sides.

  /usr/bin/python3 bench/res_accuracy.py --lamina build/lamina [--data DIR] [--seeds 3] [--epochs 10]
      [--batch 256] [--lr 1e-3] [--schedule constant|cosine] [--precision tf32|fp32] [--device cuda|cpu] [--limit N] [--test-limit M]
      [--tol 0.3] [--json FILE]
Smoke test on a CPU: --device cpu --epochs 1 --seeds 1 --limit 512 --test-limit 256 --batch 64 (the first N
training / M test images written as IDX files to a temporary folder that both sides read)."""
import argparse, gzip, json, math, os, platform, statistics, subprocess, sys, tempfile, time, traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--lamina", default=os.path.join(HERE, "..", "build", "lamina"), help="lamina's CLI")
ap.add_argument("--data", default=os.environ.get("DATA", "/usr/share/datasets/fashion-mnist"),
                help="folder with the 4 Fashion-MNIST IDX .gz files (default $DATA, else Debian's)")
ap.add_argument("--spec", default=os.path.join(HERE, "nets", "res28.txt"), help="lamina's model file")
ap.add_argument("--seeds", type=int, default=3, help="seeds 1..S (default 3)")
ap.add_argument("--epochs", type=int, default=10)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default 1e-3)")
ap.add_argument("--schedule", default="constant", choices=["constant", "cosine"], help="the rate's schedule, both sides")
ap.add_argument("--precision", default="tf32", choices=["tf32", "fp32"])
ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
ap.add_argument("--limit", type=int, default=0, help="train on the first N training images only (smoke test)")
ap.add_argument("--test-limit", type=int, default=0, help="test on the first M test images (default: all, "
                "or min(10000, N) with --limit)")
ap.add_argument("--tol", type=float, default=0.3, help="points (default 0.3)")
ap.add_argument("--json", help="write everything here")
ap.add_argument("--no-lamina", action="store_true")
ap.add_argument("--no-torch", action="store_true")
ap.add_argument("--lamina-timeout", type=float, default=900, help="seconds per lamina run")
a = ap.parse_args()


def say(*x):
    print(*x, flush=True)


PREC = a.precision
if a.device == "cpu" and PREC == "tf32":
    PREC = "fp32"
out = dict(meta=dict(args=vars(a), precision_used=PREC, date=time.strftime("%Y-%m-%d %H:%M:%S"),
                     host=platform.node(), python=platform.python_version()),
           lamina=[], torch=[], summary={})


def write_json():
    if not a.json: return
    tmp = a.json + ".tmp"
    with open(tmp, "w") as f: json.dump(out, f, indent=1, default=str)
    os.replace(tmp, a.json)


say(f"== bench/res_accuracy.py  {out['meta']['date']}  host {platform.node()}  python {platform.python_version()}")
say(f"args: {' '.join(sys.argv[1:])}")
if PREC != a.precision: say(f"--device cpu: precision {a.precision} is CUDA only; both sides run {PREC}")

# ---- data ----
def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f: b = f.read()
    nd = b[3]; dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)

def write_idx(path, arr):
    hdr = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    with open(path, "wb") as f: f.write(hdr + np.ascontiguousarray(arr).tobytes())

FILES = dict(xtr="train-images-idx3-ubyte", ytr="train-labels-idx1-ubyte",
             xte="t10k-images-idx3-ubyte", yte="t10k-labels-idx1-ubyte")
D = {}
for k, f in FILES.items():
    p = os.path.join(a.data, f + ".gz")
    D[k] = read_idx(p if os.path.exists(p) else os.path.join(a.data, f))
tmpdir = None
if a.limit or a.test_limit:
    n = a.limit or len(D["xtr"]); m = a.test_limit or min(len(D["xte"]), n)
    D = dict(xtr=D["xtr"][:n], ytr=D["ytr"][:n], xte=D["xte"][:m], yte=D["yte"][:m])
    tmpdir = tempfile.TemporaryDirectory(prefix="res_accuracy_")
    for k, f in FILES.items(): write_idx(os.path.join(tmpdir.name, f), D[k])
    lamina_data, lamina_env = tmpdir.name, dict(os.environ)
    say(f"subset: first {n} training / {m} test images, written as IDX to {tmpdir.name} (both sides read these)")
else:
    absd = os.path.abspath(a.data)
    if os.path.basename(absd) == "fashion-mnist":
        lamina_data, lamina_env = "fashion-mnist", dict(os.environ, LAMINA_DATA_DIR=os.path.dirname(absd))
    else:
        lamina_data, lamina_env = absd, dict(os.environ)
NTR, NTE = len(D["xtr"]), len(D["xte"])
STEPS = math.ceil(NTR / a.batch)
say(f"data: {a.data}: {NTR} training, {NTE} test images; batch {a.batch} -> {STEPS} steps an epoch "
    f"(last batch {NTR - (STEPS - 1) * a.batch}); Adam lr {a.lr}, {a.schedule}; {a.epochs} epochs; seeds 1..{a.seeds}; "
    f"precision {PREC}; device {a.device}")

# ---- estimate (H200) ----
# training ~ 3 x forward (0.581 GFLOP/img at 28x28x1, `lamina model ... --input 1x28x28`) = 1.74 GFLOP/img;
# lamina's res step on 32x32x3 (~2.27 GFLOP/img training) at batch 512 takes ~19 ms on the H200 in tf32,
# i.e. ~60 TFLOP/s sustained; PyTorch eager assumed alike; fp32 assumed ~2x slower; batches under 256 slower.
GF_IMG = 3 * 0.581
est_epoch = NTR * GF_IMG / 60e3 * (1.0 if PREC == "tf32" else 2.0) * max(1.0, 256 / a.batch) ** 0.15
est_total = a.seeds * (2 * a.epochs * est_epoch + 2 * 8)  # + ~8 s start-up/eval per run
say(f"estimate on an H200: ~{est_epoch:.1f} s an epoch each side, ~{est_total / 60:.1f} min for the whole run "
    f"(measured projection printed after seed 1)")
out["meta"]["estimate_h200_s"] = est_total

# ---- lamina ----
def lamina_run(seed):
    cmd = [a.lamina, "train", "--data", lamina_data, "--model", a.spec, "--epochs", str(a.epochs),
           "--batch", str(a.batch), "--opt", "adam", "--lr", repr(a.lr), "--seed", str(seed), "--precision", PREC,
           "--device", a.device, "--no-progress", "--json"] + (["--lr-schedule", a.schedule] if a.schedule != "constant" else [])
    row = dict(seed=seed, cmd=cmd)
    pre = f"LAMINA_DATA_DIR={lamina_env['LAMINA_DATA_DIR']} " if "LAMINA_DATA_DIR" in lamina_env else ""
    say(f"  $ {pre}{' '.join(cmd)}")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=lamina_env, capture_output=True, text=True, timeout=a.lamina_timeout)
    except subprocess.TimeoutExpired:
        return dict(row, status="failed", note=f"timed out after {a.lamina_timeout:.0f} s")
    row["wall_s"] = time.perf_counter() - t0
    if p.returncode != 0:
        say(f"    lamina failed (exit {p.returncode}): {p.stderr.strip()[-1500:]}")
        return dict(row, status="failed", note=f"exit {p.returncode}", stderr=p.stderr[-3000:])
    js = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not js: return dict(row, status="failed", note="no JSON on stdout", stdout=p.stdout[-2000:])
    r = json.loads(js[-1])
    ep = r["epochs"]
    for e in ep:
        say(f"    lamina seed {seed} epoch {e['epoch']}: loss {e['train_loss']:.4f} train acc {e['train_acc']:.4f} "
            f"test acc {e['test_acc']:.4f}  {e['seconds']:.3f} s")
    times = [e["seconds"] for e in ep]
    row.update(status="ok", acc=r["test_acc"], accs=[e["test_acc"] for e in ep], losses=[e["train_loss"] for e in ep],
               epoch_times=times, epoch_s=statistics.median(times[1:] or times), params=r.get("params"),
               device_name=r.get("device_name"), precision=r.get("precision"), graph=r.get("graph"))
    say(f"    lamina seed {seed}: test acc {100 * row['acc']:.2f}%, median epoch {row['epoch_s']:.3f} s, "
        f"{row['params']} parameters, {row['device_name']}, graph {row['graph']}, process {row['wall_s']:.1f} s")
    return row

# ---- PyTorch ----
torch = None
if not a.no_torch:
    try:
        import torch, torch.nn as nn, torch.nn.functional as F
        out["meta"]["torch"] = torch.__version__
        say(f"PyTorch {torch.__version__} (CUDA {torch.version.cuda})")
        if a.device == "cuda":
            if not torch.cuda.is_available(): raise RuntimeError("CUDA is not available (use --device cpu)")
            out["meta"]["gpu"] = torch.cuda.get_device_name(0); say(f"GPU: {out['meta']['gpu']}")
        else:
            torch.set_num_threads(os.cpu_count() or 1)
        dev = a.device
        torch.backends.cudnn.benchmark = True
        X = torch.from_numpy(D["xtr"].copy()).to(dev).unsqueeze(1)   # uint8 N x 1 x 28 x 28, resident
        Y = torch.from_numpy(D["ytr"].astype(np.int64)).to(dev)
        XTE = torch.from_numpy(D["xte"].copy()).to(dev).unsqueeze(1)
        YTE = torch.from_numpy(D["yte"].astype(np.int64)).to(dev)
    except Exception as ex:
        say("PyTorch not run:", ex); torch = None

def set_tf32(on):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on
        return f"matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}, cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}"

if torch is not None:
    class Block(nn.Module):
        """conv-bn-relu-conv-bn, + the input, relu (res28.txt's second line of each stage)."""
        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                      nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))
        def forward(self, x):
            return F.relu(self.body(x) + x)

    def make_net():
        return nn.Sequential(
            nn.Conv2d(1, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), Block(64),
            nn.Conv2d(64, 128, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(128), nn.ReLU(), Block(128),
            nn.Conv2d(128, 256, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(256), nn.ReLU(), Block(256),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))

def norm(xu8):
    return (xu8.float() / 255.0 - 0.5) / 0.5

def sync():
    if a.device == "cuda": torch.cuda.synchronize()

def evaluate(m):
    m.eval(); right = 0
    with torch.no_grad():
        for i in range(0, NTE, 1000):
            right += (m(norm(XTE[i:i + 1000])).argmax(1) == YTE[i:i + 1000]).sum().item()
    m.train()
    return right / NTE

def torch_run(seed):
    row = dict(seed=seed)
    tf32 = set_tf32(PREC == "tf32") if a.device == "cuda" else "cpu"
    torch.manual_seed(seed)
    m = make_net().to(a.device)
    opt = torch.optim.Adam(m.parameters(), lr=a.lr)
    T = a.epochs * STEPS  # lamina's cosine (src/nn/schedule.c, no warm-up): step t's rate lr (1 + cos(pi t / T)) / 2
    sched = (torch.optim.lr_scheduler.LambdaLR(opt, lambda t: (1 + math.cos(math.pi * min(t, T - 1) / T)) / 2)
             if a.schedule == "cosine" else None)
    nparams = sum(p.numel() for p in m.parameters())
    times, accs, losses = [], [], []
    for e in range(a.epochs):
        sync(); t0 = time.perf_counter()
        perm = torch.randperm(NTR, device=a.device)
        tot = torch.zeros((), device=a.device)
        for i in range(STEPS):
            ix = perm[i * a.batch:(i + 1) * a.batch]
            x, y = norm(X[ix]), Y[ix]
            loss = F.cross_entropy(m(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward(); opt.step()
            if sched: sched.step()
            tot += loss.detach() * len(ix)
        sync(); times.append(time.perf_counter() - t0)
        losses.append(tot.item() / NTR)
        accs.append(evaluate(m))
        say(f"    torch  seed {seed} epoch {e + 1}: loss {losses[-1]:.4f} test acc {accs[-1]:.4f}  {times[-1]:.3f} s")
    row.update(status="ok", acc=accs[-1], accs=accs, losses=losses, epoch_times=times,
               epoch_s=statistics.median(times[1:] or times), params=nparams, tf32=tf32)
    say(f"    torch  seed {seed}: test acc {100 * row['acc']:.2f}%, median epoch {row['epoch_s']:.3f} s, {nparams} "
        f"parameters; {tf32}")
    del m, opt
    if a.device == "cuda": torch.cuda.empty_cache()
    return row

def guarded(fn, seed):
    try:
        return fn(seed)
    except Exception as ex:
        say(f"    FAILED: {type(ex).__name__}: {ex}"); traceback.print_exc(limit=3); sys.stdout.flush()
        return dict(seed=seed, status="failed", note=f"{type(ex).__name__}: {ex}")

# ---- the runs ----
T0 = time.perf_counter()
for s in range(1, a.seeds + 1):
    say(f"\n-- seed {s} --")
    out["lamina"].append(dict(seed=s, status="skipped") if a.no_lamina else guarded(lamina_run, s))
    out["torch"].append(dict(seed=s, status="skipped") if torch is None else guarded(torch_run, s))
    write_json()
    if s == 1 and a.seeds > 1:
        el = time.perf_counter() - T0
        say(f"   (seed 1 took {el:.0f} s: the whole run about {el * a.seeds / 60:.1f} min)")

# ---- summary ----
def stats(rows):
    v = [r["acc"] for r in rows if r.get("status") == "ok"]
    return v, (float(np.mean(v)) if v else None), (float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 if v else None)

def med_epoch(rows):
    t = [x for r in rows if r.get("status") == "ok" for x in (r["epoch_times"][1:] or r["epoch_times"])]
    return float(np.median(t)) if t else None

la, lm, lsd = stats(out["lamina"]); ta, tm, tsd = stats(out["torch"])
say(f"\n== res28 on Fashion-MNIST: {a.epochs} epochs, batch {a.batch}, Adam lr {a.lr}, {PREC}, {a.device}, "
    f"{NTR} training / {NTE} test images ==")
say(f"{'seed':>4s} {'lamina':>9s} {'torch':>9s} {'diff':>8s}")
for l, t in zip(out["lamina"], out["torch"]):
    f = lambda r: f"{100 * r['acc']:8.2f}%" if r.get("status") == "ok" else f"{r.get('status'):>9s}"
    d = (f"{100 * (l['acc'] - t['acc']):+8.2f}" if l.get("status") == "ok" and t.get("status") == "ok" else "")
    say(f"{l['seed']:4d} {f(l)} {f(t)} {d}")
S = out["summary"]
S.update(lamina_accs=la, torch_accs=ta, lamina_mean=lm, lamina_sd=lsd, torch_mean=tm, torch_sd=tsd,
         lamina_epoch_s=med_epoch(out["lamina"]), torch_epoch_s=med_epoch(out["torch"]), tol_points=a.tol,
         total_s=time.perf_counter() - T0)
if lm is not None: say(f"lamina {PREC}: mean {100 * lm:.2f}%, sd {100 * lsd:.2f} points ({len(la)} seeds)")
if tm is not None: say(f"torch  {PREC}: mean {100 * tm:.2f}%, sd {100 * tsd:.2f} points ({len(ta)} seeds)")
for who, key in (("lamina", "lamina"), ("torch", "torch")):
    ok = [r for r in out[key] if r.get("status") == "ok"]
    if ok and a.epochs >= 3:  # a steadier figure beside the compared one: the mean of the last 3 epochs
        S[f"{key}_mean_last3"] = float(np.mean([np.mean(r["accs"][-3:]) for r in ok]))
if lm is not None and tm is not None and len(la) == len(ta):
    diff = 100 * (lm - tm)
    S.update(diff_points=diff, within=abs(diff) <= a.tol)
    if "lamina_mean_last3" in S and "torch_mean_last3" in S:
        S["diff_last3_points"] = 100 * (S["lamina_mean_last3"] - S["torch_mean_last3"])
        say(f"(side figure: mean test acc over the last 3 epochs: lamina {100 * S['lamina_mean_last3']:.2f}%, "
            f"torch {100 * S['torch_mean_last3']:.2f}%, diff {S['diff_last3_points']:+.2f} points)")
    say(f"difference of the means (lamina - torch): {diff:+.2f} points -> |diff| <= {a.tol}: "
        f"{'YES' if S['within'] else 'NO'}")
else:
    S.update(diff_points=None, within=None)
    say("difference of the means: not available (a side failed or was skipped)")
if S["lamina_epoch_s"] and S["torch_epoch_s"]:
    say(f"time per epoch (median of epochs 2..E over seeds): lamina {S['lamina_epoch_s']:.3f} s, torch eager "
        f"{S['torch_epoch_s']:.3f} s ({S['torch_epoch_s'] / S['lamina_epoch_s']:.2f}x)")
say(f"whole run {S['total_s']:.0f} s")
write_json()
if a.json: say(f"results written to {a.json}")
