"""PyTorch's fp16 training step for bench/graph_nets.py: the peer's nets (../shared/peers/graph_nets_torch.py, passed
as the first argument) in float16 autocast with torch.amp.GradScaler, as PyTorch's recipe for fp16 has it, on the
peer's protocol (normalize uint8 on the GPU, forward, cross-entropy, backward, Adam; channels_last; warm-up, then
median of 6 x 10 replays). The whole step sits in one CUDA graph: Adam is fused and capturable (it takes the scaler's
scale and found-inf flag on the device, so GradScaler.step needs no host synchronisation) and GradScaler.update is
device ops.

  python3 bench/graph_nets_fp16_peer.py .peers/graph_nets_torch.py air:512:compile:fp16 [res:512:graph:fp16 ...]

Prints one JSON line a run, as the peer does.
"""
import json, runpy, sys, time

import torch
import torch.nn.functional as F


def run(peer, net, bs, mode):
    cls, shp, k, seg = peer["NETS"][net]
    dev = "cuda"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    m = cls().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(m.parameters(), 1e-3, fused=True, capturable=True)
    scaler = torch.amp.GradScaler("cuda")
    X = torch.randint(0, 256, (bs, *shp), dtype=torch.uint8, device=dev)
    Y = torch.randint(0, k, (bs, *shp[1:]) if seg else (bs,), device=dev)
    fwd = torch.compile(m) if mode == "compile" else m

    def step():
        opt.zero_grad(set_to_none=False)
        x = ((X.float() - 127.5) / 127.5).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(fwd(x), Y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(5):
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    if mode in ("graph", "compile"):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        f = g.replay
    else:
        f = step
    torch.cuda.reset_peak_memory_stats()
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(6):
        t0 = time.perf_counter()
        for _ in range(10):
            f()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / 10)
    ts.sort()
    ms = ts[3] * 1e3
    print(json.dumps({"net": net, "bs": bs, "mode": mode, "prec": "fp16", "step_ms": round(ms, 3),
                      "img_s": round(bs / ms * 1e3), "peak_mb": round(torch.cuda.max_memory_allocated() / 2**20),
                      "scale": float(scaler.get_scale())}), flush=True)


def main():
    path, args = sys.argv[1], sys.argv[2:]
    sys.argv = [path]  # the peer runs what its command line names: nothing here, only its nets are wanted
    peer = runpy.run_path(path, run_name="graph_nets_peer")
    for a in args:
        net, bs, mode, _ = a.split(":")
        try:
            run(peer, net, int(bs), mode)
        except Exception as e:
            print(json.dumps({"net": net, "bs": bs, "mode": mode, "prec": "fp16", "error": repr(e)[:300]}), flush=True)


if __name__ == "__main__":
    main()
