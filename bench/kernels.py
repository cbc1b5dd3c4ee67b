"""Where a training step's device time goes, lamina against PyTorch, kernel by kernel, in one run.

Both sides run their captured step as they do when timed (CUDA-graph replays), under PyTorch's profiler
(CUPTI's kernel records: real durations, kernels overlapping as they do in the replay):
- lamina: the Python package's Model.fit on random uint8 data (bench/graph_nets.py's), one epoch of `steps`
  steps after a warm-up fit, in a process of its own;
- PyTorch: the peer script (../shared/peers/graph_nets_torch.py) run unchanged (in fp16, its nets through
  bench/graph_nets_fp16_peer.py: autocast fp16 + GradScaler); a patched CUDAGraph.replay turns the profiler on for
  its 3rd to (steps+2)th replay.
Kernels are grouped by what they do; printed per step, with each side's top kernels.

  python3 bench/kernels.py --lib build/liblamina.so --peer .peers/graph_nets_torch.py [--nets air,res,unet]
      [--prec bf16|fp16] [--torch-mode compile] [--steps 10] [--top 14]
"""
import argparse, collections, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def group(name):
    k = name.lower()
    if "dgrad" in k: return "conv data grad"
    if "wgrad" in k: return "conv weight grad"
    if "fprop" in k or "convolve" in k or "implicitgemmconvolution" in k or "implicit_gemm" in k: return "conv fwd"
    if "gemm" in k or "gemv" in k or "splitk" in k or "nvjet" in k: return "GEMM (dense)"
    if "triton" in k: return "generated (triton)"
    if "bn" in k or "batch_norm" in k or "nred" in k or "welford" in k: return "BatchNorm"
    if "pool" in k: return "pooling"
    if "adam" in k or "foreach" in k or "grad_check" in k or "scaler" in k or "amp_" in k: return "optimizer"
    return "other"


def kernel_rows(prof):
    rows = []
    for e in prof.events():
        dt = getattr(e, "device_type", None)
        if dt is None or "CUDA" not in str(dt):
            continue
        us = getattr(e, "device_time_total", None)
        if us is None: us = getattr(e, "cuda_time_total", 0.0)
        if "memcpy" in e.name.lower() or "memset" in e.name.lower():
            continue
        rows.append((e.name, float(us)))
    return rows


def lamina_side(a):
    import numpy as np, torch
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import lamina
    from graph_nets import NETS, random_set
    spec_file, shape, classes, per_pixel, batch = NETS[a.net]
    lines = [l.split("#")[0].strip() for l in open(os.path.join(HERE, "..", spec_file))]
    spec = ", ".join(l.rstrip(",") for l in lines if l)
    x, y = random_set(np.random.default_rng(0), shape, classes, per_pixel, batch * a.steps)
    torch.zeros(1, device="cuda")  # the profiler's CUDA side up before lamina's context
    m = lamina.Model(spec, input_shape=shape, device="cuda", precision=a.prec)
    m.fit(x, y, epochs=1, batch_size=batch, verbose=0)  # warm-up: plans, cuDNN choices, the graph
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        m.fit(x, y, epochs=1, batch_size=batch, verbose=0)
        torch.cuda.synchronize()
    print(json.dumps(kernel_rows(p)))


def torch_side(a):
    import runpy, torch
    from torch.profiler import profile, ProfilerActivity
    prof = profile(activities=[ProfilerActivity.CUDA])
    n = [0]
    orig = torch.cuda.CUDAGraph.replay

    def replay(self):
        n[0] += 1
        if n[0] == 3: torch.cuda.synchronize(); prof.start()
        orig(self)
        if n[0] == a.steps + 2: torch.cuda.synchronize(); prof.stop()

    torch.cuda.CUDAGraph.replay = replay
    sys.argv = [a.peer]
    peer = runpy.run_path(a.peer, run_name="peer")
    from graph_nets import NETS
    if a.prec == "fp16":  # PyTorch's fp16 step: the peer's nets with GradScaler, as bench/graph_nets.py times it
        runpy.run_path(os.path.join(HERE, "graph_nets_fp16_peer.py"), run_name="fp16_peer")["run"](
            peer, a.net, NETS[a.net][4], a.torch_mode)
    else:
        peer["run"](a.net, NETS[a.net][4], a.torch_mode, a.prec)
    print(json.dumps(kernel_rows(prof)))


def summary(rows, steps, top):
    groups = collections.defaultdict(float)
    kern = collections.defaultdict(lambda: [0, 0.0])
    for name, us in rows:
        groups[group(name)] += us / steps
        k = kern[name.split("(")[0][:60]]
        k[0] += 1
        k[1] += us / steps
    tops = sorted(kern.items(), key=lambda kv: -kv[1][1])[:top]
    return groups, tops, sum(groups.values()), len(rows) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build", "liblamina.so"))
    ap.add_argument("--peer", default=".peers/graph_nets_torch.py")
    ap.add_argument("--nets", default="air,res,unet")
    ap.add_argument("--prec", default="bf16")
    ap.add_argument("--torch-mode", default="compile")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--net", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side == "lamina": return lamina_side(a)
    if a.side == "torch": return torch_side(a)
    env = dict(os.environ, LAMINA_LIBRARY=os.path.abspath(a.lib))
    for net in a.nets.split(","):
        got = {}
        for side in ("lamina", "torch"):
            p = subprocess.run([sys.executable, __file__, "--side", side, "--net", net, "--peer", a.peer, "--prec", a.prec,
                                "--torch-mode", a.torch_mode, "--steps", str(a.steps)], capture_output=True, text=True,
                               env=env, timeout=300)
            js = [l for l in p.stdout.splitlines() if l.startswith("[")]
            got[side] = json.loads(js[-1]) if js else []
            if not js: print(f"{net} {side}: no kernels (exit {p.returncode}): {p.stderr[-800:]}", flush=True)
        L, T = summary(got["lamina"], a.steps, a.top), summary(got["torch"], a.steps, a.top)
        print(f"\n== {net} {a.prec}: device time per step, us (graph replays, {a.steps} steps each)")
        print(f"{'group':<22} {'lamina':>9} {'torch ' + a.torch_mode:>16}")
        for g in sorted(set(L[0]) | set(T[0]), key=lambda g: -(L[0].get(g, 0) + T[0].get(g, 0))):
            print(f"{g:<22} {L[0].get(g, 0):9.1f} {T[0].get(g, 0):16.1f}")
        print(f"{'total':<22} {L[2]:9.1f} {T[2]:16.1f}")
        print(f"{'kernels per step':<22} {L[3]:9.1f} {T[3]:16.1f}")
        for who, s in (("lamina", L), (f"torch {a.torch_mode}", T)):
            print(f"-- {who}: top kernels (calls and us per step)")
            for k, (n, us) in s[1]:
                print(f"   {k:<60} {n / a.steps:5.1f} {us:8.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
