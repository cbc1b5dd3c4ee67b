"""Zero-copy exchange with other array libraries: DLPack capsules, made and read with ctypes (no C
extension), and the CUDA Array Interface (CAI, version 3).

Exporting: a DLManagedTensor that views lamina memory is kept here, with the array it views, until
its deleter runs (the consumer calls it when done; the capsule's destructor calls it when nobody took
the capsule). Importing: the producer's tensor is read from its capsule, the capsule renamed
"used_dltensor", and the producer's deleter called once when lamina lets go (Imported.release).
hidden.py wraps both sides in DeviceArray; this module knows nothing of lamina contexts.
"""
import ctypes
import os
import weakref
from ctypes import CFUNCTYPE, POINTER, PYFUNCTYPE, Structure, addressof, c_char_p, c_int, c_int32, c_int64, \
    c_uint8, c_uint16, c_uint64, c_void_p, py_object

import numpy as np

from ._lib import LaminaError

# ---- dlpack.h, the unversioned ABI (DLManagedTensor) that every consumer reads ----------------------

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
HOST_DEVICES = (KDL_CPU, KDL_CUDA_HOST)         # NumPy can view these
CUDA_DEVICES = (KDL_CUDA, KDL_CUDA_MANAGED)     # lamina's CUDA context can read these
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)),  # strides in elements; NULL: C order
                ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLDeleter = CFUNCTYPE(None, c_void_p)  # void (*)(DLManagedTensor *)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DLDeleter)]

# ---- the C API of this Python, through private prototypes (ctypes.pythonapi's shared attributes may
# carry another library's argtypes) --------------------------------------------------------------------

_api = ctypes.pythonapi
_Destructor = CFUNCTYPE(None, c_void_p)  # PyCapsule_Destructor, given the capsule as a raw pointer
_capsule_new = PYFUNCTYPE(py_object, c_void_p, c_char_p, _Destructor)(("PyCapsule_New", _api))
_capsule_valid = PYFUNCTYPE(c_int, py_object, c_char_p)(("PyCapsule_IsValid", _api))
_capsule_pointer = PYFUNCTYPE(c_void_p, py_object, c_char_p)(("PyCapsule_GetPointer", _api))
_capsule_set_name = PYFUNCTYPE(c_int, py_object, c_char_p)(("PyCapsule_SetName", _api))
_capsule_valid_raw = PYFUNCTYPE(c_int, c_void_p, c_char_p)(("PyCapsule_IsValid", _api))
_capsule_pointer_raw = PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer", _api))
# Module constants: a capsule keeps the name's pointer, so the bytes must outlive every capsule.
DLTENSOR, USED_DLTENSOR = b"dltensor", b"used_dltensor"

# A deleter or capsule destructor may run while an exception is being raised (a consumer that gives up
# and drops the capsule). ctypes calls the Python callback as it is, and with an exception set every
# call in it fails with SystemError, so the callback's first act is PyErr_Fetch: no argtypes (their
# from_param would be such a call) and pre-made pointer arguments. The exception is put back at the
# end; ctypes then reports it as raised by the callback ("Exception ignored ..."), which is as far as
# a callback can carry it, and the memory is released either way. Two threads running these callbacks
# with exceptions set at the same moment could swap the saved exceptions; nothing worse.
_pydll = ctypes.PyDLL(_api._name, handle=_api._handle)  # the same library, attributes of its own
_err_fetch = _pydll.PyErr_Fetch
_err_fetch.restype = None
_ERR = (c_void_p * 3)()
_ERR_REFS = tuple(ctypes.byref(_ERR, i * ctypes.sizeof(c_void_p)) for i in range(3))
_err_restore = PYFUNCTYPE(None, c_void_p, c_void_p, c_void_p)(("PyErr_Restore", _api))


def _callback(proto, work):
    """proto(work) as a C callback that is safe to run with an exception set (see above)."""
    def run(arg, _fetch=_err_fetch, _refs=_ERR_REFS, _err=_ERR, _restore=_err_restore, _work=work):
        _fetch(*_refs)
        saved = _err[0], _err[1], _err[2]
        try:
            _work(arg)
        finally:
            if saved[0] is not None:
                _restore(*saved)
    return proto(run)


# ---- export --------------------------------------------------------------------------------------------

