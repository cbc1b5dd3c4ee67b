#!/usr/bin/python3
"""make_torch_ref.py — writes the PyTorch reference files that tests/test_model_torch.c checks lamina against.

For each model (a small CNN and an MLP) it draws one batch of 8 images and labels, takes PyTorch's own
initial parameters, and records in float32 (PyTorch's default, as lamina computes): the logits of a
forward pass, the mean softmax cross-entropy, every gradient, and 10 steps of Adam (PyTorch's defaults:
lr 1e-3, betas 0.9/0.999, eps 1e-8) on that same batch — the loss before each step and the parameters
after the last. The same runs are repeated in float64 to print how far float32 itself is from exact,
which is what the C test's tolerances are chosen against.

Run with Debian's python3-torch (CPU is enough), from anywhere:
    /usr/bin/python3 tests/ref/make_torch_ref.py          # writes tests/ref/*.lamref, then reads them back
The files are committed; rerun only when the models or the format change.

File format "LAMREF1" (all integers int32/uint32 little-endian, data in C order, little-endian):
    magic     8 bytes   "LAMREF1\\0"
    count     int32     number of records
    count records, each:
      name_len  int32     bytes of the name (1..64)
      name      name_len  ASCII, no terminating NUL
      dtype     int32     0 = float32, 1 = uint8, 2 = int32
      ndim      int32     0..4
      dims      int32 × ndim   (each >= 0; the element count is their product, 1 when ndim = 0)
      data      count × 4 (float32, int32) or count × 1 (uint8) bytes
    crc32     uint32    CRC-32 (zlib's, the one of gzip and PNG) of every byte before it

Records in each file (B = batch, P = parameter count, T = parameter tensors, S = Adam steps):
    spec          uint8 (len)      lamina's model spec, text (no NUL)
    x             f32 (B,C,H,W)    inputs: (u8 / 255 - 0.5) / 0.5 of uint8 images, computed in float32
    images        uint8 (B,C,H,W)  the uint8 images x was made from
    labels        uint8 (B)        0..9
    param_sizes   int32 (T)        elements of each parameter tensor, in order (they sum to P)
    param_names   uint8 (len)      their PyTorch names, one per line ("0.weight\\n0.bias\\n...")
    params        f32 (P)          initial parameters, flat: layer by layer, weight then bias, PyTorch
                                   layouts (conv weight (out,in,k,k), dense weight (out,in))
    logits        f32 (B,10)       forward pass with params
    loss          f32 ()           mean softmax cross-entropy over the batch
    grads         f32 (P)          gradient of loss, same flat order as params
    adam_losses   f32 (S)          loss before each of S Adam steps (step i: zero_grad, loss, backward, step)
    params_after  f32 (P)          parameters after the S steps
"""
import copy
import os
import struct
import sys
import zlib

import numpy as np
import torch
from torch import nn

MAGIC = b"LAMREF1\0"
DT_F32, DT_U8, DT_I32 = 0, 1, 2
BATCH, STEPS, CLASSES = 8, 10, 10
# The data and init seed is the first seed from BASE_SEED on whose runs (initial and all S steps) every
# ReLU input is at least MARGIN × the layer's largest |input| away from 0, and every max-pool window
# whose max is positive has its runner-up at least MARGIN × the largest input below the max: float32
# noise (~1e-7 relative) in lamina can then not flip a ReLU or move a max-pool's argmax, which would
# send a whole gradient elsewhere and make the comparison meaningless.
BASE_SEED, MARGIN = 20240601, 1e-5

