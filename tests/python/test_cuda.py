"""The Python package on the CUDA backend: the hidden layer from pageable NumPy arrays, device arrays
and mixes of them against float64 NumPy, CuPy/Numba/PyTorch CUDA arrays in and out without a copy
(the same data pointers), and a model trained on the GPU. Skipped (reported as such,
never passed) where lamina sees no CUDA device; `run_tests.py cuda` exits 77 then, which CTest
reports as skipped."""
import importlib
import os
import tempfile
import unittest

import numpy as np

import lamina
from helpers import course_inputs, fresh_rng, load_fashion_mnist, reference

TOL = 1e-6
NO_CUDA = f"no CUDA device: {lamina.cuda_unavailable_reason()}" if lamina.cuda_device_count() == 0 else ""


@unittest.skipIf(NO_CUDA, NO_CUDA)
class CudaHiddenLayer(unittest.TestCase):
    def setUp(self):
        self.rng = fresh_rng(self)

    def check(self, out, g, w, what):
        if isinstance(out, lamina.DeviceArray):
            out = out.numpy()
        err = float(np.max(np.abs(out.astype(np.float64) - reference(g, w)))) if out.size else 0.0
        self.assertLessEqual(err, TOL, f"{what}: max abs error {err:.3g} (seed {self.seed})")

    def test_auto_is_cuda(self):
        self.assertEqual(lamina.device_info("auto")["device"], "cuda")
        self.assertEqual(lamina.device_info("auto")["name"], lamina.device_info("cuda")["name"])

    def test_pageable(self):
        # Sizes around the chunking of the host path (one chunk, several, a ragged last one).
        for n in (1, 1000, 262_143, 4_194_305, 10_000_019):
            for dt in (np.float32, np.uint8):
                g, w = course_inputs(self.rng, n, dt)
                out, t = lamina.create_hidden_layer(g, w, device="cuda", return_timing=True)
                self.check(out, g, w, f"pageable n={n} {np.dtype(dt)}")
                self.assertGreaterEqual(t["chunks"], 1)

    def test_out_and_strided(self):
        g, w = course_inputs(self.rng, 3_000_001)
        out = np.full(g.size, np.nan, np.float32)
        self.assertIs(lamina.create_hidden_layer(g, w, device="cuda", out=out), out)
        self.check(out, g, w, "out=")
        self.check(lamina.create_hidden_layer(g[::3], w[::3], device="cuda"), g[::3], w[::3], "strided")

    def test_device_arrays(self):
        for dt in (np.float32, np.uint8):
            g, w = course_inputs(self.rng, 5_000_011, dt)
            dg, dw = lamina.to_device(g, "cuda"), lamina.to_device(w, "cuda")
            self.assertEqual(dg.device, "cuda")
            self.assertNotEqual(dg.ptr, 0)
            dout = lamina.device_empty(g.size, device="cuda")
            for _ in range(5):
                lamina.create_hidden_layer(dg, dw, out=dout)  # queued; numpy() waits
            self.check(dout, g, w, f"resident {np.dtype(dt)}")
            self.check(lamina.create_hidden_layer(dg, dw), g, w, "resident, new out")
            self.check(lamina.create_hidden_layer(g, dw), g, w, "host greys, resident weights")
            self.check(lamina.create_hidden_layer(dg, w), g, w, "resident greys, host weights")
            self.check(lamina.create_hidden_layer(g, w, out=dout), g, w, "host inputs, device out")
            for a in (dg, dw, dout):
                a.close()

    def test_cpu_and_cuda_arrays_do_not_mix(self):
        a = lamina.to_device(np.zeros(10, np.float32), "cuda")
        b = lamina.to_device(np.zeros(10, np.float32), "cpu")
        with self.assertRaisesRegex(ValueError, "different devices"):
            lamina.create_hidden_layer(a, b)
        with self.assertRaisesRegex(ValueError, "device='cpu'"):
            lamina.create_hidden_layer(a, a, device="cpu")


