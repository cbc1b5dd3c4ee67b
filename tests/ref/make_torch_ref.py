#!/usr/bin/python3
"""make_torch_ref.py — writes the PyTorch reference files that tests/test_model_torch.c checks lamina against.

For each model (a small CNN and an MLP) it draws one batch of 8 images and labels, takes PyTorch's own
initial parameters, and records in float32 (PyTorch's default, as lamina computes): the logits of a
forward pass, the mean softmax cross-entropy, every gradient, and 10 steps of Adam (PyTorch's defaults:
lr 1e-3, betas 0.9/0.999, eps 1e-8) on that same batch — the loss before each step and the parameters
after the last. The same runs are repeated in float64 to print how far float32 itself is from exact,
which is what the C test's tolerances are chosen against.

It also writes three graph models that tests/test_graph_torch.c checks, in training mode:
resnet_bn (a residual net with BatchNorm, dropout and GELU), unet (a small U-Net with a per-pixel
loss) and norms (GroupNorm and LayerNorm, on images and on a flat input); see GRAPH_MODELS and "Graph model
files" below.

Run with Debian's python3-torch (CPU is enough), from anywhere:
    /usr/bin/python3 tests/ref/make_torch_ref.py          # writes tests/ref/*.lamref, then reads them back
    /usr/bin/python3 tests/ref/make_torch_ref.py unet     # only the files named (small_cnn mlp resnet_bn unet norms)
    /usr/bin/python3 tests/ref/make_torch_ref.py --out DIR   # into DIR instead of tests/ref
The files are committed; rerun only when the models or the format change, and only for the files that
changed: another build of PyTorch (another CPU path) rounds some float32 results one ulp differently,
which changes the bytes (not the test's verdict) of the files it rewrites.

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

Graph model files (resnet_bn, unet), N = BatchNorm state (per bn node: running mean (C), running var (C));
the seed is chosen as above (MARGIN), over every training forward and the evaluation one:
    spec, param_sizes, param_names   as above
    x             f32 (B,C,H,W)    inputs: normal(0, 1), float32
    labels        uint8 (B) or (B,H,W)   classes; for per-pixel models 255 = ignored (CrossEntropyLoss's
                                   ignore_index, the mean over the labels not ignored)
    params        f32 (P)          initial parameters: PyTorch's init, but BatchNorm's gamma uniform(0.5, 1.5)
                                   and beta uniform(-0.5, 0.5) so that swapping or dropping them shows
    state         f32 (N)          initial running statistics: mean uniform(-0.2, 0.2), var uniform(0.5, 1.5)
                                   (not 0 and 1, so that the momentum update is checked from any start)
    dropout_node  int32 (1)        resnet_bn only: the dropout layer's 1-based node number in the spec
    dropout_masks uint8 (S+1,B,n)  resnet_bn only: keep masks (1 = keep) of that layer's n outputs per
                                   sample, drawn with keep probability 1 - p; mask 0 for the first forward,
                                   mask s+1 for Adam step s. Dropout is y = x * (mask / (1 - p)), which is
                                   what torch's own dropout computes with that mask.
    loss          f32 ()           training mode (batch statistics): the loss with params and mask 0
    grads         f32 (P)          its gradient
    state_after_loss f32 (N)       running statistics after that one training forward
    adam_lr       f32 ()           Adam's lr (1e-2: the parameters move visibly); betas, eps PyTorch's
    adam_losses   f32 (S)          S Adam steps on the same batch x, each with its own dropout mask: the
                                   loss before each step (step s: zero_grad, loss, backward, step)
    params_after  f32 (P)          parameters after the S steps
    state_after   f32 (N)          running statistics after the S steps (1 + S training forwards in all)
    x_eval        f32 (B,C,H,W)    another batch, normal(0, 1)
    logits_eval   f32 (B,K) or (B,K,H,W)  evaluation mode (model.eval(): running statistics, no dropout)
                                   on x_eval, with params_after and state_after
"""
import argparse
import copy
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F
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


# ---- graph models: labels, add, concat, BatchNorm, dropout, GELU, convt, per-pixel loss ---------------
GRAPH_STEPS, GRAPH_LR, DROPOUT_P = 10, 1e-2, 0.25


