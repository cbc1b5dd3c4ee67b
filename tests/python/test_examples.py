"""The examples in python/examples run, at toy sizes, and say what they should: examples that nobody
runs stop working without anyone noticing."""
import os
import subprocess
import sys
import tempfile
import unittest

from helpers import REPO, fashion_mnist_dir

EXAMPLES = os.path.join(REPO, "python", "examples")


def run(script, *args):
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


class Examples(unittest.TestCase):
    def test_assessment(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc, out = run("assessment.py", "--n", "200K", "--repeat", "2", "--device", "cpu", "--no-numba", "--json",
                          os.path.join(tmp, "a.json"))
            self.assertEqual(rc, 0, out)
            self.assertIn("np.allclose(out, numpy, atol=0.01) = True", out)
            self.assertIn("lamina, out= preallocated array", out)
            self.assertIn("course bar: whole call < 1 s: met", out)
            self.assertNotIn("FAILED", out)
            self.assertTrue(os.path.getsize(os.path.join(tmp, "a.json")) > 0)
        rc, out = run("assessment.py", "--n", "many")
        self.assertEqual(rc, 2, out)
        self.assertIn("--n 'many' is not a count", out)

    @unittest.skipIf(fashion_mnist_dir() is None, "Fashion-MNIST not found")
    def test_train_fashion_mnist(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.lamina")
            rc, out = run("train_fashion_mnist.py", "--epochs", "1", "--limit", "1000", "--model", "mlp", "--device",
                          "cpu", "--data", fashion_mnist_dir(), "--save", path)
            self.assertEqual(rc, 0, out)
            self.assertRegex(out, r"test accuracy \d+\.\d\d%")
            self.assertTrue(os.path.isfile(path))


if __name__ == "__main__":
    unittest.main()