_exported = {}  # address of a DLManagedTensor handed out -> (the struct, its shape and strides, its array)


def _release_export(addr):
    _exported.pop(addr, None)


def _capsule_gone(capsule):
    # Still "dltensor": no consumer took it, so its tensor is ours to release ("used_dltensor": theirs).
    if _capsule_valid_raw(capsule, DLTENSOR):
        _release_export(_capsule_pointer_raw(capsule, DLTENSOR))


_deleter = _callback(DLDeleter, _release_export)
_destructor = _callback(_Destructor, _capsule_gone)


def dl_dtype(dt):
    """(code, bits, lanes) of a NumPy dtype."""
    codes = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
    return codes[dt.kind], dt.itemsize * 8, 1


def c_strides(shape):
    """Strides in elements of a C-contiguous array of `shape`."""
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= max(int(s), 1)
    return tuple(reversed(out))


def export_capsule(owner, ptr, shape, dtype, device):
    """A "dltensor" capsule viewing `ptr` (shape, NumPy dtype, (device_type, device_id)); `owner`, the
    array that holds the memory, stays alive until the consumer's deleter call."""
    m = DLManagedTensor()
    nd = len(shape)
    dims = (c_int64 * max(nd, 1))(*shape)
    steps = (c_int64 * max(nd, 1))(*c_strides(shape))
    t = m.dl_tensor
    t.data = ptr
    t.device = DLDevice(*device)
    t.ndim = nd
    t.dtype = DLDataType(*dl_dtype(np.dtype(dtype)))
    t.shape = ctypes.cast(dims, POINTER(c_int64))
    t.strides = ctypes.cast(steps, POINTER(c_int64))  # explicit: older consumers do not take NULL
    t.byte_offset = 0
    m.deleter = _deleter
    addr = addressof(m)
    _exported[addr] = (m, dims, steps, owner)
    try:
        return _capsule_new(addr, DLTENSOR, _destructor)
    except BaseException:
        _release_export(addr)
        raise


def exported_count():
    """DLManagedTensors handed out and not yet released (for tests)."""
    return len(_exported)


# ---- import --------------------------------------------------------------------------------------------

def is_capsule(x):
    return type(x).__name__ == "PyCapsule"


def dtype_name(code, bits, lanes):
    name = f"{_CODE_NAMES.get(code, f'code {code} ')}{bits}"
    return name if lanes == 1 else f"{name}x{lanes}"


def numpy_dtype(code, bits, lanes):
    """The NumPy dtype of a DLPack one, or None where NumPy has none (bfloat16, vectors)."""
    kinds = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
    if lanes != 1 or code not in kinds or bits % 8:
        return None
    try:
        return np.dtype(f"{kinds[code]}{bits // 8}") if code != 6 else np.dtype(np.bool_)
    except TypeError:
        return None


def is_c_contiguous(shape, strides):
    """strides (in elements, None: C order) describe shape in C order? Sizes of 1 may have any stride."""
    if strides is None or 0 in shape:
        return True
    return all(s == 1 or st == want for s, st, want in zip(shape, strides, c_strides(shape)))


class Imported:
    """A DLPack tensor read from its capsule. The capsule is left as it is (its destructor frees the
    tensor) until take(), which renames it "used_dltensor": from then on release() calls the
    producer's deleter, once."""

    def __init__(self, capsule):
        if not is_capsule(capsule):
            raise TypeError(f"__dlpack__() returned {type(capsule).__name__}, not a PyCapsule")
        if _capsule_valid(capsule, USED_DLTENSOR):
            raise ValueError("this DLPack capsule was consumed already (a capsule can be taken once; call "
                             "__dlpack__() again for another)")
        if not _capsule_valid(capsule, DLTENSOR):
            raise TypeError("not a DLPack capsule: its name is not 'dltensor' (versioned 'dltensor_versioned' "
                            "capsules are not read; call __dlpack__() without max_version)")
        self._capsule = capsule
        self._addr = _capsule_pointer(capsule, DLTENSOR)
        m = DLManagedTensor.from_address(self._addr)
        t = m.dl_tensor
        self.device = (int(t.device.device_type), int(t.device.device_id))
        self.shape = tuple(int(t.shape[i]) for i in range(t.ndim))
        self.strides = tuple(int(t.strides[i]) for i in range(t.ndim)) if t.strides else None
        self.dl_dtype = (int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes))
        self.dtype = numpy_dtype(*self.dl_dtype)
        self.ptr = (t.data or 0) + int(t.byte_offset)
        self._deleter = m.deleter
        self._owned = False

    def take(self):
        if _capsule_set_name(self._capsule, USED_DLTENSOR) != 0:
            raise RuntimeError("could not rename the DLPack capsule to 'used_dltensor'")
        self._owned = True
        self._capsule = None

    def release(self):
        owned, self._owned = self._owned, False
        if owned and self._deleter:
            self._deleter(self._addr)