class ResNetBN(nn.Module):
    """lamina: "conv 8 3 pad 1 nobias, bn, r: relu, conv 8 3 pad 1 nobias, bn, relu, dropout 0.25,
    conv 8 3 pad 1 nobias, bn, add @r, relu, maxpool 2, conv 16 3 pad 1 nobias, bn, gelu, gap, dense 5"
    on 3×8×8. Modules are registered in node order, so parameters() is lamina's flat order. The last conv
    has no bias either: a bias right before a training-mode BatchNorm has a gradient of exactly 0 (the
    batch mean takes it out), so PyTorch's and lamina's would both be rounding noise, which Adam, dividing
    by the gradient's own size, turns into steps of ±lr in unrelated directions."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1, self.relu1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        self.conv2, self.bn2, self.relu2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        self.conv3, self.bn3, self.relu3 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv4, self.bn4, self.gelu = nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.GELU()
        self.fc = nn.Linear(16, 5)
        self.mask = None  # (B, 8, 8, 8) keep mask of the dropout in training mode

    def forward(self, x):
        r = self.relu1(self.bn1(self.conv1(x)))                       # r: (B, 8, 8, 8)
        y = self.relu2(self.bn2(self.conv2(r)))
        if self.training:                                             # dropout 0.25 with the given mask
            y = y * (self.mask.to(y.dtype) / (1.0 - DROPOUT_P))
        y = self.relu3(self.bn3(self.conv3(y)) + r)                   # add @r, relu
        y = self.pool(y)                                              # (B, 8, 4, 4)
        y = self.gelu(self.bn4(self.conv4(y)))                        # (B, 16, 4, 4), exact erf GELU
        return self.fc(y.mean((2, 3)))                                # gap, dense 5: (B, 5)


class Norms(nn.Module):
    """lamina: "conv 8 3 pad 1 nobias, groupnorm 4, relu, conv 8 3 pad 1, layernorm, gelu, maxpool 2,
    conv 16 3 pad 1 nobias, groupnorm 8 eps 1e-3, relu, gap, dense 16, layernorm, tanh, dense 5" on 3×8×8: lamina's
    groupnorm G is GroupNorm(G, C); its layernorm GroupNorm(1, C) on an image and LayerNorm(C) on a flat input."""

    def __init__(self):
        super().__init__()
        self.conv1, self.gn1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.GroupNorm(4, 8)
        self.conv2, self.ln2 = nn.Conv2d(8, 8, 3, padding=1), nn.GroupNorm(1, 8)
        self.conv3, self.gn3 = nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.GroupNorm(8, 16, eps=1e-3)
        self.fc1, self.ln4, self.fc2 = nn.Linear(16, 16), nn.LayerNorm(16), nn.Linear(16, 5)
        self.relu1, self.relu3, self.pool = nn.ReLU(), nn.ReLU(), nn.MaxPool2d(2)  # modules: the margin hooks see them
        self.mask = None

    def forward(self, x):
        y = self.relu1(self.gn1(self.conv1(x)))
        y = self.pool(F.gelu(self.ln2(self.conv2(y))))                # (B, 8, 4, 4)
        y = self.relu3(self.gn3(self.conv3(y))).mean((2, 3))          # gap: (B, 16)
        return self.fc2(torch.tanh(self.ln4(self.fc1(y))))


class UNet(nn.Module):
    """lamina: "conv 4 3 pad 1 nobias, bn, e1: relu, maxpool 2, conv 8 3 pad 1 nobias, bn, e2: relu,
    maxpool 2, conv 16 3 pad 1, relu, convt 8 2 stride 2, concat @e2, conv 8 3 pad 1, relu,
    convt 4 2 stride 2, concat @e1, conv 4 3 pad 1, relu, conv 3 1" on 1×16×20. A label names the output
    of the layer it stands before, so the skips are the encoder's ReLU outputs, as in a U-Net. concat puts
    the current tensor's channels first: torch.cat([current, skip], 1)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1, self.relu1 = nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2, self.bn2, self.relu2 = nn.Conv2d(4, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.conv3, self.relu3 = nn.Conv2d(8, 16, 3, padding=1), nn.ReLU()
        self.up1 = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.conv4, self.relu4 = nn.Conv2d(16, 8, 3, padding=1), nn.ReLU()
        self.up2 = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.conv5, self.relu5 = nn.Conv2d(8, 4, 3, padding=1), nn.ReLU()
        self.conv6 = nn.Conv2d(4, 3, 1)

    def forward(self, x):
        e1 = self.relu1(self.bn1(self.conv1(x)))                      # e1: (B, 4, 16, 20)
        e2 = self.relu2(self.bn2(self.conv2(self.pool1(e1))))         # e2: (B, 8, 8, 10)
        y = self.relu3(self.conv3(self.pool2(e2)))                    # (B, 16, 4, 5)
        y = torch.cat([self.up1(y), e2], 1)                           # convt 8 2 stride 2, concat @e2: 16
        y = self.relu4(self.conv4(y))                                 # (B, 8, 8, 10)
        y = torch.cat([self.up2(y), e1], 1)                           # convt 4 2 stride 2, concat @e1: 8
        y = self.relu5(self.conv5(y))                                 # (B, 4, 16, 20)
        return self.conv6(y)                                          # (B, 3, 16, 20)