MODELS = [
    dict(name="small_cnn",
         spec="conv 4 3, relu, maxpool 2, conv 8 3 pad 1, relu, maxpool 2, flatten, dense 10",
         shape=(1, 12, 12),
         # 12 -conv3-> 10 -pool2-> 5 -conv3 pad1-> 5 -pool2-> 2: 8·2·2 = 32 features
         build=lambda: nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Flatten(), nn.Linear(8 * 2 * 2, 10))),
    dict(name="mlp",
         spec="flatten, dense 16, tanh, dense 12, sigmoid, dense 10",
         shape=(1, 6, 6),
         build=lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 16), nn.Tanh(), nn.Linear(16, 12),
                                     nn.Sigmoid(), nn.Linear(12, 10))),
]


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def run(model, x, labels):
    """The reference computation in the model's dtype. Returns the recorded tensors and the margins."""
    margins = []

    def relu_hook(mod, inp, out):
        a = inp[0].detach().abs()
        margins.append(("relu", (a.min() / a.max()).item()))

    def pool_hook(mod, inp, out):
        k = mod.kernel_size
        v = inp[0].detach()
        w = v.unfold(2, k, k).unfold(3, k, k)
        w = w.reshape(*w.shape[:4], k * k).sort(dim=-1, descending=True).values
        live = w[..., 0] > 0  # an all-zero window (every ReLU off) passes no gradient either way
        gap = (w[..., 0] - w[..., 1])[live]
        margins.append(("maxpool", (gap.min() / v.abs().max()).item() if gap.numel() else 1.0))

    hooks = []
    for mod in model:
        if isinstance(mod, nn.ReLU):
            hooks.append(mod.register_forward_hook(relu_hook))
        elif isinstance(mod, nn.MaxPool2d):
            hooks.append(mod.register_forward_hook(pool_hook))

    params0 = flat(model.parameters()).clone()
    with torch.no_grad():
        logits = model(x)
    lossf = nn.CrossEntropyLoss()  # mean over the batch
    model.zero_grad()
    loss = lossf(model(x), labels)
    loss.backward()
    grads = flat(p.grad for p in model.parameters()).clone()

    opt = torch.optim.Adam(model.parameters())  # lr 1e-3, betas (0.9, 0.999), eps 1e-8
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        l = lossf(model(x), labels)
        losses.append(l.item())
        l.backward()
        opt.step()
    with torch.no_grad():
        model(x)  # margins at the final parameters too
    for h in hooks:
        h.remove()
    out = dict(params=params0, logits=logits.detach(), loss=loss.detach().reshape(()), grads=grads,
               adam_losses=torch.tensor(losses, dtype=params0.dtype), params_after=flat(model.parameters()))
    return out, min((m[1] for m in margins), default=1.0)


def make(cfg, seed):
    torch.manual_seed(seed)
    model = cfg["build"]()
    images = torch.randint(0, 256, (BATCH,) + cfg["shape"], dtype=torch.uint8)
    labels = torch.randint(0, CLASSES, (BATCH,), dtype=torch.int64)
    x = (images.float() / 255.0 - 0.5) / 0.5  # float32, as lamina normalizes
    model64 = copy.deepcopy(model).double()
    ref, margin = run(model, x, labels)
    ref64, _ = run(model64, x.double(), labels)
    return model, images, labels, x, ref, ref64, margin


def rel_err(a, b):
    """max |a - b| / max |b|: the measure the C test uses."""
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def record(name, dtype, dims, data):
    nb = name.encode("ascii")
    assert 1 <= len(nb) <= 64 and len(dims) <= 4
    head = struct.pack("<i", len(nb)) + nb + struct.pack("<ii", dtype, len(dims))
    head += struct.pack("<%di" % len(dims), *dims)
    return head + data


def f32(name, t):
    t = t.detach().to(torch.float32).contiguous()
    return record(name, DT_F32, list(t.shape), t.numpy().astype("<f4").tobytes())


def u8(name, t):
    t = t.detach().to(torch.uint8).contiguous()
    return record(name, DT_U8, list(t.shape), t.numpy().tobytes())


def text(name, s):
    b = s.encode("ascii")
    return record(name, DT_U8, [len(b)], b)


def i32(name, values):
    return record(name, DT_I32, [len(values)], struct.pack("<%di" % len(values), *values))


def write(path, recs):
    body = MAGIC + struct.pack("<i", len(recs)) + b"".join(recs)
    body += struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, path)


