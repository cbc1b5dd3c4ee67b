"""The Python package on the CUDA backend: the hidden layer from pageable NumPy arrays, device arrays
and mixes of them against float64 NumPy, and a model trained on the GPU. Skipped (reported as such,
never passed) where lamina sees no CUDA device; `run_tests.py cuda` exits 77 then, which CTest
reports as skipped."""
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
