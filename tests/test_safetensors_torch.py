#!/usr/bin/python3
"""test_safetensors_torch.py — `lamina import` and `lamina export` against PyTorch (issue #15).

For three models — a plain stack (conv, bn, relu, maxpool, flatten, dense, and a BatchNorm1d), one with
transposed convolutions and upsampling (a class per pixel), and a labelled graph (add, concat, gap) — it
builds the torch network of the same layers, draws random weights and random BatchNorm running statistics,
writes them to a .safetensors file, runs `lamina import`, and compares lamina's evaluation-mode outputs on
fresh random inputs with torch's (max abs diff <= 1e-5). Then `lamina export` of that checkpoint is read
back and every tensor must equal the original bit for bit (num_batches_tracked: an int64 0, as documented),
and torch's load_state_dict(strict=True) must take it. The same weights saved as F64, F16 and BF16 must
import to exactly their float32 values.

The .safetensors files are written and read with the safetensors package where it is installed, and
always also with the small writer and reader below (the format is 8 bytes of header length, a JSON header,
the data), so that the test runs where the package is missing (Debian's python3 has none).

Environment (CTest sets both): LAMINA_CLI, the lamina command; LAMINA_LIBRARY, liblamina.so, through which
lamina's outputs are computed (ctypes: lam_checkpoint_load, lam_model_forward). Exits 77 (CTest's "skipped")
where this Python has no NumPy or torch; 0 when everything passed, 1 otherwise.
"""
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile

SKIPPED = 77
try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as e:
    print(f"skipped: {sys.executable} has no {e.name or e}: install python3-torch (and numpy) to run this test")
    sys.exit(SKIPPED)
try:
    import safetensors.torch as st_torch
except ImportError:
    st_torch = None

TOL = 1e-5
LAYER_NAMES = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


# ---- the format, written and read by hand ---------------------------------------------------------------

_DTYPES = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8"), torch.float16: ("F16", "<f2"),
           torch.int64: ("I64", "<i8"), torch.bfloat16: ("BF16", None)}


def write_st(path, tensors, metadata=None):
    """safetensors.torch.save_file's format: u64 header length, JSON header padded with spaces, data."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()
        b = raw.astype(raw.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype][0], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    """{name: tensor}, metadata — checking that the data is laid out without gaps or overlaps."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<Q", data)[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out, spans = {}, []
    for name, e in header.items():
        a, b = e["data_offsets"]
        np_dt = {"F32": "<f4", "I64": "<i8"}[e["dtype"]]
        out[name] = torch.from_numpy(np.frombuffer(data[8 + n + a:8 + n + b], np_dt).copy().reshape(e["shape"]))
        spans.append((a, b))
    spans.sort()
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1)), f"{path}: gaps or overlaps {spans}"
    assert not spans or (spans[0][0] == 0 and 8 + n + spans[-1][1] == len(data)), f"{path}: data not covered exactly"
    return out, meta


def save(path, tensors):
    if st_torch is not None:
        st_torch.save_file(tensors, path)
    else:
        write_st(path, tensors)


# ---- lamina through its C library ---------------------------------------------------------------------

class Lamina:
    def __init__(self, library):
        lib = ctypes.CDLL(library)
        P = ctypes.c_void_p
        lib.lam_last_error.restype = ctypes.c_char_p
        lib.lam_ctx_create.argtypes = [ctypes.POINTER(P), ctypes.c_int]
        lib.lam_checkpoint_load.argtypes = [P, ctypes.c_char_p, ctypes.POINTER(P), P, P]
        lib.lam_model_set_train.argtypes = [P, ctypes.c_int]
        lib.lam_model_forward.argtypes = [P, ctypes.c_int, P, P]
        lib.lam_model_free.argtypes = [P]
        self.lib, self.ctx = lib, P()
        self.check(lib.lam_ctx_create(ctypes.byref(self.ctx), 1))  # LAM_DEVICE_CPU

    def check(self, status):
        if status != 0:
            raise RuntimeError(f"lamina: {self.lib.lam_last_error().decode()}")

    def forward(self, checkpoint, x, out_shape):
        m = ctypes.c_void_p()
        self.check(self.lib.lam_checkpoint_load(self.ctx, os.fsencode(checkpoint), ctypes.byref(m), None, None))
        try:
            x = np.ascontiguousarray(x, np.float32)
            y = np.empty((x.shape[0],) + tuple(out_shape), np.float32)
            self.check(self.lib.lam_model_set_train(m, 0))
            self.check(self.lib.lam_model_forward(m, x.shape[0], x.ctypes.data, y.ctypes.data))
            return y
        finally:
            self.lib.lam_model_free(m)