GRAPH_MODELS = [
    dict(name="resnet_bn",
         spec="conv 8 3 pad 1 nobias, bn, r: relu, conv 8 3 pad 1 nobias, bn, relu, dropout 0.25, "
              "conv 8 3 pad 1 nobias, bn, add @r, relu, maxpool 2, conv 16 3 pad 1 nobias, bn, gelu, gap, dense 5",
         shape=(3, 8, 8), batch=4, classes=5, per_pixel=False, build=ResNetBN,
         dropout=dict(node=7, shape=(8, 8, 8))),  # node 7: conv bn relu conv bn relu dropout
    dict(name="unet",
         spec="conv 4 3 pad 1 nobias, bn, e1: relu, maxpool 2, conv 8 3 pad 1 nobias, bn, e2: relu, maxpool 2, "
              "conv 16 3 pad 1, relu, convt 8 2 stride 2, concat @e2, conv 8 3 pad 1, relu, "
              "convt 4 2 stride 2, concat @e1, conv 4 3 pad 1, relu, conv 3 1",
         shape=(1, 16, 20), batch=2, classes=3, per_pixel=True, ignore_frac=0.15, build=UNet, dropout=None),
    dict(name="norms",
         spec="conv 8 3 pad 1 nobias, groupnorm 4, relu, conv 8 3 pad 1, layernorm, gelu, maxpool 2, "
              "conv 16 3 pad 1 nobias, groupnorm 8 eps 1e-3, relu, gap, dense 16, layernorm, tanh, dense 5",
         shape=(3, 8, 8), batch=4, classes=5, per_pixel=False, build=Norms, dropout=None),
]

def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def margin_hooks(model, margins):
    """Forward hooks on every nn.ReLU and nn.MaxPool2d (kernel = stride) of model that append to margins
    how close each call came to a kink: the smallest |ReLU input| and the smallest gap between a live
    max-pool window's max and its runner-up, relative to the largest |input|. Returns the hooks."""

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
    for mod in model.modules():
        if isinstance(mod, nn.ReLU):
            hooks.append(mod.register_forward_hook(relu_hook))
        elif isinstance(mod, nn.MaxPool2d):
            hooks.append(mod.register_forward_hook(pool_hook))
    return hooks


def run(model, x, labels):
    """The reference computation in the model's dtype. Returns the recorded tensors and the margins."""
    margins = []
    hooks = margin_hooks(model, margins)

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


def bn_modules(model):
    return [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]


def bn_state(model):
    """BatchNorm's running statistics in lamina's flat order: per bn node, running mean then running var."""
    parts = [t.detach().reshape(-1).clone() for b in bn_modules(model) for t in (b.running_mean, b.running_var)]
    return torch.cat(parts) if parts else torch.zeros(0)


