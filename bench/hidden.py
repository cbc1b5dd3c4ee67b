#!/usr/bin/env python3
"""bench/hidden.py: lamina's hidden layer, out = tanh(grey/255 * w), against the peers, in one run.

One process, one set of input arrays (greys = floor(uniform(0,255)) as float32, weights =
normal(0.5, 0.1) as float32, from numpy's default_rng(seed)), one timer (warm-ups, then the median
of the repeats, with a sync inside each timed call where the work is asynchronous):

  1. lamina through ctypes over liblamina.so, every variant of the job that lamina's context
     supports (CUDA: pageable / pinned / device-resident, f32 / u8 greys, fused / unfused; CPU:
     f32 / u8 fused, the three ops). Every lamina result is checked against a float64 NumPy
     reference (max abs error must be <= 1e-6; the output is filled with NaN before the checked call).
  2. the peers that are installed: NumPy, Numba, CuPy, PyTorch (GPU peers only on a GPU). Each in
     try/except: a missing or broken peer is reported and skipped.
  3. the single-threaded NumPy host memcpy bound that the pageable path has to beat.
  4. lamina's CLI once per variant (`lamina hidden --json`), for its time breakdown.

Then one table: job variant, lamina median, the best peer for that variant, ratio peer/lamina
(> 1 means lamina is faster). --json FILE writes every row. Exit status 1 when lamina failed or
gave a wrong result (in-process, or the CLI said "ok": false), else 0.

The peers' variants are those of shared/peers/hidden_peers.py where they overlap, so the numbers
compare with shared/peers/README.md.
"""
import argparse
import ctypes
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.exit(f"bench/hidden.py needs numpy; {sys.executable} has none (on the CPU machine use /usr/bin/python3)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-6
F32, U8 = 0, 1
DEVICES = {"auto": 0, "cpu": 1, "cuda": 2}

# ------------------------------------------------------------------------------------------------
# the jobs: key, description, CLI flags

JOBS_CUDA = [
    ("f32 pageable", "f32, pageable host in -> host out", []),
    ("u8 pageable", "u8 greys, pageable host in -> host out", ["--dtype", "u8"]),
    ("f32 pinned", "f32, pinned host in -> pinned out", ["--pinned"]),
    ("u8 pinned, w resident", "u8 greys pinned, weights resident, pinned out",
     ["--pinned", "--dtype", "u8", "--resident=weights"]),
    ("f32 resident", "f32, device-resident, fused", ["--resident"]),
    ("u8 resident", "u8 greys, device-resident, fused", ["--resident", "--dtype", "u8"]),
    ("f32 resident unfused", "f32, device-resident, 3 ops", ["--resident", "--unfused"]),
]
JOBS_CPU = [
    ("cpu f32", "CPU, f32, fused", []),
    ("cpu u8", "CPU, u8 greys, fused", ["--dtype", "u8"]),
    ("cpu f32 unfused", "CPU, f32, 3 ops", ["--unfused"]),
]

# ------------------------------------------------------------------------------------------------
# timing and checking


def timeit(fn, reps, warm, sync=None):
    """Median and min wall time of fn() (+ sync()) in ms, after `warm` untimed calls."""
    for _ in range(warm):
        fn()
    if sync:
        sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3, float(np.min(ts)) * 1e3


class Ref:
    """The float64 reference and a chunked max-abs-error against it (no n-sized temporaries)."""
    CH = 1 << 22

    def __init__(self, grey, w):
        n = grey.size
        self.ref = np.empty(n, np.float64)
        for s in range(0, n, self.CH):
            e = min(n, s + self.CH)
            self.ref[s:e] = np.tanh(grey[s:e].astype(np.float64) / 255 * w[s:e].astype(np.float64))

    def maxerr(self, out):
        """Max abs error of out (any array-like of n values); nan when out has a NaN or a bad size."""
        out = np.asarray(out).reshape(-1)
        n = self.ref.size
        if out.size != n:
            return float("nan")
        m = 0.0
        for s in range(0, n, self.CH):
            e = min(n, s + self.CH)
            d = float(np.max(np.abs(out[s:e].astype(np.float64) - self.ref[s:e]))) if e > s else 0.0
            if d != d:
                return float("nan")
            m = max(m, d)
        return m


# ------------------------------------------------------------------------------------------------
# lamina through ctypes


class LamError(RuntimeError):
    pass


class Timing(ctypes.Structure):
    _fields_ = [("staging", ctypes.c_double), ("copy_in", ctypes.c_double),
                ("kernel", ctypes.c_double), ("copy_out", ctypes.c_double),
                ("total", ctypes.c_double), ("chunks", ctypes.c_int)]

    def as_dict(self):
        return {k: getattr(self, k) for k, _ in self._fields_}


class BuildInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_char_p), ("with_cuda", ctypes.c_int),
                ("cuda_runtime", ctypes.c_int), ("cuda_archs", ctypes.c_char_p),
                ("with_openmp", ctypes.c_int), ("omp_max_threads", ctypes.c_int)]


