"""The hidden layer out = tanh(grey / 255 * w) from NumPy, and device-resident arrays for repeated calls.

Host arrays go to C as they are: the data pointer of the caller's (pageable) NumPy array, no copy
unless the layout or dtype forces one. On CUDA, lamina streams such arrays through its pinned staging
buffers itself; copying them first in Python would only add a pass over memory.
"""
import numpy as np
from ctypes import byref, c_void_p

from . import _arrays, _lib
from ._context import Closing, get_context, normalize_device
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
        with self._ctx.lock:
            # lam_mem_alloc hands out at least one block even for 0 bytes; asking for 1 keeps that plain.
            check(lib.lam_mem_alloc(self._ctx.ptr, byref(ptr), max(self.nbytes, 1)))
        self._ptr = ptr.value

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
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device!r}, {state})"

    def __array__(self, dtype=None, copy=None):
        # An implicit download would hide a copy of the whole array in np.asarray() or np.allclose();
        # CuPy refuses it for the same reason.
        raise TypeError("a DeviceArray is not converted to NumPy implicitly; call .numpy() to copy it to the host")

    def _check_open(self):
        if self._ptr is None:
            raise ValueError("this DeviceArray was closed (its memory is freed)")

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
        a = _arrays.host_input(x, "x", (self.dtype,))
        if a.size != self.size:
            raise ValueError(f"x has {a.size} values but this DeviceArray holds {self.size}")
        with self._ctx.lock:
            check(lib.lam_mem_upload(self._ctx.ptr, self._ptr, a.ctypes.data, self.nbytes))
        return self

    def close(self):
        """Frees the memory (back to the context's cache). Safe to call twice."""
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is not None:
            with self._ctx.lock:
                check(lib.lam_mem_free(self._ctx.ptr, ptr))



def to_device(x, device="auto"):
    """Uploads a host array (float32 or uint8; other real numbers are converted to float32) to a new
    DeviceArray on `device`."""
    a = _arrays.host_input(x, "x", (np.float32, np.uint8))
    return DeviceArray(a.shape, a.dtype, device).upload(a)


def device_empty(shape, dtype=np.float32, device="auto"):
    """A new, uninitialized DeviceArray (e.g. for create_hidden_layer's out=)."""
    return DeviceArray(shape, dtype, device)


def _pick_context(device, arrays):
    """The context of the DeviceArrays among `arrays`, which must all share one, else `device`'s."""
    ctxs = {id(a._ctx): a._ctx for a in arrays if isinstance(a, DeviceArray)}
    if not ctxs:
        return get_context(device)
    if len(ctxs) > 1:
        raise ValueError("the DeviceArrays live on different devices ("
                         + ", ".join(sorted(c.device for c in ctxs.values())) + "); put them on one")
    ctx = next(iter(ctxs.values()))
    want = normalize_device(device)
    if want != "auto" and want != ctx.device:
        raise ValueError(f"device={device!r} but the DeviceArrays are on {ctx.device!r}")
    return ctx


def create_hidden_layer(greyscales, weights, device="auto", out=None, return_timing=False):
    """out = tanh(greyscales / 255 * weights), elementwise, as float32 — fused, in one call.

    greyscales: float32 (0 to 255) or uint8 values; weights: float32, the same shape. Either may be a
    NumPy array (any shape; C-contiguous arrays are passed without a copy, others are copied; other real
    dtypes are converted with a copy) or a DeviceArray. device: "auto" (CUDA if present), "cpu" or "cuda";
    with DeviceArrays, their device. out: a float32 C-contiguous NumPy array or DeviceArray of the same
    size to write into; by default a new NumPy array, or a new DeviceArray when both inputs are
    DeviceArrays (then the call is queued on the device and returns at once; .numpy() waits).

    Returns out, or (out, timing) with return_timing=True: where the call's milliseconds went
    (staging, copy_in, kernel, copy_out, total, chunks; see lam_hidden_timing in lamina.h).
    """
    ctx = _pick_context(device, (greyscales, weights, out))
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
            out = np.empty(g.shape, np.float32)
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

    timing = _lib.HiddenTiming() if return_timing else None
    # g, w and out are local references: the NumPy memory stays alive until C returns.
    with ctx.lock:
        check(lib.lam_hidden(ctx.ptr, n, addr(g), _DTYPE_CODE[g.dtype], addr(w), addr(out),
                             byref(timing) if timing is not None else None))
    if return_timing:
        return out, {name: getattr(timing, name) for name, _ in _lib.HiddenTiming._fields_}
    return out