# ---- the models -------------------------------------------------------------------------------------------

class Graph(nn.Module):
    """lamina's naming for graphs: layer i of the spec is the submodule "i"; forward wires them."""

    SPEC = ("conv 8 3 pad 1 nobias, bn, r: relu, conv 8 3 pad 1, bn, add @r, e: relu, maxpool 2, conv 4 3 pad 1, "
            "tanh, upsample 2, concat @e, conv 5 1, bn, gap, dense 7")

    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),           # 0-2 (r)
                  nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), None, nn.ReLU(),                 # 3-6 (add, e)
                  nn.MaxPool2d(2), nn.Conv2d(8, 4, 3, padding=1), nn.Tanh(), nn.Upsample(scale_factor=2),  # 7-10
                  None, nn.Conv2d(12, 5, 1), nn.BatchNorm2d(5), None, nn.Linear(5, 7)]               # 11-15
        for i, layer in enumerate(layers):
            if layer is not None:
                self.add_module(str(i), layer)

    def forward(self, x):
        L = self._modules
        r = L["2"](L["1"](L["0"](x)))
        e = L["6"](L["4"](L["3"](r)) + r)                        # add @r, e: relu
        y = L["10"](L["9"](L["8"](L["7"](e))))
        y = torch.cat([y, e], 1)                                 # concat @e: the current tensor's channels first
        y = L["13"](L["12"](y)).mean((2, 3))                     # gap
        return L["15"](y)


MODELS = [
    dict(name="stack",
         spec="conv 8 3 pad 1, bn, relu, maxpool 2, conv 6 3 nobias, bn, relu, flatten, dense 16, bn, tanh, dense 10",
         input=(3, 12, 10), out=(10,),
         build=lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Conv2d(8, 6, 3, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(),
                                     nn.Linear(6 * 4 * 3, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 10))),
    dict(name="convt",
         spec="conv 4 3 pad 1, relu, convt 6 3 stride 2 pad 1, tanh, upsample 2, convt 5 2 stride 2 nobias, relu, conv 3 1",
         input=(2, 5, 4), out=(3, 36, 28),
         build=lambda: nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(),
                                     nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1), nn.Tanh(),
                                     nn.Upsample(scale_factor=2), nn.ConvTranspose2d(6, 5, 2, stride=2, bias=False),
                                     nn.ReLU(), nn.Conv2d(5, 3, 1))),
    dict(name="graph", spec=Graph.SPEC, input=(3, 8, 6), out=(7,), build=Graph),
]