class Lamina:
    """The parts of lamina.h this script uses. Missing symbols are listed in self.missing."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        vp, sz, st, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int
        pvp = ctypes.POINTER(vp)
        sigs = {
            "lam_last_error": (ctypes.c_char_p, []),
            "lam_status_str": (ctypes.c_char_p, [i]),
            "lam_ctx_create": (st, [pvp, i]),
            "lam_ctx_free": (None, [vp]),
            "lam_ctx_device": (i, [vp]),
            "lam_ctx_device_name": (ctypes.c_char_p, [vp]),
            "lam_ctx_choice_reason": (ctypes.c_char_p, [vp]),
            "lam_ctx_sync": (st, [vp]),
            "lam_build_info_get": (None, [ctypes.POINTER(BuildInfo)]),
            "lam_mem_alloc": (st, [vp, pvp, sz]),
            "lam_mem_free": (st, [vp, vp]),
            "lam_mem_release_cached": (st, [vp, ctypes.POINTER(sz)]),
            "lam_mem_upload": (st, [vp, vp, vp, sz]),
            "lam_mem_download": (st, [vp, vp, vp, sz]),
            "lam_host_alloc": (st, [vp, pvp, sz]),
            "lam_host_free": (st, [vp, vp]),
            "lam_hidden": (st, [vp, sz, vp, i, vp, vp, ctypes.POINTER(Timing)]),
            "lam_normalize": (st, [vp, sz, vp, i, vp]),
            "lam_weigh": (st, [vp, sz, vp, vp, vp]),
            "lam_tanh": (st, [vp, sz, vp, vp]),
        }
        self.f, self.missing = {}, []
        for name, (res, args) in sigs.items():
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                self.missing.append(name)
                continue
            fn.restype, fn.argtypes = res, args
            self.f[name] = fn
        self.ctx = None

    def _fn(self, name):
        fn = self.f.get(name)
        if fn is None:
            raise LamError(f"{name}: not exported by the library")
        return fn

    def error(self, name, status):
        msg = self.f["lam_last_error"]().decode(errors="replace") if "lam_last_error" in self.f else "?"
        ss = self.f["lam_status_str"](status).decode(errors="replace") if "lam_status_str" in self.f else ""
        return LamError(f"{name} -> status {status} ({ss}): {msg}")

    def call(self, name, *args):
        st = self._fn(name)(*args)
        if st != 0:
            raise self.error(name, st)

    def create(self, device):
        p = ctypes.c_void_p()
        self.call("lam_ctx_create", ctypes.byref(p), DEVICES[device])
        if not p.value:
            raise LamError("lam_ctx_create returned LAM_OK but a NULL context")
        self.ctx = p.value
        # hot-path shortcuts: plain ctypes calls with int pointers
        self._hidden = self._fn("lam_hidden")
        self._sync = self._fn("lam_ctx_sync")

    def free(self):
        if self.ctx is not None and "lam_ctx_free" in self.f:
            self.f["lam_ctx_free"](self.ctx)
        self.ctx = None

    def text(self, name):
        fn = self.f.get(name)
        r = fn(self.ctx) if fn else None
        return r.decode(errors="replace") if r else ""

    def device(self):
        d = self._fn("lam_ctx_device")(self.ctx)
        return {1: "cpu", 2: "cuda"}.get(d, f"? ({d})")

    def build_info(self):
        if "lam_build_info_get" not in self.f:
            return {}
        b = BuildInfo()
        self.f["lam_build_info_get"](ctypes.byref(b))
        return {"version": (b.version or b"").decode(), "with_cuda": b.with_cuda,
                "cuda_runtime": b.cuda_runtime, "cuda_archs": (b.cuda_archs or b"").decode(),
                "with_openmp": b.with_openmp, "omp_max_threads": b.omp_max_threads}

    def sync(self):
        st = self._sync(self.ctx)
        if st != 0:
            raise self.error("lam_ctx_sync", st)

    def hidden(self, n, g, dtype, w, out, timing=None):
        st = self._hidden(self.ctx, n, g, dtype, w, out, ctypes.byref(timing) if timing is not None else None)
        if st != 0:
            raise self.error("lam_hidden", st)

    def normalize(self, n, g, dtype, out):
        self.call("lam_normalize", self.ctx, n, g, dtype, out)

    def weigh(self, n, a, w, out):
        self.call("lam_weigh", self.ctx, n, a, w, out)

    def tanh(self, n, x, out):
        self.call("lam_tanh", self.ctx, n, x, out)

    def mem_alloc(self, nbytes):
        p = ctypes.c_void_p()
        self.call("lam_mem_alloc", self.ctx, ctypes.byref(p), nbytes)
        return p.value

    def mem_free(self, p):
        self.call("lam_mem_free", self.ctx, p)

    def upload(self, dst, arr):
        self.call("lam_mem_upload", self.ctx, dst, arr.ctypes.data, arr.nbytes)

    def download(self, arr, src):
        self.call("lam_mem_download", self.ctx, arr.ctypes.data, src, arr.nbytes)

    def host_alloc(self, n, dtype):
        """Pinned host buffer (lam_host_alloc) of n values, as (numpy view, pointer)."""
        dtype = np.dtype(dtype)
        p = ctypes.c_void_p()
        self.call("lam_host_alloc", self.ctx, ctypes.byref(p), n * dtype.itemsize)
        ctype = {np.dtype(np.float32): ctypes.c_float, np.dtype(np.uint8): ctypes.c_uint8}[dtype]
        arr = np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctype)), shape=(n,))
        return arr, p.value

    def host_free(self, p):
        self.call("lam_host_free", self.ctx, p)

    def release_cached(self):
        if "lam_mem_release_cached" in self.f:
            r = ctypes.c_size_t()
            self.call("lam_mem_release_cached", self.ctx, ctypes.byref(r))
            return r.value
        return 0


# ------------------------------------------------------------------------------------------------
# the run


class Bench:
    def __init__(self, args):
        self.a = args
        self.rows = []        # every measured row (lamina and peers)
        self.failures = []    # lamina problems that make the exit status 1
        self.notes = []       # peers or tools that failed or were skipped
        self.cli_rows = []
        self.memcpy = []

    # reps per class of call: 'slow' (numpy/numba on host, seconds at 100M), 'host' (a host
    # in -> host out path), 'res' (device-resident, sub-ms)
    def R(self, klass):
        a = self.a
        if a.quick:
            reps, warm = {"slow": (3, 1), "host": (5, 1), "res": (20, 3)}[klass]
        else:
            reps, warm = {"slow": (10, 2), "host": (30, 3), "res": (200, 5)}[klass]
        if a.reps:
            reps = a.reps
        return reps, warm

    def add(self, who, variant, jobs, ms, ms_min, reps, err, extra=None, error=None):
        ok = None if who != "lamina" else (error is None and err <= TOL)
        row = {"who": who, "variant": variant, "jobs": list(jobs), "median_ms": ms, "min_ms": ms_min,
               "reps": reps, "max_abs_err": err, "ok": ok, "error": error}
        if extra:
            row.update(extra)
        self.rows.append(row)
        if error:
            print(f"  {who:8s} {variant:58s}  ERROR: {error}", flush=True)
            return row
        e = "nan" if err != err else f"{err:.2e}"
        flag = ""
        if who == "lamina" and not ok:
            flag = f"   <<<<<< WRONG: max abs err {e} > {TOL:g}"
        print(f"  {who:8s} {variant:58s} {ms:11.4f} ms  (min {ms_min:.4f})  maxerr {e}{flag}", flush=True)
        return row

    def measure(self, who, variant, jobs, fn, klass, sync=None, result=None):
        """Times a peer's fn and checks result() (default: fn()) against the reference."""
        reps, warm = self.R(klass)
        ms, mn = timeit(fn, reps, warm, sync)
        out = (result or fn)()
        err = self.ref.maxerr(out)
        del out
        return self.add(who, variant, jobs, ms, mn, reps, err)

    def peer_try(self, name, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - a broken peer is reported, never fatal
            msg = f"{name}: {type(e).__name__}: {str(e)[:300]}"
            print(f"  [skipped] {msg}", flush=True)
            self.notes.append(msg)
        finally:
            free_peer_memory()

    # ---- data ------------------------------------------------------------------------------------

    def make_data(self):
        n = self.n
        t0 = time.perf_counter()
        rng = np.random.default_rng(self.a.seed)
        self.grey = np.floor(rng.uniform(0, 255, n).astype(np.float32))
        self.w = rng.normal(0.5, 0.1, n).astype(np.float32)
        self.grey8 = self.grey.astype(np.uint8)
        assert np.array_equal(self.grey8.astype(np.float32), self.grey)
        self.ref = Ref(self.grey, self.w)
        print(f"data: n={n:,} seed={self.a.seed}  ({time.perf_counter() - t0:.1f} s to make and "
              f"compute the float64 reference)", flush=True)

    # ---- lamina ----------------------------------------------------------------------------------

    def lam_variant(self, job, variant, call, checked, klass):
        """Times call() + lam_ctx_sync, then checks checked() -> (host output, Timing)."""
        lam = self.lam
        reps, warm = self.R(klass)
        try:
            ms, mn = timeit(call, reps, warm, lam.sync)
            out, tm = checked()
            err = self.ref.maxerr(out)
        except LamError as e:
            self.failures.append(f"lamina {variant}: {e}")
            return self.add("lamina", variant, [job], float("nan"), float("nan"), reps, float("nan"),
                            error=str(e))
        td = tm.as_dict() if tm is not None else None
        row = self.add("lamina", variant, [job], ms, mn, reps, err, extra={"timing_checked_call": td})
        if td:
            print("  {:8s} {:58s}   checked call: staging {staging:.3f}  copy_in {copy_in:.3f}  kernel "
                  "{kernel:.3f}  copy_out {copy_out:.3f}  total {total:.3f} ms  chunks {chunks}".format(
                      "", "", **td), flush=True)
        if not row["ok"]:
            e = row["max_abs_err"]
            self.failures.append(f"lamina {variant}: max abs err {e:.3e} > {TOL:g}" if e == e else
                                 f"lamina {variant}: output has NaN (not every value written)")
        return row

    def lam_host_path(self, job, variant, g, dtype, w, out, klass="host"):
        """lam_hidden on host pointers; `out` is the numpy view of the output buffer."""
        lam, n = self.lam, self.n
        gp, wp, op = _ptr(g), _ptr(w), _ptr(out)

        def call():
            lam.hidden(n, gp, dtype, wp, op)

        def checked():
            out.fill(np.nan)
            tm = Timing()
            lam.hidden(n, gp, dtype, wp, op, tm)
            lam.sync()
            return out, tm
        return self.lam_variant(job, variant, call, checked, klass)

    def lam_resident(self, job, variant, dtype, unfused, klass="res"):
        """Everything in backend memory (device memory on CUDA): fused lam_hidden or the 3 ops."""
        lam, n = self.lam, self.n
        bufs = []
        host_out = np.empty(n, np.float32)
        try:
            try:
                src = self.grey8 if dtype == U8 else self.grey
                dg = lam.mem_alloc(src.nbytes); bufs.append(dg)
                dw = lam.mem_alloc(4 * n); bufs.append(dw)
                do = lam.mem_alloc(4 * n); bufs.append(do)
                lam.upload(dg, src)
                lam.upload(dw, self.w)
                if unfused:
                    t1 = lam.mem_alloc(4 * n); bufs.append(t1)
                    t2 = lam.mem_alloc(4 * n); bufs.append(t2)
                lam.sync()
            except LamError as e:
                self.failures.append(f"lamina {variant} (setup): {e}")
                return self.add("lamina", variant, [job], float("nan"), float("nan"), 0, float("nan"),
                                error=f"setup: {e}")
            if unfused:
                def call():
                    lam.normalize(n, dg, dtype, t1)
                    lam.weigh(n, t1, dw, t2)
                    lam.tanh(n, t2, do)
            else:
                def call():
                    lam.hidden(n, dg, dtype, dw, do)

            def checked():
                host_out.fill(np.nan)
                lam.upload(do, host_out)            # the output buffer is NaN before the call
                tm = None
                if unfused:
                    call()
                else:
                    tm = Timing()
                    lam.hidden(n, dg, dtype, dw, do, tm)
                lam.sync()
                lam.download(host_out, do)
                return host_out, tm
            return self.lam_variant(job, variant, call, checked, klass)
        finally:
            for p in bufs:
                try:
                    lam.mem_free(p)
                except LamError as e:
                    self.failures.append(f"lamina lam_mem_free: {e}")

    def lam_pinned(self, job, variant, dtype, w_resident):
        """Pinned host greys (and weights, unless resident on the device) and pinned out."""
        lam, n = self.lam, self.n
        hosts, devs = [], []
        try:
            try:
                src = self.grey8 if dtype == U8 else self.grey
                pg, p = lam.host_alloc(n, src.dtype); hosts.append(p)
                pg[:] = src
                po, p = lam.host_alloc(n, np.float32); hosts.append(p)
                po.fill(0)
                if w_resident:
                    wp = lam.mem_alloc(4 * n); devs.append(wp)
                    lam.upload(wp, self.w)
                    lam.sync()
                else:
                    pw, p = lam.host_alloc(n, np.float32); hosts.append(p)
                    pw[:] = self.w
                    wp = pw
            except LamError as e:
                self.failures.append(f"lamina {variant} (setup): {e}")
                return self.add("lamina", variant, [job], float("nan"), float("nan"), 0, float("nan"),
                                error=f"setup: {e}")
            return self.lam_host_path(job, variant, pg, dtype, wp, po)
        finally:
            pg = pw = po = wp = None  # drop the views before the memory goes
            for p in devs:
                try:
                    lam.mem_free(p)
                except LamError as e:
                    self.failures.append(f"lamina lam_mem_free: {e}")
            for p in hosts:
                try:
                    lam.host_free(p)
                except LamError as e:
                    self.failures.append(f"lamina lam_host_free: {e}")

    def run_lamina(self):
        lam, n = self.lam, self.n
        print(f"\n== lamina ({self.mode}: {self.device_name}) ==", flush=True)
        if self.mode == "cuda":
            out = np.empty(n, np.float32)
            self.lam_host_path("f32 pageable", "f32, pageable host in -> host out",
                               self.grey, F32, self.w, out)
            self.lam_host_path("u8 pageable", "u8 greys, pageable host in -> host out",
                               self.grey8, U8, self.w, out)
            del out
            self.lam_pinned("f32 pinned", "f32, pinned in -> pinned out (all 3 pinned)", F32, False)
            self.lam_pinned("u8 pinned, w resident", "u8 greys pinned, w resident, pinned out",
                            U8, True)
            self.lam_resident("f32 resident", "f32, device-resident, fused", F32, False)
            self.lam_resident("u8 resident", "u8 greys, device-resident, fused", U8, False)
            self.lam_resident("f32 resident unfused", "f32, device-resident, 3 ops (unfused)",
                              F32, True)
        else:
            out = np.empty(n, np.float32)
            self.lam_host_path("cpu f32", "CPU f32, fused", self.grey, F32, self.w, out)
            self.lam_host_path("cpu u8", "CPU u8 greys, fused", self.grey8, U8, self.w, out)
            del out
            self.lam_resident("cpu f32 unfused", "CPU f32, 3 ops (unfused)", F32, True, klass="host")
        try:
            lam.release_cached()
        except LamError as e:
            self.failures.append(f"lamina lam_mem_release_cached: {e}")

    # ---- peers -----------------------------------------------------------------------------------

    def peers_numpy(self):
        grey, w, grey8 = self.grey, self.w, self.grey8
        from numpy import exp
        if self.mode == "cuda":
            jf, jt, ju = ["f32 pageable"], ["f32 pageable"], ["u8 pageable"]
        else:
            jf, jt, ju = ["cpu f32", "cpu f32 unfused"], ["cpu f32", "cpu f32 unfused"], ["cpu u8"]

        def np_orig():
            v = (grey / 255) * w
            return (exp(v) - exp(-v)) / (exp(v) + exp(-v))
        self.peer_try("numpy course exp formula",
                      lambda: self.measure("numpy", "course exp formula, host", jf, np_orig, "slow"))
        self.peer_try("numpy np.tanh", lambda: self.measure(
            "numpy", "np.tanh(g/255*w), host", jt, lambda: np.tanh(grey / 255 * w), "slow"))
        self.peer_try("numpy np.tanh u8", lambda: self.measure(
            "numpy", "np.tanh(g/255*w), uint8 greys, host", ju, lambda: np.tanh(grey8 / np.float32(255) * w),
            "slow"))

    def peers_numba_cpu(self):
        import numba
        from numba import vectorize
        print(f"  numba {numba.__version__} (CPU, {numba.config.NUMBA_NUM_THREADS} threads)", flush=True)
        grey, w, grey8 = self.grey, self.w, self.grey8

        def fused():
            @vectorize(['float32(float32,float32)'], target='parallel')
            def hl(a, b):
                return np.tanh(a / np.float32(255) * b)
            self.measure("numba", "parallel @vectorize fused (cpu_peers.py)", ["cpu f32"],
                         lambda: hl(grey, w), "host")

        def fused8():
            @vectorize(['float32(uint8,float32)'], target='parallel')
            def hl8(a, b):
                return np.tanh(np.float32(a) / np.float32(255) * b)
            self.measure("numba", "parallel @vectorize fused, uint8 greys", ["cpu u8"],
                         lambda: hl8(grey8, w), "host")

        def three():
            @vectorize(['float32(float32)'], target='parallel')
            def normalize(g):
                return g / 255

            @vectorize(['float32(float32,float32)'], target='parallel')
            def weigh(v, ww):
                return v * ww

            @vectorize(['float32(float32)'], target='parallel')
            def activate(v):
                return (math.exp(v) - math.exp(-v)) / (math.exp(v) + math.exp(-v))
            self.measure("numba", "parallel @vectorize x3 (the course's 3 functions)",
                         ["cpu f32", "cpu f32 unfused"], lambda: activate(weigh(normalize(grey), w)), "host")
        self.peer_try("numba parallel vectorize", fused)
        self.peer_try("numba parallel vectorize u8", fused8)
        self.peer_try("numba parallel vectorize x3", three)

    def peers_torch_cpu(self):
        import torch
        torch.set_num_threads(os.cpu_count())   # as cpu_peers.py does
        print(f"  torch {torch.__version__} (CPU, {torch.get_num_threads()} threads)", flush=True)
        tg, tw, tg8 = torch.from_numpy(self.grey), torch.from_numpy(self.w), torch.from_numpy(self.grey8)
        self.peer_try("torch CPU", lambda: self.measure(
            "torch", "CPU eager tanh(g/255*w)", ["cpu f32", "cpu f32 unfused"],
            lambda: torch.tanh(tg / 255 * tw), "host", result=lambda: torch.tanh(tg / 255 * tw).numpy()))
        self.peer_try("torch CPU u8", lambda: self.measure(
            "torch", "CPU eager tanh(g.float()/255*w), uint8 greys", ["cpu u8"],
            lambda: torch.tanh(tg8.float() / 255 * tw), "host",
            result=lambda: torch.tanh(tg8.float() / 255 * tw).numpy()))

    def peers_numba_cuda(self):
        if not hasattr(np, 'row_stack'):
            np.row_stack = np.vstack  # numba 0.68 still names it; numpy 2.5 removed it (as hidden_peers.py)
        global cuda   # the kernel below refers to `cuda` as a module global, as in hidden_peers.py
        import numba
        from numba import cuda, vectorize
        print(f"  numba {numba.__version__}", flush=True)
        if not cuda.is_available():
            raise RuntimeError("numba.cuda.is_available() is False")
        grey, w, n = self.grey, self.w, self.n
        ufuncs = []

        def make_ufuncs():   # the course's three functions, as hidden_peers.py writes them
            @vectorize(['float32(float32)'], target='cuda')
            def normalize(g):
                return g / 255

            @vectorize(['float32(float32,float32)'], target='cuda')
            def weigh(v, ww):
                return v * ww

            @vectorize(['float32(float32)'], target='cuda')
            def activate(v):
                return (math.exp(v) - math.exp(-v)) / (math.exp(v) + math.exp(-v))
            ufuncs.extend((normalize, weigh, activate))
        self.peer_try("numba @vectorize(target='cuda')", make_ufuncs)

        @cuda.jit
        def fused(g, ww, out):
            i = cuda.grid(1)
            if i < out.size:
                v = g[i] / 255 * ww[i]
                a = math.exp(v)
                b = math.exp(-v)
                out[i] = (a - b) / (a + b)
        tpb = 256
        bpg = (n + tpb - 1) // tpb

        if ufuncs:
            normalize, weigh, activate = ufuncs

            def chl_host():
                return activate(weigh(normalize(grey), w))
            self.peer_try("numba vectorize x3 host", lambda: self.measure(
                "numba", "vectorize x3, host arrays (first attempt)", ["f32 pageable"], chl_host, "slow"))

        def jit_e2e():
            a, b = cuda.to_device(grey), cuda.to_device(w)
            o = cuda.device_array(n, dtype=np.float32)
            fused[bpg, tpb](a, b, o)
            return o.copy_to_host()
        self.peer_try("numba cuda.jit e2e", lambda: self.measure(
            "numba", "cuda.jit fused, host in -> host out (copies inside)", ["f32 pageable"], jit_e2e, "host"))

        def resident():
            dg, dw = cuda.to_device(grey), cuda.to_device(w)
            cuda.synchronize()
            if ufuncs:
                normalize, weigh, activate = ufuncs
                self.peer_try("numba vectorize x3 device", lambda: self.measure(
                    "numba", "vectorize x3, device arrays, result on device",
                    ["f32 resident", "f32 resident unfused"], lambda: activate(weigh(normalize(dg), dw)), "res",
                    sync=cuda.synchronize, result=lambda: activate(weigh(normalize(dg), dw)).copy_to_host()))
            dout = cuda.device_array(n, dtype=np.float32)

            def jit_dev():
                fused[bpg, tpb](dg, dw, dout)
            jit_dev()
            cuda.synchronize()
            self.peer_try("numba cuda.jit resident", lambda: self.measure(
                "numba", "cuda.jit fused, device-resident", ["f32 resident"], jit_dev, "res",
                sync=cuda.synchronize, result=lambda: (jit_dev(), dout.copy_to_host())[1]))
        self.peer_try("numba device arrays", resident)

    def peers_cupy(self):
        import cupy as cp
        print(f"  cupy {cp.__version__}", flush=True)
        cg, cw = cp.asarray(self.grey), cp.asarray(self.w)
        cg8 = cp.asarray(self.grey8)
        sync = cp.cuda.Device().synchronize
        sync()
        self.peer_try("cupy 3 kernels", lambda: self.measure(
            "cupy", "cp.tanh(g/255*w), device-resident (3 kernels)", ["f32 resident", "f32 resident unfused"],
            lambda: cp.tanh(cg / 255 * cw), "res", sync=sync, result=lambda: cp.asnumpy(cp.tanh(cg / 255 * cw))))
        k = cp.ElementwiseKernel('float32 g, float32 w', 'float32 o', 'o = tanhf(g / 255.0f * w)', 'hl')
        co = cp.empty(self.n, dtype=cp.float32)
        self.peer_try("cupy ElementwiseKernel", lambda: self.measure(
            "cupy", "ElementwiseKernel fused, device-resident", ["f32 resident"],
            lambda: k(cg, cw, co), "res", sync=sync, result=lambda: cp.asnumpy(k(cg, cw, co))))
        k8 = cp.ElementwiseKernel('uint8 g, float32 w', 'float32 o', 'o = tanhf(g * (1.0f/255.0f) * w)', 'hl8')
        self.peer_try("cupy ElementwiseKernel u8", lambda: self.measure(
            "cupy", "ElementwiseKernel fused, uint8 in, device-resident", ["u8 resident"],
            lambda: k8(cg8, cw, co), "res", sync=sync, result=lambda: cp.asnumpy(k8(cg8, cw, co))))

    def peers_torch_cuda(self):
        import torch
        print(f"  torch {torch.__version__}", flush=True)
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        dev = "cuda"
        grey, w, grey8, n = self.grey, self.w, self.grey8, self.n
        sync = torch.cuda.synchronize
        tg, tw = torch.from_numpy(grey).to(dev), torch.from_numpy(w).to(dev)
        tg8 = torch.from_numpy(grey8).to(dev)
        sync()

        def f():
            return torch.tanh(tg / 255 * tw)
        self.peer_try("torch eager resident", lambda: self.measure(
            "torch", "eager tanh(g/255*w), device-resident", ["f32 resident", "f32 resident unfused"], f, "res",
            sync=sync, result=lambda: f().cpu().numpy()))

        def f8():
            return torch.tanh(tg8.float() / 255 * tw)
        self.peer_try("torch eager resident u8", lambda: self.measure(
            "torch", "eager tanh(g.float()/255*w), uint8 greys, device-resident", ["u8 resident"], f8, "res",
            sync=sync, result=lambda: f8().cpu().numpy()))

        def e2e():
            a = torch.from_numpy(grey).to(dev)
            b = torch.from_numpy(w).to(dev)
            return torch.tanh(a / 255 * b).cpu()
        self.peer_try("torch pageable", lambda: self.measure(
            "torch", "eager, host in -> host out (pageable)", ["f32 pageable"], e2e, "host",
            result=lambda: e2e().numpy()))

        def e2e8():
            a = torch.from_numpy(grey8).to(dev)
            b = torch.from_numpy(w).to(dev)
            return torch.tanh(a.float() / 255 * b).cpu()
        self.peer_try("torch pageable u8", lambda: self.measure(
            "torch", "eager, uint8 greys host in -> host out (pageable)", ["u8 pageable"], e2e8, "host",
            result=lambda: e2e8().numpy()))

        def pinned():
            pg = torch.from_numpy(grey).pin_memory()
            pw = torch.from_numpy(w).pin_memory()
            po = torch.empty(n).pin_memory()

            def e2e_pin():
                a = pg.to(dev, non_blocking=True)
                b = pw.to(dev, non_blocking=True)
                po.copy_(torch.tanh(a / 255 * b), non_blocking=True)
                torch.cuda.synchronize()

            def res_pin():
                po.fill_(float("nan"))
                e2e_pin()
                return po.numpy()
            self.peer_try("torch pinned", lambda: self.measure(
                "torch", "eager, host in -> host out (pinned)", ["f32 pinned"], e2e_pin, "host", result=res_pin))
            pg8 = torch.from_numpy(grey8).pin_memory()

            def e2e_u8():
                a = pg8.to(dev, non_blocking=True)
                po.copy_(torch.tanh(a.float() / 255 * tw), non_blocking=True)
                torch.cuda.synchronize()

            def res_u8():
                po.fill_(float("nan"))
                e2e_u8()
                return po.numpy()
            self.peer_try("torch pinned u8", lambda: self.measure(
                "torch", "eager, uint8 host in (pinned), weights resident, host out", ["u8 pinned, w resident"],
                e2e_u8, "host", result=res_u8))
        self.peer_try("torch pinned buffers", pinned)

        def compiled():
            cf = torch.compile(lambda g, ww: torch.tanh(g / 255 * ww))
            cf(tg, tw)
            sync()
            self.measure("torch", "torch.compile fused, device-resident", ["f32 resident"],
                         lambda: cf(tg, tw), "res", sync=sync, result=lambda: cf(tg, tw).cpu().numpy())
        if self.a.no_compile:
            self.notes.append("torch.compile: skipped (--no-compile)")
        else:
            self.peer_try("torch.compile", compiled)

    def run_peers(self):
        print(f"\n== peers ({'GPU' if self.mode == 'cuda' else 'CPU'} variants) ==", flush=True)
        self.peer_try("numpy", self.peers_numpy)
        if self.mode == "cuda":
            self.peer_try("numba (cuda)", self.peers_numba_cuda)
            self.peer_try("cupy", self.peers_cupy)
            self.peer_try("torch (cuda)", self.peers_torch_cuda)
        else:
            self.peer_try("numba (cpu)", self.peers_numba_cpu)
            self.peer_try("torch (cpu)", self.peers_torch_cpu)

    # ---- host memcpy bound -----------------------------------------------------------------------

    def run_memcpy(self):
        n = self.n
        print("\n== host memcpy bound (single thread, numpy np.copyto; host -> host) ==", flush=True)
        if self.mode != "cuda":
            print("  (the CPU backend copies nothing; the bound is what the CUDA pageable path must stage, "
                  "shown for reference)", flush=True)
        reps, warm = self.R("host")
        dg = np.empty(n, np.float32); dg.fill(0)
        dw = np.empty(n, np.float32); dw.fill(0)
        do = np.empty(n, np.float32); do.fill(0)
        ho = np.empty(n, np.float32); ho.fill(0)
        dg8 = np.empty(n, np.uint8); dg8.fill(0)

        def f32():
            np.copyto(dg, self.grey); np.copyto(dw, self.w); np.copyto(ho, do)

        def u8():
            np.copyto(dg8, self.grey8); np.copyto(dw, self.w); np.copyto(ho, do)
        for name, fn, nbytes, job in (("f32: greys + weights in, output back (3*n*4 B)", f32, 12 * n, "f32 pageable"),
                                      ("u8 greys: n*1 + n*4 in, n*4 back", u8, 9 * n, "u8 pageable")):
            ms, mn = timeit(fn, reps, warm)
            gbs = nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")
            job = job if self.mode == "cuda" else "cpu " + job.split()[0]
            lam_ms = self.lamina_ms(job)
            rel = f"   lamina {job}: {lam_ms:.3f} ms = {lam_ms / ms:.2f}x this bound" if lam_ms == lam_ms else ""
            print(f"  {name:48s} {ms:10.4f} ms  (min {mn:.4f})  {gbs:6.1f} GB/s copied{rel}", flush=True)
            self.memcpy.append({"what": name, "single_thread": True, "bytes": nbytes, "median_ms": ms,
                                "min_ms": mn, "reps": reps, "gb_per_s": gbs})

    def lamina_ms(self, job):
        for r in self.rows:
            if r["who"] == "lamina" and job in r["jobs"] and not r["error"]:
                return r["median_ms"]
        return float("nan")

    # ---- the CLI ---------------------------------------------------------------------------------

    def run_cli(self):
        exe = self.a.cli or os.path.join(os.path.dirname(os.path.abspath(self.a.lib)), "lamina")
        print(f"\n== lamina CLI breakdown ({exe}) ==", flush=True)
        if not os.access(exe, os.X_OK):
            msg = f"CLI: {exe} not found or not executable; skipped"
            print(f"  {msg}", flush=True)
            self.notes.append(msg)
            return
        jobs = JOBS_CUDA if self.mode == "cuda" else JOBS_CPU
        for key, desc, flags in jobs:
            klass = "res" if (self.mode == "cuda" and "--resident" in flags) else "host"
            reps, warm = self.R(klass)
            cmd = [exe, "hidden", "--n", str(self.n), "--json", "--device", self.mode, "--seed", str(self.a.seed),
                   "--repeat", str(reps), "--warmup", str(warm)] + flags
            row = {"job": key, "cmd": " ".join(cmd)}
            t0 = time.perf_counter()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.a.cli_timeout)
                row["rc"] = p.returncode
                row["wall_s"] = time.perf_counter() - t0
                js = None
                for line in reversed(p.stdout.strip().splitlines()):
                    if line.strip().startswith("{"):
                        try:
                            js = json.loads(line)
                            break
                        except ValueError:
                            pass
                if js is None:
                    try:
                        js = json.loads(p.stdout)
                    except ValueError:
                        js = None
                row["json"] = js
                if js is None or p.returncode not in (0, 1):
                    row["error"] = (f"rc {p.returncode}, no JSON on stdout; stderr: "
                                    f"{p.stderr.strip()[-400:]!r} stdout: {p.stdout.strip()[-200:]!r}")
                elif p.returncode != 0 or not js.get("ok", False):
                    row["error"] = f"rc {p.returncode}, ok={js.get('ok')}; stderr: {p.stderr.strip()[-300:]!r}"
                    if js.get("ok") is False:
                        self.failures.append(f"CLI {key}: ok false (max_abs_err {js.get('max_abs_err')})")
            except subprocess.TimeoutExpired:
                row["error"] = f"timed out after {self.a.cli_timeout} s"
            except OSError as e:
                row["error"] = f"could not run: {e}"
            self.cli_rows.append(row)
            self.print_cli_row(row)

    def print_cli_row(self, row):
        if not hasattr(self, "_cli_header"):
            self._cli_header = True
            print(f"  {'job':24s} {'total':>10s} {'staging':>10s} {'copy_in':>10s} {'kernel':>10s} {'copy_out':>10s} "
                  f"{'tot_min':>10s} {'chunks':>6s} {'maxerr':>9s}  ok   (ms, medians)", flush=True)
        js = row.get("json") or {}
        ms = js.get("ms") or {}

        def g(k):
            v = ms.get(k)
            return f"{v:10.3f}" if isinstance(v, (int, float)) else f"{'-':>10s}"
        if js:
            e = js.get("max_abs_err")
            es = f"{e:9.2e}" if isinstance(e, (int, float)) else f"{'-':>9s}"
            print(f"  {row['job']:24s} {g('total')} {g('staging')} {g('copy_in')} {g('kernel')} {g('copy_out')} "
                  f"{g('total_min')} {str(js.get('chunks', '-')):>6s} {es}  {str(js.get('ok')):5s}", flush=True)
            known = {"device", "device_name", "n", "dtype", "resident", "pinned", "fused", "repeat", "warmup", "chunks",
                     "max_abs_err", "ok", "ms"}
            extra = {k: v for k, v in js.items() if k not in known}
            extra_ms = {k: v for k, v in ms.items() if k not in ("total", "staging", "copy_in", "kernel",
                                                                 "copy_out", "total_min")}
            if extra or extra_ms:
                print(f"  {'':24s} also: {json.dumps({**extra, **({'ms': extra_ms} if extra_ms else {})})[:400]}",
                      flush=True)
        if row.get("error"):
            print(f"  {row['job']:24s} CLI FAILED: {row['error']}", flush=True)

    # ---- summary ---------------------------------------------------------------------------------

    def print_tables(self):
        print("\n== every row ==", flush=True)
        print(f"  {'who':8s} {'variant':62s} {'median ms':>11s} {'min ms':>10s} {'reps':>5s} {'max abs err':>11s}  "
              "jobs", flush=True)
        for r in self.rows:
            if r["error"]:
                print(f"  {r['who']:8s} {r['variant']:62s} ERROR {r['error'][:200]}", flush=True)
                continue
            e = r["max_abs_err"]
            es = "nan" if e != e else f"{e:.2e}"
            if r["who"] == "lamina" and not r["ok"]:
                es += " WRONG"
            print(f"  {r['who']:8s} {r['variant']:62s} {r['median_ms']:11.4f} {r['min_ms']:10.4f} {r['reps']:5d} "
                  f"{es:>11s}  {', '.join(r['jobs'])}", flush=True)

        jobs = JOBS_CUDA if self.mode == "cuda" else JOBS_CPU
        print(f"\n== lamina vs the best peer, n = {self.n:,}, {self.device_name} ==", flush=True)
        print(f"  {'job variant':48s} {'lamina ms':>10s}   {'best peer':66s} {'peer ms':>10s} {'peer/lamina':>11s}",
              flush=True)
        self.summary = []
        for key, desc, _ in jobs:
            lam = [r for r in self.rows if r["who"] == "lamina" and key in r["jobs"]]
            peers = [r for r in self.rows if r["who"] != "lamina" and key in r["jobs"] and not r["error"]
                     and r["median_ms"] == r["median_ms"]]
            best = min(peers, key=lambda r: r["median_ms"]) if peers else None
            lr = lam[0] if lam else None
            if lr is None or lr["error"]:
                ls = "error" if lr else "-"
                lms = float("nan")
            else:
                lms = lr["median_ms"]
                ls = f"{lms:10.4f}" + ("" if lr["ok"] else " WRONG")
            if best:
                bn = f"{best['who']}: {best['variant']}"
                bms = best["median_ms"]
                ratio = bms / lms if lms == lms and lms > 0 else float("nan")
                print(f"  {desc:48s} {ls:>10s}   {bn[:66]:66s} {bms:10.4f} {ratio:10.2f}x", flush=True)
            else:
                bn, bms, ratio = None, None, None
                print(f"  {desc:48s} {ls:>10s}   {'(no peer measured)':66s} {'-':>10s} {'-':>11s}", flush=True)
            self.summary.append({"job": key, "description": desc, "lamina_ms": lms,
                                 "lamina_ok": lr["ok"] if lr else None, "best_peer": bn, "peer_ms": bms,
                                 "peer_over_lamina": ratio})
        print("  (peer/lamina > 1: lamina is faster; medians per call, same input arrays, same timer)", flush=True)

    def write_json(self):
        if not self.a.json:
            return
        doc = {"meta": self.meta, "rows": self.rows, "summary": getattr(self, "summary", []),
               "memcpy_bound": self.memcpy, "cli": self.cli_rows, "notes": self.notes, "failures": self.failures}
        with open(self.a.json, "w") as fh:
            json.dump(_clean(doc), fh, indent=1, default=_jsonable)
        print(f"\nwrote {self.a.json}", flush=True)

    # ---- main ------------------------------------------------------------------------------------

    def main(self):
        a = self.a
        lib = os.path.abspath(a.lib)
        try:
            self.lam = Lamina(lib)
        except OSError as e:
            print(f"FATAL: cannot load lamina's library {lib}: {e}\n(build it: cmake -S . -B build && "
                  f"cmake --build build; or pass --lib PATH)", file=sys.stderr, flush=True)
            return 1
        lam = self.lam
        if lam.missing:
            msg = f"library is missing symbols: {', '.join(lam.missing)}"
            print(f"LAMINA PROBLEM: {msg}", flush=True)
            self.failures.append(msg)
        try:
            lam.create(a.device)
        except LamError as e:
            print(f"FATAL: lam_ctx_create(--device {a.device}) failed: {e}", file=sys.stderr, flush=True)
            return 1
        self.mode = lam.device()
        if self.mode not in ("cpu", "cuda"):
            print(f"FATAL: lam_ctx_device returned {self.mode}", file=sys.stderr, flush=True)
            return 1
        self.device_name = lam.text("lam_ctx_device_name")
        self.n = a.n if a.n is not None else (100_000_000 if self.mode == "cuda" else 10_000_000)
        self.meta = {"n": self.n, "seed": a.seed, "quick": a.quick, "reps": a.reps, "device": self.mode,
                     "device_name": self.device_name, "choice_reason": lam.text("lam_ctx_choice_reason"),
                     "lib": lib, "build": lam.build_info(), "python": platform.python_version(),
                     "numpy": np.__version__, "host": platform.node(), "cpus": os.cpu_count(),
                     "date": time.strftime("%Y-%m-%d %H:%M:%S"), "tolerance": TOL}
        print(f"lamina {self.meta['build'].get('version', '?')} from {lib}", flush=True)
        print(f"device: {self.mode}: {self.device_name}" +
              (f"  [{self.meta['choice_reason']}]" if self.meta["choice_reason"] else ""), flush=True)
        print(f"build: {self.meta['build']}", flush=True)
        print(f"python {self.meta['python']}, numpy {np.__version__}, {os.cpu_count()} cpus; reps "
              f"slow/host/res = {self.R('slow')[0]}/{self.R('host')[0]}/{self.R('res')[0]}", flush=True)
        self.make_data()
        try:
            self.run_lamina()
        finally:
            lam.free()   # gives back its device memory and pinned staging before the peers run
        gc.collect()
        if not a.no_peers:
            self.run_peers()
        free_peer_memory()
        self.run_memcpy()
        gc.collect()
        if not a.no_cli:
            self.run_cli()
        self.print_tables()
        self.write_json()
        if self.notes:
            print("\nnotes (peers or tools skipped):", flush=True)
            for m in self.notes:
                print(f"  - {m}", flush=True)
        if self.failures:
            print("\nLAMINA FAILURES:", flush=True)
            for m in self.failures:
                print(f"  !! {m}", flush=True)
            return 1
        return 0


