"""lamina bench transfer and PyTorch's same transfers (../shared/peers/transfer_peers.py) in one run.

Runs `lamina bench transfer` (CSV, and the plot where matplotlib is present), then the peers' PyTorch
script on the same GPU, and prints, per batch size, the article's pipelines side by side. PyTorch's
script times each transfer with the host clock around the call and a synchronize; lamina reports both
CUDA events and that same host-clock time (wall), and the comparison uses wall against wall.

  python3 bench/transfer_vs_torch.py --lamina build-gpu/lamina --peers .peers/transfer_peers.py --out DIR
"""
import argparse, csv, json, os, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("--lamina", required=True)
ap.add_argument("--peers", required=True, help="transfer_peers.py")
ap.add_argument("--out", required=True)
ap.add_argument("--plot", action="store_true", help="also draw the plot (needs matplotlib)")
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
csv_path = os.path.join(a.out, "transfer.csv")
cmd = [a.lamina, "bench", "transfer", "--csv", csv_path]
if a.plot:
    cmd += ["--plot", os.path.join(a.out, "transfer")]
print("$", " ".join(cmd), flush=True)
subprocess.run(cmd, check=True)
env = dict(os.environ, OUT=a.out)
print("$ python3", a.peers, flush=True)
subprocess.run([sys.executable, a.peers], check=True, env=env)
torch = {r["bs"]: r for r in json.load(open(os.path.join(a.out, "transfer_peers.json")))}

lam = {}
for r in csv.DictReader(open(csv_path)):
    lam[(int(r["n"]), r["method"], r["dtype"], r["memory"])] = r

# lamina's name for each of PyTorch's columns
pairs = [("cpu_norm_then_f32_pageable", ("cpu_normalize", "f32", "pageable")),
         ("f32_pageable", ("copy", "f32", "pageable")),
         ("f32_pinned", ("copy", "f32", "pinned")),
         ("f16_pinned", ("copy", "f16", "pinned")),
         ("u8_pageable_then_gpu_norm", ("gpu_normalize", "f32", "pageable")),
         ("u8_pinned_then_gpu_norm", ("gpu_normalize", "f32", "pinned"))]
rows = []
print()
print("median us per batch; lamina wall (events) vs PyTorch wall, ratio = PyTorch / lamina")
hdr = f"{'batch':>6s} " + " ".join(f"{p[0][:26]:>30s}" for p in pairs)
print(hdr)
for bs in sorted(torch):
    cells = []
    for tk, lk in pairs:
        r = lam.get((bs,) + lk)
        if not r:
            cells.append(f"{'-':>30s}")
            continue
        w, e, t = float(r["wall_median_us"]), float(r["median_us"]), torch[bs][tk]
        cells.append(f"{w:9.1f} ({e:8.1f}) {t:8.1f} {t / w:4.1f}x"[:30].rjust(30))
        rows.append(dict(batch=bs, method=tk, lamina_wall_us=w, lamina_events_us=e, torch_us=t, ratio=t / w))
    print(f"{bs:6d} " + " ".join(cells))

print()
print("the issue's criteria:")
ok_all = True
for bs in sorted(torch):
    g = lam.get((bs, "gpu_normalize", "f32", "pinned"))
    c = lam.get((bs, "cpu_normalize", "f32", "pageable"))
    if not g or not c:
        continue
    gw, cw, t = float(g["wall_median_us"]), float(c["wall_median_us"]), torch[bs]["u8_pinned_then_gpu_norm"]
    ge, ce = float(g["median_us"]), float(c["median_us"])
    speed = ce / ge
    need = bs >= 4096
    ok1 = speed >= 3.5 if need else True
    ok2 = gw <= t
    ok_all &= ok1 and ok2
    print(f"  batch {bs:6d}: u8 pinned + GPU normalize {ge:8.1f} us (events), {gw:8.1f} us (wall) vs PyTorch {t:8.1f} us "
          f"{'OK ' if ok2 else 'SLOWER'}; over CPU normalize + f32 pageable {speed:6.2f}x"
          f"{(' (>= 3.5x: ' + ('OK' if ok1 else 'NO') + ')') if need else ''}")
print("all criteria met" if ok_all else "NOT all criteria met")
json.dump(rows, open(os.path.join(a.out, "transfer_vs_torch.json"), "w"), indent=1)
