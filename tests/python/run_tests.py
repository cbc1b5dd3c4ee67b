"""Runs the Python package's tests for CTest: `run_tests.py cpu` runs everything that runs anywhere
(the CUDA classes are reported as skipped there); `run_tests.py cuda` runs the CUDA tests alone and
exits 77 (CTest's "skipped") where lamina sees no CUDA device, so that a GPU check never passes
without a GPU. Both exit 77 when this Python has no NumPy. Exits 0 when all ran tests passed, 1 otherwise.

Environment: PYTHONPATH must reach the package (<repo>/python); LAMINA_LIBRARY the library to test;
LAMINA_CLI the lamina command (for the checkpoint round trips)."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# One thread count for this process and the `lamina` commands it runs: test_model compares Python's
# training with the CLI's bit for bit, and a different count sums in another order (the default is the
# cores this process may use, which a command started under another affinity would see differently).
# Set before lamina makes its first context.
os.environ.setdefault("LAMINA_THREADS", str(os.cpu_count() or 1))
CPU_MODULES = ["test_abi", "test_hidden", "test_model", "test_api", "test_images", "test_examples", "test_interop",
               "test_bench_plot", "test_cuda", "test_clips"]
SKIPPED = 77


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    if mode not in ("cpu", "cuda"):
        sys.exit(f"usage: {sys.argv[0]} cpu|cuda")
    try:
        import numpy  # noqa: F401
    except ImportError:
        # Reported as skipped, not passed: the package cannot be tested without NumPy.
        print(f"skipped: {sys.executable} has no NumPy: install python3-numpy (make deps) or configure with "
              f"-DLAMINA_PYTHON=/path/to/python3-with-numpy")
        return SKIPPED
    sys.path.insert(0, HERE)
    import lamina
    print(f"lamina {lamina.__version__} from {lamina.__file__}, library {lamina.library_path}")
    os.environ.pop("LAMINA_DEVICE", None)  # the tests choose their devices themselves
    if mode == "cuda":
        if lamina.cuda_device_count() == 0:
            print(f"skipped: no CUDA device ({lamina.cuda_unavailable_reason()})")
            return SKIPPED
        modules = ["test_cuda"]
    else:
        modules = [m for m in CPU_MODULES if m != "test_cuda" or lamina.cuda_device_count() == 0]
    suite = unittest.defaultTestLoader.loadTestsFromNames(modules)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
