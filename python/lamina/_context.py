"""lamina contexts, one per device, made on first use and kept for the life of the process.

Creating a CUDA context takes a good part of a second and its pinned staging buffers are reused from
call to call, so a fresh context per call would cost more than the work. The cached contexts are never
freed: device arrays and models hold them, and freeing at interpreter exit would race their own
finalizers; the process's exit gives everything back.

The AUTO context is made on a background thread from the end of the first create_hidden_layer(device="auto")
(or from import with LAMINA_PREWARM=1): a CUDA context takes ~0.2 s to make, more than the whole call takes on
the host threads, so the calls made before it is ready run on the CPU context, and the AUTO context,
once made, chooses per call (lam_hidden on a LAM_DEVICE_AUTO context; its cost model is calibrated on
that background thread too). Nothing is made at import by default, and a process that never asks for
"auto" or "cuda" never makes a CUDA context.

A C context may be used by one thread at a time, and ctypes drops the GIL during calls, so every call
on a context holds its lock. A model sees its context through a ModelContext, whose lock also sets the
model's precision.
"""
import operator
import os
import threading
from ctypes import byref, c_char_p, c_size_t, c_void_p

from . import _lib
from ._lib import check, lib


class Closing:
    """What owns lamina memory: usable in `with`, freed by close() or when collected."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit the library may be gone; the process frees it anyway
            pass


class Context:
    """One lam_ctx. `device` is "cpu" or "cuda" (what it runs on, AUTO resolved)."""

    def __init__(self, want):
        ptr = c_void_p()
        check(lib.lam_ctx_create(byref(ptr), _lib.DEVICES[want]))
        self.ptr = ptr.value
        self.device = _lib.DEVICE_NAMES[lib.lam_ctx_device(self.ptr)]
        self.name = lib.lam_ctx_device_name(self.ptr).decode()
        self.reason = lib.lam_ctx_choice_reason(self.ptr).decode()
        self.lock = threading.RLock()
        self.precision = _lib.PRECISIONS["fp32"]  # what lam_ctx_create starts with; ModelContext changes it

    def __repr__(self):
        return f"<lamina context {self.device}: {self.name}>"

    def sync(self):
        with self.lock:
            check(lib.lam_ctx_sync(self.ptr))


def normalize_precision(precision):
    names = "', '".join(_lib.PRECISIONS)
    if not isinstance(precision, str):
        raise TypeError(f"precision must be one of '{names}', not {type(precision).__name__}")
    p = precision.strip().lower()
    if p not in _lib.PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of '{names}'")
    return p


class _PrecisionLock:
    """A context's lock that, once held, also puts the context in one precision. The precision belongs
    to the C context (cuBLAS's math mode, how convs lay out their buffers), and the models on a device
    share its context: each model's calls set its own first. Setting it is cheap (a field, and on CUDA
    the handle's math mode); a model re-plans its batch buffers for a new one by itself."""

    def __init__(self, ctx, code):
        self._ctx = ctx
        self._code = code

    def __enter__(self):
        ctx = self._ctx
        ctx.lock.acquire()
        try:
            if ctx.precision != self._code:
                check(lib.lam_ctx_set_precision(ctx.ptr, self._code))
                ctx.precision = self._code
        except BaseException:
            ctx.lock.release()
            raise
        return self

    def __exit__(self, *exc):
        self._ctx.lock.release()


class ModelContext:
    """A Context as one model uses it: the same context (its attributes read through), whose lock also
    sets the model's precision ("fp32", "tf32", "bf16" or "fp16"), so that everything the model does in C,
    under `with ctx.lock`, runs in it."""

    def __init__(self, ctx, precision):
        self.context = ctx
        self.precision_name = normalize_precision(precision)
        self.lock = _PrecisionLock(ctx, _lib.PRECISIONS[self.precision_name])

    def __getattr__(self, name):  # ptr, device, name, reason, sync
        return getattr(self.context, name)


_contexts = {}  # "cpu", "cuda", and "auto" pointing at one of them
_contexts_lock = threading.Lock()


def normalize_device(device):
    if device is None:
        return "auto"
    if not isinstance(device, str):
        raise TypeError(f"device must be 'auto', 'cpu' or 'cuda', not {type(device).__name__}")
    d = device.strip().lower()
    if d not in _lib.DEVICES:
        raise ValueError(f"device {device!r} is not one of 'auto', 'cpu', 'cuda'")
    return d


def get_context(device="auto"):
    """The process's context for `device` ("auto", "cpu", "cuda"), made on first use. AUTO takes CUDA
    when a device is present (the C library decides, honouring LAMINA_DEVICE) and shares the context
    of the device it picked, so that "auto" and "cuda" never make two CUDA contexts."""
    d = normalize_device(device)
    t = _auto_start["thread"]
    if t is not None and d != "cpu" and t is not threading.current_thread():
        t.join()  # the AUTO context being made in the background is the one this asks for
    with _contexts_lock:
        ctx = _contexts.get(d)
        if ctx is not None:
            return ctx
        ctx = Context(d)
        # AUTO may pick a device whose context exists already: keep that one, whose memory arrays
        # and models may hold, and free the new one, which nothing has used yet.
        existing = _contexts.get(ctx.device)
        if existing is not None:
            lib.lam_ctx_free(ctx.ptr)
            ctx = existing
        else:
            _contexts[ctx.device] = ctx
        _contexts[d] = ctx
        return ctx


# The AUTO context's background start: the thread while it runs, and what it failed with.
_auto_start = {"thread": None, "error": None}


def _make_auto():
    """On the background thread: makes the AUTO context, on CUDA calibrates lam_hidden's choice (so no
    call pays for it), and registers it as get_context does."""
    try:
        ctx = Context("auto")
        if ctx.device == "cuda":
            with ctx.lock:
                check(lib.lam_hidden_calibrate(ctx.ptr))
        with _contexts_lock:
            existing = _contexts.get(ctx.device)
            if existing is not None:  # "cuda" was asked for meanwhile: keep that one
                lib.lam_ctx_free(ctx.ptr)
                ctx = existing
            else:
                _contexts[ctx.device] = ctx
            _contexts["auto"] = ctx
    except Exception as e:  # the calls go on on the CPU, saying why
        _auto_start["error"] = e


def _wants_background_auto():
    """Whether the AUTO context could be a CUDA one that chooses per call (and so is worth making in the
    background): a CUDA build, and LAMINA_DEVICE unset or auto (cpu or cuda there fix the device, and the
    calls wait for it as for device="cuda"). Asks no driver (that is what takes the time)."""
    env = os.environ.get("LAMINA_DEVICE", "").strip()
    if env not in ("", "auto"):
        return False
    info = _lib.BuildInfo()
    lib.lam_build_info_get(byref(info))
    return bool(info.with_cuda)


def start_auto():
    """Starts making the AUTO context on a background thread, unless it exists or is being made."""
    with _contexts_lock:
        if "auto" in _contexts or _auto_start["thread"] is not None or _auto_start["error"] is not None:
            return
        t = threading.Thread(target=_make_auto, name="lamina-context", daemon=True)
        _auto_start["thread"] = t
        t.start()


def auto_context_now():
    """(context, note) for an AUTO call on host arrays that must not wait: the AUTO context when it is
    ready; else the CPU context, and a note saying why the call ran on the host (the caller then starts
    the AUTO context with start_auto, after its call: making a CUDA context maps memory, which would
    hold up the page faults of the call's own new output)."""
    ctx = _contexts.get("auto")
    if ctx is not None:
        return ctx, None
    if not _wants_background_auto():
        return get_context("auto"), None
    err = _auto_start["error"]
    if err is not None:
        note = f"cpu (auto: the GPU's context failed to start ({err}); the host threads ran it)"
    elif _auto_start["thread"] is None:
        note = ("cpu (auto: the CUDA context, where there is a GPU, starts on a background thread after this "
                "call; the host threads ran it)")
    else:
        note = ("cpu (auto: the CUDA context, where there is a GPU, is still starting on a background thread; "
                "the host threads ran it)")
    return get_context("cpu"), note


def _after_fork_in_child():
    # A thread making the context did not come along; the child makes its own if it asks (and, where
    # the parent had made a CUDA context, CUDA refuses it there: the calls then stay on the CPU).
    _auto_start["thread"] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def device_info(device="auto"):
    """What `device` runs on: {"device": "cpu"|"cuda", "name": ..., "reason": why AUTO chose it}.
    Creates the context if need be, so calling this first takes the set-up cost out of the first call."""
    ctx = get_context(device)
    return {"device": ctx.device, "name": ctx.name, "reason": ctx.reason}


def synchronize(device="auto"):
    """Waits until the work queued on `device`'s context is done: calls on DeviceArrays alone return
    as soon as the kernel is queued (time them with this, or read the result with .numpy())."""
    get_context(device).sync()


def cuda_device_count():
    """CUDA devices visible to lamina: 0 without a driver, a device, or a CUDA build."""
    return lib.lam_cuda_device_count(None)


def cuda_unavailable_reason():
    """Why there is no CUDA device ("" when there is one)."""
    why = c_char_p()
    n = lib.lam_cuda_device_count(byref(why))
    return "" if n > 0 else (why.value.decode() if why.value else "no CUDA device")


def build_info():
    """How the loaded liblamina was built, and where it was loaded from."""
    info = _lib.BuildInfo()
    lib.lam_build_info_get(byref(info))
    return {"version": info.version.decode(), "with_cuda": bool(info.with_cuda), "cuda_runtime": info.cuda_runtime,
            "cuda_archs": info.cuda_archs.decode() if info.cuda_archs else "", "with_openmp": bool(info.with_openmp),
            "omp_max_threads": info.omp_max_threads, "library": _lib.LIBRARY_PATH}


def memory_stats(device="auto"):
    """The context's caching allocator in bytes: in_use, reserved, peak, cached, pinned_host, allocs,
    cache_hits (device memory on CUDA)."""
    ctx = get_context(device)
    s = _lib.MemStats()
    with ctx.lock:
        check(lib.lam_mem_stats_get(ctx.ptr, byref(s)))
    return {name: int(getattr(s, name)) for name, _ in _lib.MemStats._fields_}


def set_memory_limit(max_memory, device="auto"):
    """Caps the bytes `device`'s allocator may hold (max_memory: bytes; 0 or None: no cap); going over it
    raises LaminaError ("out of memory") with the numbers. A CPU context starts capped at the memory
    the machine had available when it was made; raise the cap here if the machine can take more."""
    try:
        n = 0 if max_memory is None else operator.index(max_memory)  # int or a NumPy integer
    except TypeError:
        n = -1
    if isinstance(max_memory, bool) or not 0 <= n < 2**64:
        raise ValueError(f"max_memory must be a number of bytes (an integer >= 0; 0 or None: no cap), "
                         f"not {max_memory!r}")
    ctx = get_context(device)
    with ctx.lock:
        check(lib.lam_mem_set_limit(ctx.ptr, n))


def release_cached(device="auto"):
    """Gives the allocator's cached (free) blocks back to the system, and the host buffer kept for new
    outputs of create_hidden_layer; returns the bytes released."""
    from . import _outputs
    ctx = get_context(device)
    released = c_size_t()
    with ctx.lock:
        check(lib.lam_mem_release_cached(ctx.ptr, byref(released)))
    return int(released.value) + _outputs.release()
