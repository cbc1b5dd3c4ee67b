"""The Python API's manners, on the CPU backend: a file that is not there is FileNotFoundError; lamina's
messages give Python's advice (keywords, functions) rather than the CLI's flags; evaluate() and
predict() give their batch buffers back when done (the context's in_use drops to what it was);
Model(precision=...) computes in that precision, model by model on a shared context; and `import
lamina` without NumPy says what to do. Small models, a second or two in all."""
import errno
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import lamina
from lamina import _lib

DEV = "cpu"
SPEC = "conv 8 3, relu, maxpool 2, flatten, dense 10"


def data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 12, 12), dtype=np.uint8), rng.integers(0, 10, n)


def in_use():
    return lamina.memory_stats(DEV)["in_use"]


class MissingFiles(unittest.TestCase):
    def test_load(self):
        path = "/nonexistent/model.lamina"
        with self.assertRaises(FileNotFoundError) as cm:
            lamina.load(path, device=DEV)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertEqual(cm.exception.filename, path)
        self.assertIn("no checkpoint file", str(cm.exception))
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(IsADirectoryError):
                lamina.load(d, device=DEV)

    def test_save_into_a_missing_folder(self):
        m = lamina.Model(SPEC, input_shape=(12, 12), device=DEV)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "no-such-folder", "m.lamina")
            with self.assertRaises(FileNotFoundError) as cm:
                m.save(path)
            self.assertEqual(cm.exception.filename, path)
            self.assertIn("does not exist", str(cm.exception))
            self.assertFalse(os.path.exists(os.path.dirname(path)))
        m.close()