def run_graph(model, x, labels, masks, x_eval):
    """A graph model's reference computation in the model's dtype: loss and gradients in training mode,
    GRAPH_STEPS Adam steps, evaluation-mode logits. Returns the recorded tensors and the margins."""
    margins = []
    hooks = margin_hooks(model, margins)
    lossf = nn.CrossEntropyLoss(ignore_index=255)  # mean over the labels not ignored
    params0, state0 = flat(model.parameters()).clone(), bn_state(model)
    model.train()
    model.mask = masks[0] if masks is not None else None
    model.zero_grad()
    loss = lossf(model(x), labels)
    loss.backward()
    grads, state1 = flat(p.grad for p in model.parameters()).clone(), bn_state(model)

    opt = torch.optim.Adam(model.parameters(), lr=GRAPH_LR)  # betas (0.9, 0.999), eps 1e-8
    losses = []
    for s in range(GRAPH_STEPS):
        model.mask = masks[s + 1] if masks is not None else None
        opt.zero_grad()
        l = lossf(model(x), labels)
        losses.append(l.item())
        l.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        logits_eval = model(x_eval)
    for h in hooks:
        h.remove()
    out = dict(params=params0, state=state0, loss=loss.detach().reshape(()), grads=grads, state_after_loss=state1,
               adam_losses=torch.tensor(losses, dtype=params0.dtype), params_after=flat(model.parameters()),
               state_after=bn_state(model), logits_eval=logits_eval.detach())
    return out, min((m[1] for m in margins), default=1.0)


def make_graph(cfg, seed):
    torch.manual_seed(seed)
    model = cfg["build"]()
    with torch.no_grad():  # BatchNorm away from its default 1/0 and 0/1, see the docstring
        for b in bn_modules(model):
            b.weight.uniform_(0.5, 1.5)
            b.bias.uniform_(-0.5, 0.5)
            b.running_mean.uniform_(-0.2, 0.2)
            b.running_var.uniform_(0.5, 1.5)
        for g in model.modules():  # GroupNorm's and LayerNorm's scale and shift too
            if isinstance(g, (nn.GroupNorm, nn.LayerNorm)):
                g.weight.uniform_(0.5, 1.5)
                g.bias.uniform_(-0.5, 0.5)
    B = cfg["batch"]
    x = torch.randn((B,) + cfg["shape"])
    x_eval = torch.randn((B,) + cfg["shape"])
    if cfg["per_pixel"]:
        labels = torch.randint(0, cfg["classes"], (B,) + cfg["shape"][1:], dtype=torch.int64)
        labels[torch.rand(labels.shape) < cfg["ignore_frac"]] = 255
    else:
        labels = torch.randint(0, cfg["classes"], (B,), dtype=torch.int64)
    masks = None
    if cfg["dropout"]:
        masks = (torch.rand((GRAPH_STEPS + 1, B) + cfg["dropout"]["shape"]) >= DROPOUT_P).to(torch.uint8)
    model64 = copy.deepcopy(model).double()
    ref, margin = run_graph(model, x, labels, masks, x_eval)
    ref64, _ = run_graph(model64, x.double(), labels, masks, x_eval.double())
    return model, x, labels, masks, x_eval, ref, ref64, margin

def rel_err(a, b):
    """max |a - b| / max |b|: the measure the C test uses."""
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    if b.numel() == 0:  # a model without running statistics
        return 0.0
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


def write_sequential(cfg, here):
    """One of MODELS: finds the seed, writes <here>/<name>.lamref, reads it back, prints the report."""
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


