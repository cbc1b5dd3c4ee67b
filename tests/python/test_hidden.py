"""lamina.create_hidden_layer on the CPU backend against NumPy's float64 tanh(g / 255 * w), and the
errors for bad inputs. Fresh random inputs every run; the seed is in every failure message."""
import os
import subprocess
import sys
import threading
import unittest

import numpy as np

import lamina
from helpers import course_inputs, fresh_rng, reference

TOL = 1e-6  # max abs error against float64, as lamina's C tests
DEV = "cpu"  # the CPU backend explicitly: "auto" would take CUDA on a GPU machine (test_cuda.py)


class HiddenLayerValues(unittest.TestCase):
    def setUp(self):
        self.rng = fresh_rng(self)

    def check(self, out, greys, weights, what):
        self.assertIsInstance(out, np.ndarray, what)
        self.assertEqual(out.dtype, np.float32, what)
        self.assertEqual(out.shape, np.shape(greys), what)
        if out.size:
            err = float(np.max(np.abs(out.astype(np.float64) - reference(greys, weights))))
            self.assertLessEqual(err, TOL, f"{what}: max abs error {err:.3g} (seed {self.seed})")

    def test_lengths_and_dtypes(self):
        # Odd sizes catch vector tails; 1_000_003 takes the multi-threaded path.
        for n in (1, 3, 7, 64, 1000, 65537, 1_000_003):
            for dt in (np.float32, np.uint8):
                g, w = course_inputs(self.rng, n, dt)
                self.check(lamina.create_hidden_layer(g, w, device=DEV), g, w, f"n={n} greys {np.dtype(dt)}")

    def test_extreme_values(self):
        g = np.array([0, 255, 255, 0, 128], np.float32)
        w = np.array([0, 1e4, -1e4, -3, 1], np.float32)  # tanh saturates to +-1
        self.check(lamina.create_hidden_layer(g, w, device=DEV), g, w, "extremes")

    def test_empty(self):
        # The C library accepts n = 0 and does nothing: so does the Python call.
        out = lamina.create_hidden_layer(np.empty(0, np.float32), np.empty(0, np.float32), device=DEV)
        self.assertEqual(out.shape, (0,))
        self.assertEqual(out.dtype, np.float32)
        out = lamina.create_hidden_layer([], [], device=DEV)
        self.assertEqual(out.shape, (0,))

    def test_non_contiguous_and_shapes(self):
        g, w = course_inputs(self.rng, 20_001)
        self.check(lamina.create_hidden_layer(g[::2], w[::2], device=DEV), g[::2], w[::2], "strided")
        self.check(lamina.create_hidden_layer(g[::-1], w[::-1], device=DEV), g[::-1], w[::-1], "reversed")
        g2, w2 = g[:20_000].reshape(100, 200), w[:20_000].reshape(100, 200)
        self.check(lamina.create_hidden_layer(g2, w2, device=DEV), g2, w2, "2-D")
        self.check(lamina.create_hidden_layer(g2.T, w2.T, device=DEV), g2.T, w2.T, "Fortran order")
        gb = g[:1000].astype(">f4")  # big-endian: converted
        self.check(lamina.create_hidden_layer(gb, w[:1000], device=DEV), gb, w[:1000], "byte-swapped")

    def test_conversions(self):
        # float64 weights and int greys are accepted with a copy to float32 (documented); lists too.
        g, w = course_inputs(self.rng, 5000)
        self.check(lamina.create_hidden_layer(g.astype(np.float64), w.astype(np.float64), device=DEV), g, w, "float64")
        self.check(lamina.create_hidden_layer(g.astype(np.int64), w, device=DEV), g, w, "int64 greys")
        self.check(lamina.create_hidden_layer(g.astype(np.float16), w, device=DEV), g, w, "float16 greys")
        self.check(lamina.create_hidden_layer(list(g[:10]), list(w[:10]), device=DEV), g[:10], w[:10], "lists")

    def test_out(self):
        for dt in (np.float32, np.uint8):
            g, w = course_inputs(self.rng, 100_003, dt)
            out = np.full(g.size, np.nan, np.float32)
            res = lamina.create_hidden_layer(g, w, device=DEV, out=out)
            self.assertIs(res, out)
            self.check(out, g, w, f"out= ({np.dtype(dt)} greys)")
        # out may be the weights themselves (in place), as in C.
        g, w = course_inputs(self.rng, 1001)
        w_in = w.copy()
        self.assertIs(lamina.create_hidden_layer(g, w, device=DEV, out=w), w)
        self.check(w, g, w_in, "out=weights")
        # out of another shape but the same size is fine: it is written as flat memory.
        out = np.empty((7, 143), np.float32)
        lamina.create_hidden_layer(g, w_in, device=DEV, out=out)
        self.check(out.reshape(-1), g, w_in, "out reshaped")

    def test_no_copies(self):
        # C-contiguous float32/uint8 arrays reach C as the caller's own memory; others are copied.
        seen = []

        class Spy:
            def __getattr__(self, name):
                return getattr(real, name)

            def lam_hidden(self, ctx, n, g, gt, w, out, timing):
                seen.append((g, w, out))
                return real.lam_hidden(ctx, n, g, gt, w, out, timing)

        import lamina.hidden as hidden
        real = hidden.lib
        hidden.lib = Spy()
        try:
            for dt in (np.float32, np.uint8):
                g, w = course_inputs(self.rng, 4096, dt)
                out = np.empty(4096, np.float32)
                lamina.create_hidden_layer(g, w, device=DEV, out=out)
                self.assertEqual(seen[-1], (g.ctypes.data, w.ctypes.data, out.ctypes.data), np.dtype(dt))
            lamina.create_hidden_layer(g[::2], w[::2], device=DEV)
            self.assertNotEqual(seen[-1][0], g.ctypes.data)  # a strided view is copied
        finally:
            hidden.lib = real

    def test_inputs_not_modified(self):
        g, w = course_inputs(self.rng, 10_000)
        g0, w0 = g.copy(), w.copy()
        lamina.create_hidden_layer(g, w, device=DEV)
        self.assertTrue(np.array_equal(g, g0) and np.array_equal(w, w0))

    def test_timing(self):
        g, w = course_inputs(self.rng, 10_000)
        out, t = lamina.create_hidden_layer(g, w, device=DEV, return_timing=True)
        self.check(out, g, w, "return_timing")
        self.assertEqual(set(t), {"staging", "copy_in", "kernel", "copy_out", "total", "chunks", "device"})
        self.assertGreater(t["total"], 0)

    def test_threads(self):
        # A context serves one thread at a time; the package's lock must make concurrent calls safe.
        inputs = [course_inputs(self.rng, 200_000 + i) for i in range(4)]
        results = [None] * 4

        def work(i):
            results[i] = lamina.create_hidden_layer(*inputs[i], device=DEV)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (g, w) in enumerate(inputs):
            self.check(results[i], g, w, f"thread {i}")

    def test_auto_device(self):
        info = lamina.device_info("auto")
        self.assertIn(info["device"], ("cpu", "cuda"))
        self.assertTrue(info["name"])
        if lamina.cuda_device_count() == 0:
            self.assertEqual(info["device"], "cpu")
        g, w = course_inputs(self.rng, 1000)
        self.check(lamina.create_hidden_layer(g, w), g, w, "auto")