def optional(name):
    """An installed module, or the test is skipped (the GPU machine has CuPy, Numba and PyTorch)."""
    try:
        return importlib.import_module(name)
    except Exception as e:  # ImportError, or a CUDA library of its own that does not load
        raise unittest.SkipTest(f"no {name}: {e}")


@unittest.skipIf(NO_CUDA, NO_CUDA)
class CudaInterop(unittest.TestCase):
    """Other libraries' CUDA arrays in and lamina's out, by DLPack and the CUDA Array Interface: same
    pointers both ways, and no lamina memory taken by a call that writes into another library's out."""

    N = 1_000_003

    def setUp(self):
        self.rng = fresh_rng(self)
        self.g, self.w = course_inputs(self.rng, self.N)

    def check(self, got, what):
        err = float(np.max(np.abs(np.asarray(got, np.float64).reshape(-1) - reference(self.g, self.w))))
        self.assertLessEqual(err, TOL, f"{what}: max abs error {err:.3g} (seed {self.seed})")

    def torch_cuda(self):
        torch = optional("torch")
        if not torch.cuda.is_available():
            self.skipTest("PyTorch sees no CUDA device")
        return torch

    def test_device_array_exports(self):
        a = lamina.to_device(self.g, "cuda")
        self.assertEqual(a.__dlpack_device__(), (2, 0))
        cai = a.__cuda_array_interface__
        self.assertEqual(cai, {"version": 3, "shape": (self.N,), "typestr": "<f4", "data": (a.ptr, False),
                               "strides": None, "stream": None})
        a.close()

    def test_torch(self):
        torch = self.torch_cuda()
        tg = torch.from_numpy(self.g).cuda()
        tw = torch.from_numpy(self.w).cuda()
        dg = lamina.from_dlpack(tg)
        self.assertEqual((dg.ptr, dg.device, dg.shape), (tg.data_ptr(), "cuda", (self.N,)))
        dg.close()
        self.assertTrue(torch.equal(tg.cpu(), torch.from_numpy(self.g)))  # close() let go, freed nothing
        out = lamina.create_hidden_layer(tg, tw)  # two device inputs: a new DeviceArray
        self.assertIsInstance(out, lamina.DeviceArray)
        t = torch.from_dlpack(out)  # lamina's queued kernel is waited for by the export
        self.assertEqual(t.data_ptr(), out.ptr)
        self.check(t.cpu().numpy(), "torch in, DeviceArray out, torch.from_dlpack")
        # out= a torch tensor: written in place, and lamina allocates nothing for the call
        tout = torch.empty(self.N, device="cuda")
        ptr, before = tout.data_ptr(), lamina.memory_stats("cuda")["in_use"]
        self.assertIs(lamina.create_hidden_layer(tg, tw, out=tout), tout)
        self.assertEqual((tout.data_ptr(), lamina.memory_stats("cuda")["in_use"]), (ptr, before))
        self.check(tout.cpu().numpy(), "torch in, torch out")
        self.check(lamina.create_hidden_layer(tg.to(torch.uint8), tw).numpy(), "torch uint8 greys")
        del t
        out.close()

    def test_torch_side_stream(self):
        # Inputs still being written on a PyTorch side stream: from_dlpack waits for them.
        torch = self.torch_cuda()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            tg = torch.from_numpy(self.g).cuda(non_blocking=True)
            tw = torch.from_numpy(self.w).cuda(non_blocking=True)
            for _ in range(20):  # queue enough work for a race to show
                tw = tw * 1.0
            out = lamina.create_hidden_layer(tg, tw)
        self.check(out.numpy(), "inputs from a side stream")

    def test_torch_through_cuda_array_interface(self):
        torch = self.torch_cuda()
        tg, tw = torch.from_numpy(self.g).cuda(), torch.from_numpy(self.w).cuda()

        class OnlyCai:  # what Numba-style producers give: the interface alone
            def __init__(self, t):
                self.t = t

            @property
            def __cuda_array_interface__(self):
                return self.t.__cuda_array_interface__

        dg = lamina.from_dlpack(OnlyCai(tg))
        self.assertEqual(dg.ptr, tg.data_ptr())
        self.check(lamina.create_hidden_layer(OnlyCai(tg), OnlyCai(tw)).numpy(), "CAI in")

    def test_torch_refusals(self):
        torch = self.torch_cuda()
        with self.assertRaisesRegex(TypeError, "float32 or uint8"):
            lamina.from_dlpack(torch.zeros(4, dtype=torch.float64, device="cuda"))
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            lamina.from_dlpack(torch.zeros(4, 4, device="cuda").t())

    def test_cupy(self):
        cp = optional("cupy")
        cg, cw = cp.asarray(self.g), cp.asarray(self.w)
        dg = lamina.from_dlpack(cg)
        self.assertEqual(dg.ptr, cg.data.ptr)
        out = lamina.create_hidden_layer(cg, cw)
        self.assertEqual(cp.from_dlpack(out).data.ptr, out.ptr)  # DLPack out
        view = cp.asarray(out)  # __cuda_array_interface__ out
        self.assertEqual(view.data.ptr, out.ptr)
        self.check(cp.asnumpy(view), "cupy in, cupy.asarray out")
        cout = cp.empty(self.N, cp.float32)
        self.assertIs(lamina.create_hidden_layer(cg, cw, out=cout), cout)
        self.check(cp.asnumpy(cout), "cupy in, cupy out")

    def test_numba(self):
        cuda = optional("numba.cuda")
        if not cuda.is_available():
            self.skipTest("Numba sees no CUDA device")
        ng, nw = cuda.to_device(self.g), cuda.to_device(self.w)
        dg = lamina.from_dlpack(ng)  # Numba gives the CUDA Array Interface
        self.assertEqual(dg.ptr, ng.__cuda_array_interface__["data"][0])
        out = lamina.create_hidden_layer(ng, nw)
        nout = cuda.as_cuda_array(out)
        self.assertEqual(nout.__cuda_array_interface__["data"][0], out.ptr)
        self.check(nout.copy_to_host(), "numba in, numba view out")
        nout2 = cuda.device_array(self.N, np.float32)
        self.assertIs(lamina.create_hidden_layer(ng, nw, out=nout2), nout2)
        self.check(nout2.copy_to_host(), "numba in, numba out")


