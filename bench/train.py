#!/usr/bin/env python3
"""Trains the reference CNN (conv 32 3, relu, maxpool 2, conv 64 3, relu, maxpool 2, flatten, dense 10;
Adam 1e-3; cross-entropy; Fashion-MNIST) with lamina and with PyTorch in one run, same data, model,
batch, optimizer and epochs, and prints epoch time, images/s and test accuracy side by side.

PyTorch is run the fastest eager way a user would write it: the data resident on the device as uint8,
normalized there per batch ((x - 127.5) / 127.5, as lamina does), a fresh permutation per epoch.
  bench/train.py [--device cuda|cpu] [--epochs 5] [--batch 64] [--lamina build/lamina] [--torch-graph]
On the CPU, --steps N times N steps of each (images/s) instead of whole epochs, like the peers' script."""
import argparse, gzip, json, os, subprocess, sys, time
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
ap.add_argument("--epochs", type=int, default=5)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=0, help="CPU: time this many steps instead of whole epochs")
ap.add_argument("--lamina", default=os.path.join(os.path.dirname(__file__), "..", "build", "lamina"))
ap.add_argument("--data", default=os.environ.get("DATA", "/usr/share/datasets/fashion-mnist"))
ap.add_argument("--torch-graph", action="store_true", help="also PyTorch with the whole step in a CUDA graph")
ap.add_argument("--json", help="write the results here")
a = ap.parse_args()
rows = {}

def idx(path):
    with gzip.open(path, "rb") as f: b = f.read()
    nd = b[3]; dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)

# ---- lamina ----
env = dict(os.environ, LAMINA_DATA_DIR=os.path.dirname(os.path.abspath(a.data)))
name = os.path.basename(os.path.abspath(a.data))
data_arg = "fashion-mnist" if name == "fashion-mnist" else a.data
if a.steps:
    cmd = [a.lamina, "train", "--data", data_arg, "--epochs", "1", "--batch", str(a.batch), "--device", a.device, "--json"]
else:
    cmd = [a.lamina, "train", "--data", data_arg, "--epochs", str(a.epochs), "--batch", str(a.batch), "--device", a.device, "--json"]
print("lamina:", " ".join(cmd), flush=True)
t0 = time.perf_counter()
p = subprocess.run(cmd, env=env, capture_output=True, text=True)
if p.returncode != 0:
    print("lamina failed:", p.stderr[-2000:]); sys.exit(1)
r = json.loads(p.stdout.strip().splitlines()[-1])
ep = [e["seconds"] for e in r["epochs"]]
rows["lamina"] = dict(epoch_s=float(np.median(ep)), img_s=60000 / float(np.median(ep)), acc=r["test_acc"], epochs=ep,
                      device=r["device_name"])
for e in r["epochs"]:
    print(f"  lamina epoch {e['epoch']}: loss {e['train_loss']:.4f} test acc {e['test_acc']:.4f} {e['seconds']:.3f} s")

# ---- PyTorch ----
try:
    import torch, torch.nn as nn, torch.nn.functional as F
except Exception as ex:
    print("PyTorch not available:", ex); torch = None
if torch is not None:
    dev = a.device
    if dev == "cpu": torch.set_num_threads(os.cpu_count())
    Xtr, Ytr = idx(f"{a.data}/train-images-idx3-ubyte.gz"), idx(f"{a.data}/train-labels-idx1-ubyte.gz")
    Xte, Yte = idx(f"{a.data}/t10k-images-idx3-ubyte.gz"), idx(f"{a.data}/t10k-labels-idx1-ubyte.gz")
    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 10)).to(dev)
    X = torch.from_numpy(Xtr.copy()).to(dev).unsqueeze(1); Y = torch.from_numpy(Ytr.astype(np.int64)).to(dev)
    xte = torch.from_numpy(Xte.copy()).to(dev).unsqueeze(1); yte = torch.from_numpy(Yte.astype(np.int64)).to(dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    def run(graph):
        m = model(); opt = torch.optim.Adam(m.parameters(), 1e-3, capturable=graph)
        bs = a.batch; steps = (60000 + bs - 1) // bs if not graph else 60000 // bs
        if a.steps: steps = a.steps
        sx = torch.zeros(bs, 1, 28, 28, dtype=torch.uint8, device=dev); sy = torch.zeros(bs, dtype=torch.int64, device=dev)
        def step_static():
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(m((sx.float() - 127.5) / 127.5), sy).backward(); opt.step()
        if graph:
            s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3): step_static()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g): step_static()
        times = []
        for e in range(1 if a.steps else a.epochs):
            sync(); t0 = time.perf_counter()
            perm = torch.randperm(60000, device=dev)
            for i in range(steps):
                ix = perm[(i * bs) % 60000:(i * bs) % 60000 + bs]
                if graph:
                    sx.copy_(X[ix]); sy.copy_(Y[ix]); g.replay()
                else:
                    opt.zero_grad(); F.cross_entropy(m((X[ix].float() - 127.5) / 127.5), Y[ix]).backward(); opt.step()
            sync(); times.append(time.perf_counter() - t0)
        with torch.no_grad():
            acc = (m((xte.float() - 127.5) / 127.5).argmax(1) == yte).float().mean().item()
        imgs = steps * bs
        ep = float(np.median(times))
        return dict(epoch_s=ep * 60000 / imgs, img_s=imgs / ep, acc=acc, epochs=times)
    label = f"torch {torch.__version__} {dev}, resident uint8, eager"
    rows[label] = run(False)
    if a.torch_graph and dev == "cuda":
        rows[f"torch {torch.__version__} cuda, resident uint8, CUDA graph"] = run(True)

print(f"\n== reference CNN, batch {a.batch}, Adam 1e-3, {'%d steps' % a.steps if a.steps else '%d epochs' % a.epochs}, {a.device} ==")
print(f"{'who':52s} {'epoch s':>9s} {'img/s':>10s} {'test acc':>9s}")
for k, v in rows.items():
    print(f"{k:52s} {v['epoch_s']:9.3f} {v['img_s']:10.0f} {v['acc']:9.4f}")
lam = rows["lamina"]
for k, v in rows.items():
    if k != "lamina": print(f"  {k}: epoch time / lamina's = {v['epoch_s'] / lam['epoch_s']:.2f}x")
if a.json: json.dump(rows, open(a.json, "w"), indent=1)
