"""The graph-core issue's nets (air, res, unet) in lamina and PyTorch, one run, same GPU: time per
training step (normalize uint8 on the GPU, forward, cross-entropy, backward, Adam), random uint8 data.

lamina: `lamina train` on a random data set written here as .npy (N = batch x steps images), the median
epoch time of epochs 2..E divided by its steps (the step is one CUDA-graph replay), and the device's
peak memory from its JSON. PyTorch: ../shared/peers/graph_nets_torch.py (a copy passed with --peer),
median of 6 x 10 replays; in fp16 (torch modes "...:fp16") bench/graph_nets_fp16_peer.py runs the peer's nets with
GradScaler on the same protocol. Prints a table and the ratios; --json writes the rows.

  python3 bench/graph_nets.py --lamina build/lamina --peer .peers/graph_nets_torch.py [--nets air,res,unet]
      [--precisions tf32,bf16,fp16] [--torch-modes graph:tf32,compile:bf16,compile:fp16] [--epochs 3] [--steps 20]
      [--layouts auto,nchw] [--conv-algos heuristic,find]

--conv-algos runs lamina once per way of picking cuDNN's algorithms (LAMINA_CONV_ALGO).
--layouts runs lamina once per activation layout (LAMINA_LAYOUT: auto is lamina's own choice, NHWC for these
nets on CUDA; nchw and nhwc force one), in the same call as PyTorch.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

import numpy as np

NETS = {  # spec file, input (C, H, W), classes, per-pixel labels, batch
    "air": ("bench/nets/air.txt", (3, 32, 32), 10, False, 512),
    "res": ("bench/nets/res.txt", (3, 32, 32), 10, False, 512),
    "unet": ("bench/nets/unet.txt", (1, 64, 84), 11, True, 64),
}


def random_set(rng, shape, classes, per_pixel, count):
    """count random uint8 images (count, h, w, c), or (count, h, w) for one channel, and their labels (a class
    per image or per pixel), the last class given to the first label so the set's classes are the net's."""
    c, h, w = shape
    img = rng.integers(0, 256, size=(count, h, w, c) if c > 1 else (count, h, w), dtype=np.uint8)
    lab = rng.integers(0, classes, size=(count, h, w) if per_pixel else (count,), dtype=np.uint8)
    lab.flat[0] = classes - 1
    return img, lab


def make_data(folder, shape, classes, per_pixel, n, seed=0):
    rng = np.random.default_rng(seed)
    for part, count in (("train", n), ("t10k", max(n // 10, 8))):
        img, lab = random_set(rng, shape, classes, per_pixel, count)
        np.save(os.path.join(folder, f"{part}-images.npy"), img)
        np.save(os.path.join(folder, f"{part}-labels.npy"), lab)


def run_lamina(lamina, net, prec, epochs, steps, profile=False, layout="auto", ncu=None, algo="heuristic"):
    spec, shape, classes, per_pixel, batch = NETS[net]
    env = dict(os.environ, LAMINA_LAYOUT=layout)
    if algo != "heuristic": env["LAMINA_CONV_ALGO"] = algo
    with tempfile.TemporaryDirectory() as d:
        make_data(d, shape, classes, per_pixel, batch * steps)
        cmd = [lamina, "train", "--data", d, "--model", spec, "--epochs", str(epochs), "--batch", str(batch),
               "--precision", prec, "--no-progress"] + (["--profile"] if profile else ["--json"])
        if ncu:  # each kernel's device time, launched one by one (ncu cannot time a graph's kernels apart)
            cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv"] + cmd[:-1] + [
                "--graph", "off"]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
                f.write(p.stdout)
            s = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "scripts", "ncu_summary.py"),
                                f.name], capture_output=True, text=True)
            os.unlink(f.name)
            print(f"== ncu: lamina {net} {prec} batch {batch} layout {layout}, {steps} steps + the test set\n"
                  f"{s.stdout}{s.stderr[-300:]}{p.stderr[-300:] if p.returncode else ''}", flush=True)
            return None
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if profile:
            print(f"== lamina {net} {prec} batch {batch} layout {layout}\n{p.stdout}{p.stderr[-400:]}", flush=True)
            return None
        if p.returncode != 0:
            return {"net": net, "prec": prec, "layout": layout, "error": p.stderr.strip()[-400:]}
        j = json.loads(p.stdout)
        secs = [e["seconds"] for e in j["epochs"][1:]] or [j["epochs"][0]["seconds"]]
        ms = statistics.median(secs) / steps * 1e3
        return {"net": net, "batch": batch, "prec": prec, "layout": layout, "algo": algo, "step_ms": round(ms, 3),
                "img_s": round(batch / ms * 1e3), "peak_mb": round(j["memory"]["peak"] / 2**20)}


# The peer resets PyTorch's peak counter after capturing its graph, so its figure leaves out the graph's
# memory pool; with whole_peak the reset is a no-op and the peak covers the whole run (warm-up, capture,
# replays), as lamina's does.
WHOLE_PEAK = ("import runpy, sys, torch; torch.cuda.reset_peak_memory_stats = lambda *a, **k: None; "
              "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def run_torch(peer, net, mode, prec, whole_peak=False):
    batch = NETS[net][4]
    pre = [sys.executable, "-c", WHOLE_PEAK] if whole_peak else [sys.executable]
    if prec == "fp16":  # the peer's nets with GradScaler
        pre += [os.path.join(os.path.dirname(__file__), "graph_nets_fp16_peer.py")]
    p = subprocess.run(pre + [peer, f"{net}:{batch}:{mode}:{prec}"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {"net": net, "mode": mode, "prec": prec, "error": (p.stderr or p.stdout).strip()[-400:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lamina", required=True)
    ap.add_argument("--peer", default=".peers/graph_nets_torch.py")
    ap.add_argument("--nets", default="air,res,unet")
    ap.add_argument("--precisions", default="tf32,bf16,fp16")
    ap.add_argument("--torch-modes", default="graph:tf32,compile:bf16,compile:fp16")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layouts", default="auto", help="lamina's activation layouts to run (LAMINA_LAYOUT), comma-separated")
    ap.add_argument("--conv-algos", default="heuristic",
                    help="how lamina picks cuDNN's algorithms (LAMINA_CONV_ALGO: heuristic, find), comma-separated")
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true", help="print lamina's per-op profile of each net instead")
    ap.add_argument("--ncu", help="path of Nsight Compute's ncu: print each kernel's device time instead (graph off)")
    ap.add_argument("--whole-peak", action="store_true",
                    help="PyTorch's peak over the whole run, its graph's pool included (the peer's own figure leaves it out)")
    a = ap.parse_args()
    if a.profile or a.ncu:
        for net in a.nets.split(","):
            for prec in a.precisions.split(","):
                for layout in a.layouts.split(","):
                    run_lamina(a.lamina, net, prec, 1, a.steps, profile=a.profile, layout=layout, ncu=a.ncu)
        return
    rows = []
    for net in a.nets.split(","):
        for prec in a.precisions.split(","):
            for layout in a.layouts.split(","):
                for algo in a.conv_algos.split(","):
                    r = run_lamina(a.lamina, net, prec, a.epochs, a.steps, layout=layout, algo=algo)
                    r["who"] = " ".join(["lamina"] + ([layout] if layout != "auto" else []) +
                                        ([algo] if algo != "heuristic" else []))
                    rows.append(r)
                    print(json.dumps(r), flush=True)
        if os.path.exists(a.peer):
            for mp in a.torch_modes.split(","):
                mode, prec = mp.split(":")
                r = run_torch(a.peer, net, mode, prec, a.whole_peak)
                r["who"] = f"torch {mode}"
                rows.append(r)
                print(json.dumps(r), flush=True)
    print("\n| net | batch | who | precision | ms/step | img/s | peak MB |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['net']} | {r.get('batch', r.get('bs', ''))} | {r['who']} | {r['prec']} | {r.get('step_ms', 'error')} | "
              f"{r.get('img_s', '')} | {r.get('peak_mb', '')} |")
    for net in a.nets.split(","):
        def get(who, prec):
            for r in rows:
                if r["net"] == net and r["who"] == who and r["prec"] == prec and "step_ms" in r:
                    return r["step_ms"]
        for prec, peer in (("tf32", ("torch graph", "tf32")), ("bf16", ("torch compile", "bf16")),
                           ("fp16", ("torch compile", "bf16")), ("fp16", ("torch compile", "fp16"))):
            for who in dict.fromkeys(r["who"] for r in rows if r["who"].startswith("lamina")):
                l, t = get(who, prec), get(*peer)
                if l and t:
                    print(f"{net} {prec}: {who} {l} ms vs {peer[0]} {peer[1]} {t} ms: {t / l:.2f}x (want >= 1.5x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