def write_graph(cfg, here):
    """One of GRAPH_MODELS: finds the seed, writes <here>/<name>.lamref, reads it back, prints the report."""
    seed = BASE_SEED
    while True:
        model, x, labels, masks, x_eval, ref, ref64, margin = make_graph(cfg, seed)
        if margin >= MARGIN:
            break
        print("%s: seed %d: a ReLU/max-pool margin of %.2g < %.0e, trying the next seed"
              % (cfg["name"], seed, margin, MARGIN))
        seed += 1
    names = [n for n, _ in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    recs = [text("spec", cfg["spec"]), f32("x", x), u8("labels", labels), i32("param_sizes", sizes),
            text("param_names", "\n".join(names)), f32("params", ref["params"]), f32("state", ref["state"])]
    if masks is not None:
        recs += [i32("dropout_node", [cfg["dropout"]["node"]]),
                 u8("dropout_masks", masks.reshape(masks.shape[0], masks.shape[1], -1))]
    keys = ("loss", "grads", "state_after_loss", "adam_losses", "params_after", "state_after")
    recs += [f32(k, ref[k]) for k in keys[:3]]
    recs += [f32("adam_lr", torch.tensor(GRAPH_LR))]
    recs += [f32(k, ref[k]) for k in keys[3:]]
    recs += [f32("x_eval", x_eval), f32("logits_eval", ref["logits_eval"])]
    path = os.path.join(here, cfg["name"] + ".lamref")
    write(path, recs)

    # Read it back and compare with what was computed.
    back = read(path)
    assert bytes(back["spec"][2].numpy()).decode() == cfg["spec"]
    assert torch.equal(back["x"][2], x) and torch.equal(back["x_eval"][2], x_eval)
    assert torch.equal(back["labels"][2].long(), labels)
    assert back["param_sizes"][2].tolist() == sizes and sum(sizes) == back["params"][2].numel()
    if masks is not None:
        assert torch.equal(back["dropout_masks"][2].reshape(masks.shape), masks)
    for k in ("params", "state", "logits_eval") + keys:
        assert torch.equal(back[k][2], ref[k].to(torch.float32)), k
    size = os.path.getsize(path)
    assert size < 300 * 1024, "%s: %d bytes, too big to commit" % (path, size)

    ignored = (labels == 255).sum().item()
    print("%s: %s (%d bytes), seed %d, input %s, batch %d, %d labels (%d ignored), %d parameters %s, "
          "%d running statistics, min margin %.2g"
          % (cfg["name"], os.path.relpath(path), size, seed, cfg["shape"], cfg["batch"], labels.numel(), ignored,
             sum(sizes), sizes, ref["state"].numel(), margin))
    print("  loss %.7f; Adam (lr %g) losses %s" % (ref["loss"].item(), GRAPH_LR,
                                                  " ".join("%.6f" % v for v in ref["adam_losses"].tolist())))
    print("  float32 vs float64, max|d|/max|ref| per tensor:")
    print("    loss %.2g  adam_losses %.2g  logits_eval %.2g  state_after_loss %.2g  state_after %.2g" % (
        rel_err(ref["loss"], ref64["loss"]), rel_err(ref["adam_losses"], ref64["adam_losses"]),
        rel_err(ref["logits_eval"], ref64["logits_eval"]), rel_err(ref["state_after_loss"], ref64["state_after_loss"]),
        rel_err(ref["state_after"], ref64["state_after"])))
    off, parts_g, parts_d = 0, [], []
    for n, s in zip(names, sizes):
        sl = slice(off, off + s)
        off += s
        parts_g.append("%s %.2g" % (n, rel_err(ref["grads"][sl], ref64["grads"][sl])))
        moved = (ref64["params_after"][sl] - ref64["params"][sl]).double()
        parts_d.append("%s %.2g" % (n, rel_err(ref["params_after"][sl].double() - ref["params"][sl].double(), moved)))
    print("    grads:        " + ", ".join(parts_g))
    print("    movement (params_after - params): " + ", ".join(parts_d))


def main():
    names = [c["name"] for c in MODELS + GRAPH_MODELS]
    ap = argparse.ArgumentParser(description="Writes the PyTorch reference files (.lamref) of lamina's tests.")
    ap.add_argument("models", nargs="*", metavar="MODEL",
                    help="which files to write (default: all of %s)" % " ".join(names))
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                    help="folder to write into (default: this script's, tests/ref)")
    args = ap.parse_args()
    for n in args.models:
        if n not in names:
            ap.error("no model named %r: the models are %s" % (n, " ".join(names)))
    want = set(args.models or names)
    torch.set_num_threads(1)  # one summation order, reproducible files
    for cfg in MODELS:
        if cfg["name"] in want:
            write_sequential(cfg, args.out)
    for cfg in GRAPH_MODELS:
        if cfg["name"] in want:
            write_graph(cfg, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