def host_view(imp):
    """A NumPy array viewing a host tensor (kDLCPU) of `imp`, which it takes; the producer's deleter
    runs when the last view of it goes."""
    if imp.dtype is None:
        raise TypeError(f"NumPy has no dtype for DLPack's {dtype_name(*imp.dl_dtype)}")
    dt = imp.dtype
    steps = imp.strides if imp.strides is not None else c_strides(imp.shape)
    if any(st < 0 for st in steps):
        raise ValueError("a DLPack tensor with negative strides is not viewed; make it contiguous first")
    size = int(np.prod(imp.shape, dtype=np.int64))
    imp.take()
    if size == 0:
        imp.release()
        return np.empty(imp.shape, dt)
    extent = (sum((s - 1) * st for s, st in zip(imp.shape, steps)) + 1) * dt.itemsize
    base = np.frombuffer((ctypes.c_char * extent).from_address(imp.ptr), np.uint8)
    weakref.finalize(base, imp.release)
    return np.ndarray(imp.shape, dt, buffer=base, strides=tuple(st * dt.itemsize for st in steps))


def read_cai(obj):
    """(ptr, shape, dtype, readonly, strides in elements or None, stream) of obj.__cuda_array_interface__."""
    cai = obj.__cuda_array_interface__
    shape = tuple(int(s) for s in cai["shape"])
    dt = np.dtype(cai["typestr"])
    ptr, readonly = cai["data"]
    if cai.get("mask") is not None:
        raise ValueError("masked CUDA arrays (__cuda_array_interface__ with a mask) are not taken")
    strides = cai.get("strides")
    if strides is not None:
        if any(int(b) % dt.itemsize for b in strides):
            raise ValueError(f"strides {tuple(strides)} are not whole {dt} elements")
        strides = tuple(int(b) // dt.itemsize for b in strides)
    # Version 3: the stream the data is ready on, which the consumer waits for (None: nothing to wait
    # for); CUDA_ARRAY_INTERFACE_SYNC=0 turns that off, as in Numba.
    stream = cai.get("stream") if int(cai.get("version", 0)) >= 3 else None
    if os.environ.get("CUDA_ARRAY_INTERFACE_SYNC", "1") == "0":
        stream = None
    return int(ptr or 0), shape, dt, bool(readonly), strides, stream


# ---- waiting on another library's stream -----------------------------------------------------------------

class _Driver:
    """The CUDA driver API (libcuda), for the one thing lamina's C API has no call for: waiting on a
    stream of another library. The device's primary context is the one CUDA runtimes share."""

    def __init__(self, ordinal):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise LaminaError(f"cannot wait on the producer's CUDA stream: libcuda.so.1 did not load ({e})") from None
        dev, self.ctx = c_int(), c_void_p()
        self._check(self.lib.cuInit(0), "cuInit")
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")

    def _check(self, rc, what):
        if rc != 0:
            msg = c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(msg))
            raise LaminaError(f"{what} failed: {msg.value.decode() if msg.value else 'CUDA error'} ({rc})")

    def sync(self, stream):
        self._check(self.lib.cuCtxPushCurrent_v2(self.ctx), "cuCtxPushCurrent")
        try:
            self._check(self.lib.cuStreamSynchronize(c_void_p(stream)), f"cuStreamSynchronize(stream {stream:#x})")
        finally:
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(c_void_p()))


_drivers = {}


def sync_stream(stream, ordinal):
    """Waits until the work queued on CUDA stream `stream` (a handle; 1 the legacy default stream, 2
    the per-thread one) of device `ordinal` is done."""
    drv = _drivers.get(ordinal)
    if drv is None:
        drv = _drivers[ordinal] = _Driver(ordinal)
    drv.sync(int(stream))