# A fresh process (the first call of a process is what these check): prints one line of results, or fails.
FIRST_CALL = r"""
import json, sys, threading, numpy as np
import lamina
from lamina import _context
started_at_import = any(t.name == "lamina-context" for t in threading.enumerate()) or "auto" in _context._contexts
rng = np.random.default_rng(int(sys.argv[1]))
g = np.floor(rng.uniform(0, 255, 2_000_003)).astype(np.float32)
w = rng.normal(0.5, 0.1, g.size).astype(np.float32)
ref = np.tanh(g.astype(np.float64) / 255 * w)
out = lamina.create_hidden_layer(g, w)
first = lamina.last_call()
err = float(np.abs(out - ref).max())
lamina.device_info()  # waits for the AUTO context
out = lamina.create_hidden_layer(g, w)
later = lamina.last_call()
err = max(err, float(np.abs(out - ref).max()))
print(json.dumps({"started_at_import": started_at_import, "first": first, "later": later, "err": err,
                  "with_cuda": lamina.build_info()["with_cuda"], "gpus": lamina.cuda_device_count()}))
"""


def fresh_process(code, *args, env=None):
    e = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300,
                       env=e)
    return p


class FirstCallAndFork(unittest.TestCase):
    """device="auto" (the default): a process's first call runs on the host threads while the AUTO context
    starts on a background thread, nothing is made at import unless LAMINA_PREWARM=1, and a fork after
    import (or after calls) still works in the child and the parent."""

    def setUp(self):
        self.rng = fresh_rng(self)

    def run_first_call(self, env=None):
        import json
        p = fresh_process(FIRST_CALL, self.seed, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertLessEqual(r["err"], TOL, f"max abs error {r['err']:.3g} (seed {self.seed})")
        return r

    def test_first_call_on_the_host(self):
        r = self.run_first_call()
        self.assertFalse(r["started_at_import"], "the AUTO context was started at import without LAMINA_PREWARM")
        self.assertEqual(r["first"]["device"], "cpu", r)
        if r["with_cuda"] and r["gpus"] > 0:  # the CUDA context takes ~0.2 s to make: the call did not wait
            self.assertIn("background thread", r["first"]["choice"], r)
        if r["gpus"] > 0:
            self.assertIn("auto: host arrays", r["later"]["choice"], r)  # the AUTO context chose
        self.assertIn(r["later"]["device"], ("cpu", "cuda"))

    def test_prewarm(self):
        r = self.run_first_call({"LAMINA_PREWARM": "1"})
        self.assertTrue(r["started_at_import"], r)

    def test_fork(self):
        code = r"""
import os, signal, sys, numpy as np
import lamina
def check(tag):
    rng = np.random.default_rng(int(sys.argv[1]) + len(tag))
    g = np.floor(rng.uniform(0, 255, 1_500_001)).astype(np.float32)
    w = rng.normal(0.5, 0.1, g.size).astype(np.float32)
    err = float(np.abs(lamina.create_hidden_layer(g, w, device="cpu") - np.tanh(g.astype(np.float64) / 255 * w)).max())
    if err > 1e-6:
        raise SystemExit(f"{tag}: max abs error {err}")
def fork_and_check(tag):
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)  # a hang in the child ends it with SIGALRM, seen below
        try:
            check(tag + " child")
        except BaseException as e:
            print(e, file=sys.stderr)
            os._exit(1)
        os._exit(0)
    check(tag + " parent")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise SystemExit(f"{tag}: the child ended with status {status:#x}")
fork_and_check("after import")
fork_and_check("after calls")  # the pool's workers ran in the parent; the child starts its own
print("ok")
"""
        p = fresh_process(code, self.seed, env={"LAMINA_THREADS": "4"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "ok")

    def test_recycled_outputs(self):
        # A big output is made over a buffer that serves the next output once the caller lets go of the
        # array and of every view of it; until then it is never written again.
        n = 2_000_003
        g, w = course_inputs(self.rng, n)
        g2, w2 = course_inputs(self.rng, n)
        a = lamina.create_hidden_layer(g, w, device="cpu")
        view = a[::3]
        keep = view.copy()
        del a
        b = lamina.create_hidden_layer(g2, w2, device="cpu")  # must not reuse a's buffer: view holds it
        np.testing.assert_array_equal(view, keep)
        self.assertTrue(b.flags.writeable and b.flags.c_contiguous)
        err = float(np.max(np.abs(b.astype(np.float64) - reference(g2, w2))))
        self.assertLessEqual(err, TOL, f"seed {self.seed}")
        addr = b.ctypes.data
        del b
        c = lamina.create_hidden_layer(g, w, device="cpu")  # b's buffer, recycled
        self.assertEqual(c.ctypes.data, addr)
        err = float(np.max(np.abs(c.astype(np.float64) - reference(g, w))))
        self.assertLessEqual(err, TOL, f"recycled buffer, seed {self.seed}")
        del c, view
        self.assertGreaterEqual(lamina.release_cached("cpu"), 4 * n)

    def test_last_call(self):
        g, w = course_inputs(self.rng, 70_000)
        lamina.create_hidden_layer(g, w, device="cpu")
        c = lamina.last_call()
        self.assertEqual(c["device"], "cpu")
        self.assertGreater(c["ms"], 0)
        seen = {}

        def other():
            seen["c"] = lamina.last_call()

        t = threading.Thread(target=other)
        t.start()
        t.join()
        self.assertIsNone(seen["c"])  # per thread


class DeviceArrays(unittest.TestCase):
    """The device-resident form on the CPU backend (host memory from the context's allocator): the
    same code path as CUDA's, minus the device."""

    def setUp(self):
        self.rng = fresh_rng(self)

    def test_upload_run_download(self):
        for dt in (np.float32, np.uint8):
            g, w = course_inputs(self.rng, 123_457, dt)
            dg, dw = lamina.to_device(g, device=DEV), lamina.to_device(w, device=DEV)
            self.assertEqual((dg.shape, dg.dtype, dg.device), (g.shape, np.dtype(dt), "cpu"))
            self.assertTrue(np.array_equal(dg.numpy(), g))
            dout = lamina.create_hidden_layer(dg, dw)
            self.assertIsInstance(dout, lamina.DeviceArray)
            for _ in range(3):  # upload once, run many times
                lamina.create_hidden_layer(dg, dw, out=dout)
            lamina.synchronize(DEV)
            out = dout.numpy()
            err = float(np.max(np.abs(out - reference(g, w))))
            self.assertLessEqual(err, TOL, f"device arrays, {np.dtype(dt)}: {err:.3g} (seed {self.seed})")
            for a in (dg, dw, dout):
                a.close()

    def test_mixed(self):
        g, w = course_inputs(self.rng, 50_001)
        ref = reference(g, w)
        with lamina.to_device(w, device=DEV) as dw:
            out = lamina.create_hidden_layer(g, dw)  # host greys, resident weights -> NumPy result
            self.assertIsInstance(out, np.ndarray)
            self.assertLessEqual(float(np.max(np.abs(out - ref))), TOL)
            dout = lamina.device_empty(g.size, device=DEV)
            res = lamina.create_hidden_layer(g, w, out=dout)  # host inputs, device output
            self.assertIs(res, dout)
            self.assertLessEqual(float(np.max(np.abs(dout.numpy() - ref))), TOL)
            host = np.empty(g.size, np.float32)
            self.assertIs(dout.numpy(out=host), host)
            dout.close()

    def test_upload_into_existing(self):
        g, w = course_inputs(self.rng, 1000)
        d = lamina.device_empty(1000, device=DEV)
        d.upload(w)
        self.assertTrue(np.array_equal(d.numpy(), w))
        with self.assertRaisesRegex(ValueError, "1001 values"):
            d.upload(np.zeros(1001, np.float32))
        d.close()

    def test_closed_and_errors(self):
        d = lamina.to_device(np.zeros(10, np.float32), device=DEV)
        d.close()
        d.close()  # twice is fine
        with self.assertRaisesRegex(ValueError, "closed"):
            d.numpy()
        with self.assertRaisesRegex(ValueError, "closed"):
            lamina.create_hidden_layer(d, np.zeros(10, np.float32))
        d = lamina.to_device(np.zeros(10, np.float32), device=DEV)
        with self.assertRaisesRegex(TypeError, r"\.numpy\(\)"):
            np.asarray(d)  # no hidden downloads
        with self.assertRaisesRegex(ValueError, "11 values"):
            lamina.create_hidden_layer(d, d, out=lamina.device_empty(11, device=DEV))
        with self.assertRaisesRegex(TypeError, "float32"):
            lamina.create_hidden_layer(d, lamina.to_device(np.zeros(10, np.uint8), device=DEV))
        with self.assertRaisesRegex(TypeError, "float32 or uint8"):
            lamina.device_empty(10, np.int32, device=DEV)
        if lamina.cuda_device_count() == 0:
            with self.assertRaisesRegex(ValueError, "device='cuda'"):
                lamina.create_hidden_layer(d, d, device="cuda")

    def test_memory_returned(self):
        before = lamina.memory_stats(DEV)["in_use"]
        d = lamina.device_empty(1 << 20, device=DEV)
        self.assertGreaterEqual(lamina.memory_stats(DEV)["in_use"], before + (4 << 20))
        del d  # freed when collected
        self.assertEqual(lamina.memory_stats(DEV)["in_use"], before)


class BadInputs(unittest.TestCase):
    """Bad inputs raise TypeError/ValueError from Python with a message naming the argument, before C
    sees a pointer; what only C can know raises LaminaError carrying C's message."""

    g = np.zeros(10, np.float32)
    w = np.zeros(10, np.float32)

    def test_lengths_differ(self):
        with self.assertRaisesRegex(ValueError, "greyscales has 10 values but weights has 9"):
            lamina.create_hidden_layer(self.g, self.w[:9], device=DEV)
        with self.assertRaisesRegex(ValueError, "same shape"):
            lamina.create_hidden_layer(self.g, self.w.reshape(2, 5), device=DEV)

    def test_non_numeric(self):
        for bad, word in ((np.array([object()] * 10), "Python objects"), (np.array(["a"] * 10), "<U1"),
                          (np.zeros(10, np.complex64), "complex64"), (np.zeros(10, bool), "bool"),
                          (np.zeros(10, "datetime64[s]"), "datetime64")):
            with self.assertRaisesRegex(TypeError, "greyscales holds " + word.replace("[", r"\[")):
                lamina.create_hidden_layer(bad, self.w, device=DEV)
            with self.assertRaisesRegex(TypeError, "weights holds"):
                lamina.create_hidden_layer(self.g, bad, device=DEV)
        with self.assertRaisesRegex(TypeError, "greyscales"):
            lamina.create_hidden_layer([[1, 2], [3]], self.w, device=DEV)  # ragged
        with self.assertRaisesRegex(TypeError, "greyscales holds"):
            lamina.create_hidden_layer(None, self.w, device=DEV)

    def test_bad_out(self):
        with self.assertRaisesRegex(ValueError, "out has 9 values but the inputs have 10"):
            lamina.create_hidden_layer(self.g, self.w, device=DEV, out=np.empty(9, np.float32))
        with self.assertRaisesRegex(TypeError, "out has dtype float64"):
            lamina.create_hidden_layer(self.g, self.w, device=DEV, out=np.empty(10))
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            lamina.create_hidden_layer(self.g, self.w, device=DEV, out=np.empty(20, np.float32)[::2])
        ro = np.empty(10, np.float32)
        ro.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            lamina.create_hidden_layer(self.g, self.w, device=DEV, out=ro)
        with self.assertRaisesRegex(TypeError, "out must be"):
            lamina.create_hidden_layer(self.g, self.w, device=DEV, out=[0.0] * 10)

    def test_out_overlaps_input(self):
        # Only the C library checks the memory ranges: its message comes through LaminaError.
        g = np.zeros(10, np.float32)
        with self.assertRaises(lamina.LaminaError) as cm:
            lamina.create_hidden_layer(g, self.w, device=DEV, out=g)
        self.assertIn("out overlaps grey", str(cm.exception))
        self.assertEqual(cm.exception.status_name, "invalid argument")
        self.assertIsInstance(cm.exception, RuntimeError)

    def test_bad_device(self):
        with self.assertRaisesRegex(ValueError, "'gpu' is not one of"):
            lamina.create_hidden_layer(self.g, self.w, device="gpu")
        with self.assertRaisesRegex(TypeError, "device must be"):
            lamina.create_hidden_layer(self.g, self.w, device=0)

    @unittest.skipIf(lamina.cuda_device_count() > 0, "a CUDA device is present")
    def test_cuda_without_device(self):
        with self.assertRaises(lamina.LaminaError) as cm:
            lamina.create_hidden_layer(self.g, self.w, device="cuda")
        self.assertEqual(cm.exception.status_name, "no CUDA device")
        # a CUDA build on a machine without a GPU says there is none; a CPU-only build (-DLAMINA_CUDA=OFF)
        # says it was built without CUDA
        want = "no CUDA device" if lamina.build_info()["with_cuda"] else "built without CUDA"
        self.assertIn(want, cm.exception.message)


if __name__ == "__main__":
    unittest.main()