def _ptr(x):
    return x if isinstance(x, int) else x.ctypes.data


def _clean(o):
    """NaN/inf -> null, so the file is strict JSON."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def _jsonable(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return str(o)


def free_peer_memory():
    gc.collect()
    if "torch" in sys.modules:
        try:
            torch = sys.modules["torch"]
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                if hasattr(torch._C, "_host_emptyCache"):
                    torch._C._host_emptyCache()
        except Exception:  # noqa: BLE001
            pass
    if "cupy" in sys.modules:
        try:
            cp = sys.modules["cupy"]
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001
            pass
    if "numba.cuda" in sys.modules:
        try:
            nc = sys.modules["numba.cuda"]
            if nc.is_available():
                nc.current_context().deallocations.clear()
        except Exception:  # noqa: BLE001
            pass


def parse_n(s):
    s = s.strip()
    mult = {"k": 10**3, "m": 10**6, "g": 10**9}.get(s[-1:].lower())
    v = float(s[:-1]) * mult if mult else float(s)
    if v != int(v) or v < 1:
        raise argparse.ArgumentTypeError(f"--n wants a positive whole number (digits, K/M/G, or 1e8), not {s!r}")
    return int(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description="lamina's hidden layer out = tanh(grey/255*w) vs the peers, one run.")
    ap.add_argument("--n", type=parse_n, default=None,
                    help="values (default 100000000 on CUDA, 10000000 on the CPU); accepts 1M, 1e8")
    ap.add_argument("--reps", type=int, default=None,
                    help="timed repeats for every variant (default: 10 slow host peers, 30 host paths, "
                         "200 device-resident; --quick: 3/5/20)")
    ap.add_argument("--seed", type=int, default=42, help="numpy default_rng seed (default 42)")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "liblamina.so"),
                    help="liblamina.so (default: build/liblamina.so of this checkout)")
    ap.add_argument("--cli", default=None, help="lamina CLI (default: 'lamina' beside --lib)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="lamina's device, as lam_ctx_create gets it (default auto)")
    ap.add_argument("--quick", action="store_true", help="fewer repeats and warm-ups")
    ap.add_argument("--json", metavar="FILE", help="write every row, the summary and the CLI rows to FILE")
    ap.add_argument("--no-peers", action="store_true", help="skip the peers")
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI breakdown")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--cli-timeout", type=float, default=300, help="seconds per CLI run (default 300)")
    a = ap.parse_args(argv)
    if a.reps is not None and a.reps < 1:
        ap.error("--reps must be >= 1")
    return Bench(a).main()


if __name__ == "__main__":
    sys.exit(main())
