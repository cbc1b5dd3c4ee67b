"""The CPU backend idle and with one core held by another process (`yes > /dev/null`), in one run on one
machine (the reliability issue's checks): the hidden layer at n = 10M (lamina's default threads against
NumPy's np.tanh(g/255*w)), the reference CNN's epoch (lamina's default threads under load against one
thread on the idle machine), and the reference CNN's images/s idle against PyTorch CPU (batch 64, all
cores). Medians; prints a table and the ratios.

  /usr/bin/python3 dev/cpu_load.py --lamina build/lamina [--data /usr/share/datasets/fashion-mnist]
      [--torch-steps 300] [--json out.json]
"""
import argparse, gzip, json, os, subprocess, sys, time

import numpy as np


def lamina_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout)


def hidden_ms(lamina, extra=()):
    j = lamina_json([lamina, "hidden", "--n", "10M", "--device", "cpu", "--repeat", "10", "--json", *extra])
    return j["ms"]["total"], j["device"]


def numpy_ms(n=10_000_000, reps=10):
    rng = np.random.default_rng(0)
    g = np.floor(rng.uniform(0, 255, n).astype(np.float32))
    w = rng.normal(0.5, 0.1, n).astype(np.float32)
    ts = []
    for i in range(reps + 2):
        t0 = time.perf_counter()
        np.tanh(g / 255 * w)
        if i >= 2:
            ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def cnn_epoch(lamina, data, extra=()):
    j = lamina_json([lamina, "train", "--data", data, "--model", "cnn", "--epochs", "1", "--batch", "64",
                     "--device", "cpu", "--no-progress", "--json", *extra])
    e = j["epochs"][0]
    return e["seconds"], e["images_per_s"], j["device"]


def torch_cnn_ips(data, steps):
    import torch, torch.nn as nn, torch.nn.functional as F
    def idx(p):
        b = gzip.open(p).read() if p.endswith(".gz") else open(p, "rb").read()
        nd = b[3]
        dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
        return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)
    X = torch.from_numpy(idx(f"{data}/train-images-idx3-ubyte.gz").copy()).unsqueeze(1)
    Y = torch.from_numpy(idx(f"{data}/train-labels-idx1-ubyte.gz").astype(np.int64))
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(1600, 10))
    opt = torch.optim.Adam(m.parameters(), 1e-3)
    def step(i):
        sl = slice((i * 64) % 59968, (i * 64) % 59968 + 64)
        x = (X[sl].float() / 255 - 0.5) / 0.5
        opt.zero_grad()
        F.cross_entropy(m(x), Y[sl]).backward()
        opt.step()
    for i in range(20):
        step(i)
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    return steps * 64 / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lamina", required=True)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--torch-steps", type=int, default=300, help="PyTorch's steps; 0: leave PyTorch out")
    ap.add_argument("--json")
    a = ap.parse_args()
    r = {"cpus": os.cpu_count()}
    # idle
    r["idle_hidden_ms"], r["idle_hidden_device"] = hidden_ms(a.lamina)
    r["idle_numpy_ms"] = numpy_ms()
    r["idle_cnn_s"], r["idle_cnn_ips"], r["idle_cnn_device"] = cnn_epoch(a.lamina, a.data)
    r["idle_cnn_1t_s"], _, _ = cnn_epoch(a.lamina, a.data, ("--threads", "1"))
    if a.torch_steps > 0:
        r["idle_torch_ips"] = torch_cnn_ips(a.data, a.torch_steps)
    # one core held
    yes = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r["load_hidden_ms"], r["load_hidden_device"] = hidden_ms(a.lamina)
        r["load_hidden_2t_ms"], _ = hidden_ms(a.lamina, ("--threads", str(os.cpu_count())))
        r["load_numpy_ms"] = numpy_ms()
        r["load_cnn_s"], r["load_cnn_ips"], r["load_cnn_device"] = cnn_epoch(a.lamina, a.data)
    finally:
        yes.kill()
        yes.wait()
    for k, v in r.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    print(f"\nunder load: hidden 10M lamina {r['load_hidden_ms']:.2f} ms vs NumPy {r['load_numpy_ms']:.2f} ms: "
          f"{r['load_numpy_ms'] / r['load_hidden_ms']:.2f}x (want >= 2); all threads {r['load_hidden_2t_ms']:.2f} ms")
    print(f"under load: CNN epoch {r['load_cnn_s']:.2f} s vs one thread idle {r['idle_cnn_1t_s']:.2f} s: "
          f"{r['load_cnn_s'] / r['idle_cnn_1t_s']:.2f}x (want <= 1.1); vs all threads idle {r['idle_cnn_s']:.2f} s: "
          f"{r['load_cnn_s'] / r['idle_cnn_s']:.2f}x")
    if "idle_torch_ips" in r:
        print(f"idle: CNN lamina {r['idle_cnn_ips']:.0f} img/s vs PyTorch {r['idle_torch_ips']:.0f} img/s: "
              f"{r['idle_cnn_ips'] / r['idle_torch_ips']:.2f}x (want >= 1.2)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