class PythonAdvice(unittest.TestCase):
    """C's messages serve the CLI too; from Python their advice names keywords and functions."""

    def test_translations(self):
        cases = {
            "or use --device cpu (or LAMINA_DEVICE=cpu)": "or use device='cpu' (or LAMINA_DEVICE=cpu)",
            "use less (a smaller --batch or model), or raise the cap (--max-memory)":
                "use less (a smaller batch_size or model), or raise the cap (lamina.set_memory_limit(max_memory))",
            "unknown layer; ... see 'lamina train --help'": "unknown layer; ... see help(lamina.Model)",
            "nothing to change --devices": "nothing to change --devices",
        }
        for c_msg, want in cases.items():
            self.assertEqual(_lib.python_advice(c_msg), want)

    def test_spec_error(self):
        with self.assertRaises(lamina.LaminaError) as cm:
            lamina.Model("flatten, dinse 10", device=DEV)
        self.assertIn("help(lamina.Model)", cm.exception.message)
        self.assertNotIn("--", cm.exception.message)

    @unittest.skipIf(lamina.cuda_device_count() > 0, "a CUDA device is present: asking for it does not fail")
    def test_no_cuda(self):
        with self.assertRaises(lamina.LaminaError) as cm:
            lamina.Model("mlp", device="cuda")
        self.assertIn("device='cpu'", cm.exception.message)
        self.assertNotIn("--device", cm.exception.message)

    def test_memory_cap(self):
        # In a child process: a cap would stay on this process's shared CPU context.
        code = ("import numpy as np, lamina\n"
                "lamina.set_memory_limit(1 << 20, device='cpu')\n"
                "m = lamina.Model('cnn', device='cpu')\n"
                "try:\n"
                "    m.evaluate(np.zeros((64, 28, 28), np.uint8), np.zeros(64, np.int64), batch_size=64)\n"
                "except lamina.LaminaError as e:\n"
                "    print(e.status_name + ': ' + e.message)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("out of memory", out.stdout)
        self.assertIn("lamina.set_memory_limit(max_memory)", out.stdout)
        self.assertIn("batch_size", out.stdout)
        self.assertNotIn("--", out.stdout)

    def test_set_memory_limit_arguments(self):
        for bad in (-1, 1.5, "4G", True):
            with self.assertRaisesRegex(ValueError, "max_memory must be a number of bytes"):
                lamina.set_memory_limit(bad, device=DEV)


class BatchBuffers(unittest.TestCase):
    """evaluate() and predict() plan buffers for their batch (hundreds of MB on a GPU for the CNN at
    1000) and give them back when done; the next call plans them again."""

    def test_evaluate_and_predict_release(self):
        x, y = data()
        m = lamina.Model(SPEC, input_shape=(12, 12), device=DEV, seed=4)
        idle = in_use()
        first = m.evaluate(x, y, batch_size=1000)
        self.assertEqual(in_use(), idle)
        self.assertEqual(m.memory()["activations"], 0)
        self.assertEqual(m.memory()["scratch"], 0)
        self.assertEqual(m.evaluate(x, y, batch_size=1000), first)  # planned again, the same figures
        logits = m.predict_logits(x, batch_size=128)
        self.assertEqual(in_use(), idle)
        self.assertEqual(m.memory()["activations"], 0)
        np.testing.assert_array_equal(m.predict(x), logits.argmax(axis=1))
        self.assertEqual(in_use(), idle)
        m.close()

    def test_after_fit(self):
        x, y = data(256, seed=1)
        m = lamina.Model(SPEC, input_shape=(12, 12), device=DEV, seed=5)
        m.fit(x, y, epochs=1, batch_size=32, verbose=0)
        trained = in_use()
        self.assertGreater(m.memory()["activations"], 0)  # the trainer keeps its buffers between epochs
        m.evaluate(x, y)
        self.assertEqual(m.memory()["activations"], 0)
        self.assertLess(in_use(), trained)
        h = m.fit(x, y, epochs=1, batch_size=32, verbose=0)  # plans again
        self.assertTrue(np.isfinite(h[0]["loss"]))
        m.close()


class Precision(unittest.TestCase):
    def test_bf16_on_the_cpu(self):
        x, y = data(64, seed=2)
        m32 = lamina.Model(SPEC, input_shape=(12, 12), device=DEV, seed=6)
        m16 = lamina.Model(SPEC, input_shape=(12, 12), device=DEV, seed=6, precision="BF16")
        self.assertEqual((m32.precision, m16.precision), ("fp32", "bf16"))
        self.assertIn("precision='bf16'", repr(m16))
        self.assertNotIn("precision", repr(m32))
        ref = m32.predict_logits(x)
        low = m16.predict_logits(x)
        # bfloat16 operands (8-bit mantissas): close to fp32, not equal to it
        self.assertFalse(np.array_equal(ref, low))
        np.testing.assert_allclose(low, ref, rtol=0, atol=0.05 * np.abs(ref).max())
        # the two share one context: each call runs in its own model's precision
        np.testing.assert_array_equal(m32.predict_logits(x), ref)
        np.testing.assert_array_equal(m16.predict_logits(x), low)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.lamina")
            m32.save(path)
            loaded = lamina.load(path, device=DEV, precision="bf16")
            self.assertEqual(loaded.precision, "bf16")
            np.testing.assert_array_equal(loaded.predict_logits(x), low)
            loaded.close()
        m32.close()
        m16.close()

    def test_fp16_fit_scales_its_loss(self):
        x, y = data(256, seed=4)
        m = lamina.Model(SPEC, input_shape=(12, 12), device=DEV, seed=5, precision="fp16")
        self.assertEqual(m.precision, "fp16")
        h = m.fit(x, y, epochs=2, batch_size=32, verbose=0)
        for rec in h:  # the trainer's scaler, read where the epoch's statistics are
            self.assertGreaterEqual(rec["loss_scale"], 1)
            self.assertGreaterEqual(rec["skipped_steps"], 0)
        self.assertLess(h[1]["loss"], h[0]["loss"])
        h32 = lamina.Model(SPEC, input_shape=(12, 12), device=DEV, seed=5).fit(x, y, epochs=1, batch_size=32, verbose=0)
        self.assertNotIn("loss_scale", h32[0])  # fp32 does not scale
        m.close()

    def test_bad_precision(self):
        with self.assertRaisesRegex(ValueError, "precision 'fp8' is not one of 'fp32', 'tf32', 'bf16', 'fp16'"):
            lamina.Model("mlp", device=DEV, precision="fp8")
        with self.assertRaisesRegex(TypeError, "precision must be one of"):
            lamina.Model("mlp", device=DEV, precision=16)
        with self.assertRaises(lamina.LaminaError) as cm:  # tensor cores' format: CUDA only
            lamina.Model("mlp", device=DEV, precision="tf32")
        self.assertEqual(cm.exception.status_name, "unsupported")
        self.assertTrue(cm.exception.message.startswith("precision='tf32': tf32 needs tensor cores"),
                        cm.exception.message)
        lamina.Model("mlp", device=DEV).close()  # the context is still usable in fp32


class ImportWithoutNumPy(unittest.TestCase):
    def test_message(self):
        # numpy = None in sys.modules makes `import numpy` fail as where it is not installed
        code = ("import sys\nsys.modules['numpy'] = None\n"
                "try:\n    import lamina\nexcept ImportError as e:\n    print(e)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("lamina needs NumPy", out.stdout)
        self.assertIn("--system-site-packages", out.stdout)
        self.assertIn("install numpy into this Python", out.stdout)


if __name__ == "__main__":
    unittest.main()