def read(path):
    """Reads a file back (the same checks the C test makes); returns {name: (dtype, dims, tensor)}."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:8] == MAGIC, "bad magic"
    (crc,) = struct.unpack_from("<I", buf, len(buf) - 4)
    assert crc == zlib.crc32(buf[:-4]) & 0xFFFFFFFF, "bad CRC"
    (count,), off, out = struct.unpack_from("<i", buf, 8), 12, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<i", buf, off)
        name = buf[off + 4:off + 4 + n].decode("ascii")
        off += 4 + n
        dtype, ndim = struct.unpack_from("<ii", buf, off)
        dims = list(struct.unpack_from("<%di" % ndim, buf, off + 8))
        off += 8 + 4 * ndim
        cnt = 1
        for d in dims:
            cnt *= d
        np_dt = {DT_F32: "<f4", DT_U8: "u1", DT_I32: "<i4"}[dtype]
        size = cnt * (1 if dtype == DT_U8 else 4)
        arr = np.frombuffer(buf[off:off + size], dtype=np_dt).reshape(dims)
        off += size
        out[name] = (dtype, dims, torch.from_numpy(arr.copy()))
    assert off == len(buf) - 4, "trailing bytes"
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    torch.set_num_threads(1)  # one summation order, reproducible files
    for cfg in MODELS:
        seed = BASE_SEED
        while True:
            model, images, labels, x, ref, ref64, margin = make(cfg, seed)
            if margin >= MARGIN:
                break
            print("%s: seed %d: a ReLU/max-pool margin of %.2g < %.0e, trying the next seed"
                  % (cfg["name"], seed, margin, MARGIN))
            seed += 1
        names = [n for n, _ in model.named_parameters()]
        sizes = [p.numel() for _, p in model.named_parameters()]
        recs = [text("spec", cfg["spec"]), f32("x", x), u8("images", images), u8("labels", labels),
                i32("param_sizes", sizes), text("param_names", "\n".join(names)),
                f32("params", ref["params"]), f32("logits", ref["logits"]), f32("loss", ref["loss"]),
                f32("grads", ref["grads"]), f32("adam_losses", ref["adam_losses"]),
                f32("params_after", ref["params_after"])]
        path = os.path.join(here, cfg["name"] + ".lamref")
        write(path, recs)

        # Read it back and compare with what was computed.
        back = read(path)
        assert bytes(back["spec"][2].numpy()).decode() == cfg["spec"]
        assert torch.equal(back["x"][2], x) and torch.equal(back["images"][2], images)
        assert torch.equal(back["labels"][2].long(), labels)
        assert back["param_sizes"][2].tolist() == sizes
        for k in ("params", "logits", "loss", "grads", "adam_losses", "params_after"):
            assert torch.equal(back[k][2], ref[k].to(torch.float32)), k
        assert sum(sizes) == back["params"][2].numel()

        print("%s: %s (%d bytes), seed %d, input %s, batch %d, %d parameters %s, min margin %.2g"
              % (cfg["name"], os.path.relpath(path), os.path.getsize(path), seed, cfg["shape"], BATCH,
                 sum(sizes), sizes, margin))
        print("  loss %.7f; Adam losses %s" % (ref["loss"].item(),
                                               " ".join("%.6f" % v for v in ref["adam_losses"].tolist())))
        # How far float32 PyTorch is from float64 on the same inputs and initial parameters: the floor
        # under any float32 implementation's error, against which the C test's tolerances are set.
        print("  float32 vs float64, max|d|/max|ref| per tensor:")
        print("    logits %.2g  loss %.2g  adam_losses %.2g" % (
            rel_err(ref["logits"], ref64["logits"]), rel_err(ref["loss"], ref64["loss"]),
            rel_err(ref["adam_losses"], ref64["adam_losses"])))
        off, parts_g, parts_p, parts_d = 0, [], [], []
        for n, s in zip(names, sizes):
            sl = slice(off, off + s)
            off += s
            parts_g.append("%s %.2g" % (n, rel_err(ref["grads"][sl], ref64["grads"][sl])))
            parts_p.append("%s %.2g" % (n, rel_err(ref["params_after"][sl], ref64["params_after"][sl])))
            moved = (ref64["params_after"][sl] - ref64["params"][sl]).double()
            parts_d.append("%s %.2g" % (n, rel_err(ref["params_after"][sl].double() - ref["params"][sl].double(),
                                                   moved)))
        print("    grads:        " + ", ".join(parts_g))
        print("    params_after: " + ", ".join(parts_p))
        print("    movement (params_after - params): " + ", ".join(parts_d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