def randomize(net, gen):
    """Random weights (PyTorch's init, re-drawn from gen), BatchNorm affine parameters and running statistics
    away from 1 and 0, num_batches_tracked not 0 (import must ignore it)."""
    with torch.no_grad():
        for mod in net.modules():
            if isinstance(mod, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                bound = 1.0 / (mod.weight[0].numel() ** 0.5)
                mod.weight.uniform_(-bound, bound, generator=gen)
                if mod.bias is not None:
                    mod.bias.uniform_(-bound, bound, generator=gen)
            elif isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.weight.uniform_(0.5, 1.5, generator=gen)
                mod.bias.uniform_(-0.5, 0.5, generator=gen)
                mod.running_mean.uniform_(-0.3, 0.3, generator=gen)
                mod.running_var.uniform_(0.5, 1.5, generator=gen)
                mod.num_batches_tracked.fill_(7)
    return net.eval()


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r.stdout


def check_model(cfg, cli, lam, tmp, gen, failures):
    name = cfg["name"]
    net = randomize(cfg["build"](), gen)
    sd = {k: v.detach().clone() for k, v in net.state_dict().items()}
    src, ckpt, out = (os.path.join(tmp, f"{name}{ext}") for ext in (".safetensors", ".lamina", ".out.safetensors"))
    save(src, sd)
    c, h, w = cfg["input"]
    run([cli, "import", src, "--model", cfg["spec"], "--input", f"{c}x{h}x{w}", "--out", ckpt])

    # outputs on fresh inputs, evaluation mode on both sides
    x = torch.randn((5, c, h, w), generator=gen)
    with torch.no_grad():
        want = net(x).numpy()
    got = lam.forward(ckpt, x.numpy(), cfg["out"])
    diff = float(np.max(np.abs(got.reshape(want.shape) - want)))
    print(f"{name}: import, max |lamina - torch| = {diff:.2e} over {want.size} outputs (tolerance {TOL})")
    if not diff <= TOL:
        failures.append(f"{name}: outputs differ by {diff}")

    # export: every tensor back, bit for bit
    run([cli, "export", "--load", ckpt, "--out", out])
    back, meta = read_st(out)
    if st_torch is not None:  # the package's own reader, with its own checks of the layout
        back_pkg = st_torch.load_file(out)
        assert set(back_pkg) == set(back) and all(torch.equal(back_pkg[k], back[k]) for k in back)
    if set(back) != set(sd):
        failures.append(f"{name}: export names {sorted(set(back) ^ set(sd))} differ from torch's")
        return
    bad = [k for k in sd if not (k.endswith("num_batches_tracked") or
                                 (back[k].dtype == torch.float32 and torch.equal(back[k], sd[k])))]
    bad += [k for k in sd if k.endswith("num_batches_tracked") and not (back[k].dtype == torch.int64 and
                                                                         back[k].shape == () and back[k].item() == 0)]
    if bad:
        failures.append(f"{name}: exported tensors differ from the originals: {bad}")
    if meta.get("lamina.spec") != cfg["spec"] or meta.get("lamina.input") != f"{c}x{h}x{w}":
        failures.append(f"{name}: metadata {meta}")
    net2 = cfg["build"]()
    net2.load_state_dict(back, strict=True)
    print(f"{name}: export, {len(back)} tensors equal to torch's, load_state_dict(strict=True) takes them")

    # other float dtypes convert to exactly their float32 values
    for dt in (torch.float64, torch.float16, torch.bfloat16):
        conv = {k: (v.to(dt) if v.is_floating_point() else v) for k, v in sd.items()}
        p = os.path.join(tmp, f"{name}.{str(dt)[6:]}.safetensors")
        write_st(p, conv)
        run([cli, "import", p, "--model", cfg["spec"], "--input", f"{c}x{h}x{w}", "--out", ckpt])
        run([cli, "export", "--load", ckpt, "--out", out])
        back, _ = read_st(out)
        bad = [k for k, v in conv.items() if v.is_floating_point() and not torch.equal(back[k], v.float())]
        if bad:
            failures.append(f"{name}: {dt} import differs from its float32 values in {bad}")
    print(f"{name}: F64, F16 and BF16 files import to exactly their float32 values")


def main():
    cli, library = os.environ.get("LAMINA_CLI"), os.environ.get("LAMINA_LIBRARY")
    if not cli or not library:
        print("set LAMINA_CLI (the lamina command) and LAMINA_LIBRARY (liblamina.so); CTest does")
        return 1
    print(f"torch {torch.__version__}; safetensors package: {'yes' if st_torch else 'no (the test writes the format itself)'}")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(15)
    lam = Lamina(library)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in MODELS:
            try:
                check_model(cfg, cli, lam, tmp, gen, failures)
            except Exception as e:  # noqa: BLE001 — report and go on to the next model
                failures.append(f"{cfg['name']}: {type(e).__name__}: {e}")
    for f in failures:
        print(f"FAIL {f}")
    print("all passed" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