@unittest.skipIf(NO_CUDA, NO_CUDA)
class CudaModel(unittest.TestCase):
    def test_train_predict_save(self):
        data = load_fashion_mnist(4000, 1000)
        if data is None:
            self.skipTest("Fashion-MNIST not found")
        x, y, xt, yt = data
        m = lamina.Model("cnn", device="cuda", seed=1)
        self.assertEqual(m.device, "cuda")
        h = m.fit(x, y, epochs=2, batch_size=64, verbose=0)
        self.assertLess(h[1]["loss"], h[0]["loss"])
        res = m.evaluate(xt, yt)
        self.assertGreater(res["accuracy"], 0.6)
        self.assertEqual(m.memory()["activations"], 0)  # evaluate gave its batch buffers back
        pred = m.predict(xt)
        self.assertEqual(m.memory()["activations"], 0)
        self.assertEqual(float(np.mean(pred == yt)), res["accuracy"])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "gpu.lamina")
            m.save(path)
            on_cpu = lamina.load(path, device="cpu")
            self.assertTrue(np.array_equal(on_cpu.get_params(), m.get_params()))
            np.testing.assert_allclose(on_cpu.predict_logits(xt[:200]), m.predict_logits(xt[:200]), rtol=1e-4,
                                       atol=1e-4)
            on_cpu.close()
        m.close()


if __name__ == "__main__":
    unittest.main()
