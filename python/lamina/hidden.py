"""The hidden layer out = tanh(grey / 255 * w) from NumPy, and device-resident arrays for repeated calls.

Host arrays go to C as they are: the data pointer of the caller's (pageable) NumPy array, no copy
unless the layout or dtype forces one. On CUDA, lamina streams such arrays through its pinned staging
buffers itself; copying them first in Python would only add a pass over memory.

Device arrays of other libraries (CuPy, Numba, PyTorch: anything with __dlpack__ or
__cuda_array_interface__) go in as they are too, viewed by from_dlpack(); a DeviceArray goes out the
same ways (__dlpack__, __cuda_array_interface__), without a copy either way.
"""
import re
import threading

import numpy as np
from ctypes import byref, c_void_p

from . import _arrays, _interop, _lib, _outputs
from ._context import Closing, auto_context_now, get_context, normalize_device, start_auto
from ._lib import check, lib

_DTYPE_CODE = {np.dtype(np.float32): _lib.DTYPE_F32, np.dtype(np.uint8): _lib.DTYPE_U8}


class DeviceArray(Closing):
    """An array in backend memory of one lamina context (device memory on CUDA, host memory from the
    context's allocator on the CPU): upload once with to_device(), use it in many calls, read it back
    with .numpy(). Freed by close(), a `with` block, or when garbage-collected; the context stays alive
    as long as the array does."""

    def __init__(self, shape, dtype=np.float32, device="auto", _ctx=None):
        dt = np.dtype(dtype)
        if dt not in _DTYPE_CODE:
            raise TypeError(f"a DeviceArray holds float32 or uint8, not {dt}")
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"shape {shape} has a negative dimension")
        self._ctx = _ctx or get_context(device)
        self.shape = shape
        self.dtype = dt
        self.size = int(np.prod(shape, dtype=np.int64))
        self.nbytes = self.size * dt.itemsize
        ptr = c_void_p()
        self._owner = self._release = None  # lamina's own memory (see _view)
        self.readonly = False
        with self._ctx.lock:
            # lam_mem_alloc hands out at least one block even for 0 bytes; asking for 1 keeps that plain.
            check(lib.lam_mem_alloc(self._ctx.ptr, byref(ptr), max(self.nbytes, 1)))
        self._ptr = ptr.value

    @classmethod
    def _view(cls, ctx, ptr, shape, dtype, owner, release=None, readonly=False):
        """A DeviceArray over memory that another library holds: `owner` (kept referenced) keeps it
        alive, and close() calls `release` (a DLPack deleter) instead of freeing it."""
        self = cls.__new__(cls)
        self._ctx, self.shape, self.dtype = ctx, tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self._owner, self._release, self.readonly = owner, release, readonly
        self._ptr = ptr
        return self

    @property
    def device(self):
        """"cpu" or "cuda": the backend whose memory holds the array."""
        return self._ctx.device

    @property
    def ptr(self):
        """The address in backend memory (a device pointer on CUDA), for other CUDA libraries."""
        self._check_open()
        return self._ptr

    @property
    def closed(self):
        return self._ptr is None

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self):
        state = "closed" if self.closed else f"{self.nbytes} bytes"
        if not self.closed and self._owner is not None:
            state += f" of a {type(self._owner).__name__}" if not isinstance(self._owner, _interop.Imported) else \
                " from a DLPack capsule"
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device!r}, {state})"

    def __array__(self, dtype=None, copy=None):
        # An implicit download would hide a copy of the whole array in np.asarray() or np.allclose();
        # CuPy refuses it for the same reason.
        raise TypeError("a DeviceArray is not converted to NumPy implicitly; call .numpy() to copy it to the host")

    def _check_open(self):
        if self._ptr is None:
            raise ValueError("this DeviceArray was closed (its memory is freed)")

    # ---- zero-copy exchange (DLPack, CUDA Array Interface) ----
    # lamina queues kernels on a stream of its own, which it does not hand out: before another library
    # may touch the memory, the export waits for the context's queued work (lam_ctx_sync).

    def __dlpack_device__(self):
        """(kDLCUDA = 2, device) on CUDA, (kDLCPU = 1, 0) on the CPU."""
        return (_interop.KDL_CUDA, _cuda_ordinal(self._ctx)) if self.device == "cuda" else (_interop.KDL_CPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule ("dltensor") viewing this array, no copy: torch.from_dlpack(a),
        cupy.from_dlpack(a), np.from_dlpack(a) (CPU arrays). The array stays alive until the consumer
        lets go. stream: the consumer's CUDA stream; lamina's queued work is waited for unless it is -1.
        max_version is accepted and the unversioned capsule returned (which the standard allows)."""
        self._check_open()
        here = self.__dlpack_device__()
        if dl_device is not None and tuple(int(v) for v in dl_device) != here:
            raise BufferError(f"this DeviceArray is on DLPack device {here}, not {tuple(dl_device)}; lamina does not "
                              f"copy between devices in __dlpack__ (use .numpy() for a host copy)")
        if copy:
            raise BufferError("lamina exports its memory as it is; for a copy use .numpy() (host) or copy in the "
                              "consumer")
        if here[0] == _interop.KDL_CPU:
            if stream is not None:
                raise BufferError(f"stream={stream!r} for a CPU DeviceArray: on the CPU only stream=None is accepted")
        elif stream != -1:
            self._ctx.sync()
        return _interop.export_capsule(self, self._ptr, self.shape, self.dtype, here)

    @property
    def __cuda_array_interface__(self):
        """CUDA Array Interface version 3 (Numba, CuPy): strides None (C order), stream None, because the
        work lamina queued on the array is waited for here."""
        if self._ctx.device != "cuda":
            raise AttributeError("a CPU DeviceArray is host memory, which __cuda_array_interface__ cannot describe; "
                                 "use np.from_dlpack(a) (a view) or a.numpy() (a copy)")
        self._check_open()
        self._ctx.sync()
        return {"version": 3, "shape": self.shape, "typestr": self.dtype.str,
                "data": (self._ptr if self.size else 0, self.readonly), "strides": None, "stream": None}

    def numpy(self, out=None):
        """Copies the array to the host: a new NumPy array, or into `out` (same dtype and size,
        C-contiguous). Waits for work queued on it."""
        self._check_open()
        if out is None:
            out = np.empty(self.shape, self.dtype)
        else:
            if not isinstance(out, np.ndarray) or out.dtype != self.dtype or out.size != self.size:
                raise ValueError(f"out must be a NumPy {self.dtype} array of {self.size} values")
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise ValueError("out must be C-contiguous and writeable")
        with self._ctx.lock:
            check(lib.lam_mem_download(self._ctx.ptr, out.ctypes.data, self._ptr, self.nbytes))
        return out

    def upload(self, x):
        """Copies a host array of the same size into this one (converting real numbers to its dtype)."""
        self._check_open()
        if self.readonly:
            raise ValueError("this DeviceArray views read-only memory of another library")
        a = _arrays.host_input(x, "x", (self.dtype,))
        if a.size != self.size:
            raise ValueError(f"x has {a.size} values but this DeviceArray holds {self.size}")
        with self._ctx.lock:
            check(lib.lam_mem_upload(self._ctx.ptr, self._ptr, a.ctypes.data, self.nbytes))
        return self

    def close(self):
        """Frees the memory (back to the context's cache); for a view of another library's memory, lets
        go of it (its DLPack deleter, or the reference to its owner). Safe to call twice."""
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is None:
            return
        owner, release = getattr(self, "_owner", None), getattr(self, "_release", None)
        if owner is None:
            with self._ctx.lock:
                check(lib.lam_mem_free(self._ctx.ptr, ptr))
            return
        self._owner = self._release = None
        if release is not None:
            release()


def _cuda_ordinal(ctx):
    """The CUDA device of a lamina context (its name starts "cuda:N")."""
    m = re.match(r"cuda:(\d+)", ctx.name)
    return int(m.group(1)) if m else 0


def _cuda_context_for(ordinal):
    ctx = get_context("cuda")
    if _cuda_ordinal(ctx) != ordinal:
        raise ValueError(f"the array is memory of CUDA device {ordinal}, but lamina runs on device {_cuda_ordinal(ctx)}")
    return ctx


def _device_view(imp, owner):
    """A DeviceArray over the CUDA tensor `imp` (an _interop.Imported), which it takes."""
    if imp.dtype not in _DTYPE_CODE:
        raise TypeError(f"lamina takes float32 or uint8 device arrays, not {_interop.dtype_name(*imp.dl_dtype)}; "
                        f"convert in the library that made it (that copy is its own)")
    if not _interop.is_c_contiguous(imp.shape, imp.strides):
        raise ValueError(f"the device array (shape {imp.shape}, strides {imp.strides} elements) is not C-contiguous; "
                         f"make it contiguous first (e.g. .contiguous() in PyTorch, cupy.ascontiguousarray)")
    ctx = _cuda_context_for(imp.device[1])
    imp.take()
    return DeviceArray._view(ctx, imp.ptr, imp.shape, imp.dtype, owner if owner is not None else imp, imp.release)


def from_dlpack(x):
    """Another library's array as lamina's, without a copy.

    x: anything with __dlpack__ (PyTorch, CuPy, JAX, NumPy), with __cuda_array_interface__ (Numba, CuPy,
    PyTorch), or a DLPack capsule. CUDA memory becomes a DeviceArray over the same memory (float32 or
    uint8, C-contiguous), which keeps x alive and lets go of it on close(); host memory (kDLCPU) becomes
    a NumPy view (np.from_dlpack), which lamina's calls take as it is. The producer's queued work on the
    array is waited for (the stream it names). A DeviceArray is returned as it is."""
    if isinstance(x, DeviceArray):
        x._check_open()
        return x
    if _interop.is_capsule(x):
        imp = _interop.Imported(x)
        if imp.device[0] in _interop.HOST_DEVICES:
            return _interop.host_view(imp)
        if imp.device[0] in _interop.CUDA_DEVICES:
            return _device_view(imp, None)
        raise TypeError(f"a DLPack capsule on device type {imp.device[0]}: lamina reads CPU and CUDA memory")
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        kind, ordinal = (int(v) for v in x.__dlpack_device__())
        if kind in _interop.HOST_DEVICES:
            if hasattr(np, "from_dlpack"):  # NumPy >= 1.22
                return np.from_dlpack(x)
            return _interop.host_view(_interop.Imported(x.__dlpack__()))
        if kind not in _interop.CUDA_DEVICES:
            raise TypeError(f"{type(x).__name__} is on DLPack device type {kind}: lamina reads CPU and CUDA memory")
        _cuda_context_for(ordinal)  # before the producer queues anything for us
        # Ask for it ready on the legacy default stream (1), then wait for that stream: lamina's own
        # stream is not one the producer could be given.
        try:
            capsule = x.__dlpack__(stream=1)
        except TypeError:  # a producer without the stream argument
            capsule = x.__dlpack__()
        _interop.sync_stream(1, ordinal)
        return _device_view(_interop.Imported(capsule), x)
    if hasattr(x, "__cuda_array_interface__"):
        ptr, shape, dt, readonly, strides, stream = _interop.read_cai(x)
        if dt not in _DTYPE_CODE:
            raise TypeError(f"lamina takes float32 or uint8 device arrays, not {dt}; convert in the library that made it")
        if not _interop.is_c_contiguous(shape, strides):
            raise ValueError(f"the device array (shape {shape}, strides {strides} elements) is not C-contiguous; make it "
                             f"contiguous first")
        ctx = get_context("cuda")
        if stream is not None:
            _interop.sync_stream(stream, _cuda_ordinal(ctx))
        return DeviceArray._view(ctx, ptr, shape, dt, x, readonly=readonly)
    raise TypeError(f"{type(x).__name__} has neither __dlpack__ nor __cuda_array_interface__ (NumPy arrays and other "
                    f"host arrays go to lamina's calls as they are)")


def _is_foreign_device_array(x):
    """x is CUDA memory of another library (what from_dlpack makes a DeviceArray of)."""
    if x is None or isinstance(x, (DeviceArray, np.ndarray)):
        return False
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            return int(x.__dlpack_device__()[0]) in _interop.CUDA_DEVICES
        except Exception:
            return False
    return hasattr(x, "__cuda_array_interface__")



def to_device(x, device="auto"):
    """Uploads a host array (float32 or uint8; other real numbers are converted to float32) to a new
    DeviceArray on `device`."""
    a = _arrays.host_input(x, "x", (np.float32, np.uint8))
    return DeviceArray(a.shape, a.dtype, device).upload(a)


def device_empty(shape, dtype=np.float32, device="auto"):
    """A new, uninitialized DeviceArray (e.g. for create_hidden_layer's out=)."""
    return DeviceArray(shape, dtype, device)


def _pick_context(device, arrays):
    """(context, note): the context of the DeviceArrays among `arrays`, which must all share one, else
    `device`'s; for "auto" on host arrays, the CPU one while the AUTO context starts in the background
    (note says so; None otherwise)."""
    ctxs = {id(a._ctx): a._ctx for a in arrays if isinstance(a, DeviceArray)}
    if not ctxs:
        if normalize_device(device) == "auto":
            return auto_context_now()
        return get_context(device), None
    if len(ctxs) > 1:
        raise ValueError("the DeviceArrays live on different devices ("
                         + ", ".join(sorted(c.device for c in ctxs.values())) + "); put them on one")
    ctx = next(iter(ctxs.values()))
    want = normalize_device(device)
    if want != "auto" and want != ctx.device:
        raise ValueError(f"device={device!r} but the DeviceArrays are on {ctx.device!r}")
    return ctx, None


_last = threading.local()


def last_call():
    """Where this thread's last create_hidden_layer ran: {"device": "cpu"|"cuda", "choice": why (on
    device="auto", the expected milliseconds of each side), "ms": its wall time in C}, or None before
    the first call. With device="auto" (the default) a call on host arrays runs where it is expected to
    be faster; the first calls of a process run on the host threads while the GPU's context starts."""
    return getattr(_last, "call", None)


def create_hidden_layer(greyscales, weights, device="auto", out=None, return_timing=False):
    """out = tanh(greyscales / 255 * weights), elementwise, as float32 — fused, in one call.

    greyscales: float32 (0 to 255) or uint8 values; weights: float32, the same shape. Either may be a
    NumPy array (any shape; C-contiguous arrays are passed without a copy, others are copied; other real
    dtypes are converted with a copy), a DeviceArray, or a CUDA array of another library (CuPy, Numba,
    PyTorch: __dlpack__ or __cuda_array_interface__, float32/uint8, C-contiguous), read where it is.
    device: "auto" (the default), "cpu" or "cuda"; with device arrays, their device. On "auto", device
    arrays run on the GPU and host arrays where this machine runs them faster — on the host threads or
    through the GPU, by a cost model measured once per process — and the calls made while the GPU's
    context is still starting (on a background thread, from the first call) run on the host threads;
    lamina.last_call() says where a call ran and why. out: a float32
    C-contiguous NumPy array, DeviceArray or CUDA array of another library, of the same size, to write
    into; by default a new NumPy array, or a new DeviceArray when both inputs are device arrays (then
    the call is queued on the device and returns at once; .numpy() waits). A call that involves another
    library's arrays waits for its kernel before returning, so that library may read or reuse them.

    Returns out, or (out, timing) with return_timing=True: where the call's milliseconds went
    (staging, copy_in, kernel, copy_out, total, chunks; see lam_hidden_timing in lamina.h) and device,
    where it ran ("cpu" or "cuda").
    """
    views = []  # DeviceArrays over other libraries' memory, let go of before returning

    def own(x):
        if not _is_foreign_device_array(x):
            return x
        v = from_dlpack(x)
        views.append(v)
        return v

    try:
        g, w, o = own(greyscales), own(weights), own(out)
        if o is not out and o.readonly:
            raise ValueError("out is read-only memory (its __cuda_array_interface__ says so)")
        result, timing = _hidden(g, w, device, o, return_timing, wait=bool(views))
    finally:
        for v in views:
            v.close()
    if out is not None and o is not out:
        result = out  # the caller's own array, now holding the result
    return (result, timing) if return_timing else result


def _hidden(greyscales, weights, device, out, return_timing, wait):
    """create_hidden_layer on NumPy arrays and DeviceArrays: (out, timing dict or None). wait: let the
    queued kernel finish before returning."""
    ctx, note = _pick_context(device, (greyscales, weights, out))
    if isinstance(greyscales, DeviceArray):
        greyscales._check_open()
        g = greyscales
    else:
        g = _arrays.host_input(greyscales, "greyscales", (np.float32, np.uint8))
    if isinstance(weights, DeviceArray):
        weights._check_open()
        if weights.dtype != np.float32:
            raise TypeError(f"weights has dtype {weights.dtype}; it must be float32")
        w = weights
    else:
        w = _arrays.host_input(weights, "weights", (np.float32,))
    if g.dtype not in _DTYPE_CODE:
        raise TypeError(f"greyscales has dtype {g.dtype}; it must be float32 or uint8")
    if g.size != w.size:
        raise ValueError(f"greyscales has {g.size} values but weights has {w.size}: they must have the same length")
    if g.shape != w.shape:
        raise ValueError(f"greyscales has shape {g.shape} but weights has shape {w.shape}: give them the same shape")
    n = g.size

    if out is None:
        if isinstance(g, DeviceArray) and isinstance(w, DeviceArray):
            out = DeviceArray(g.shape, np.float32, _ctx=ctx)
        else:
            out = _outputs.empty(g.shape, n)
    elif isinstance(out, DeviceArray):
        out._check_open()
        if out.dtype != np.float32:
            raise TypeError(f"out has dtype {out.dtype}; it must be float32")
        if out.size != n:
            raise ValueError(f"out has {out.size} values but the inputs have {n}")
    else:
        _arrays.host_output(out, g.shape)

    def addr(a):
        return a._ptr if isinstance(a, DeviceArray) else a.ctypes.data

    timing = _lib.HiddenTiming()
    # g, w and out are local references: the NumPy memory stays alive until C returns.
    with ctx.lock:
        check(lib.lam_hidden(ctx.ptr, n, addr(g), _DTYPE_CODE[g.dtype], addr(w), addr(out), byref(timing)))
        choice = note or lib.lam_hidden_choice(ctx.ptr).decode(errors="replace")
    if note is not None:
        start_auto()  # after the call: see auto_context_now
    if wait:
        ctx.sync()
    where = _lib.DEVICE_NAMES.get(timing.device, "?")
    _last.call = {"device": where, "choice": choice, "ms": timing.total}
    if return_timing:
        t = {name: getattr(timing, name) for name, _ in _lib.HiddenTiming._fields_}
        t["device"] = where
        return out, t
    return out, None
