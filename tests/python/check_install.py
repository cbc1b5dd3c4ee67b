"""`pip install ./python` as a user runs it, in a scratch virtual environment: the wheel must carry
liblamina.so inside the package, and the installed package must import and compute from anywhere,
with no build tree, PYTHONPATH or LAMINA_LIBRARY in sight.

Offline (as the test machines are), pip cannot fetch setuptools into an isolated build environment,
so this uses --no-build-isolation --no-index: the venv sees Debian's setuptools and NumPy through
--system-site-packages. The library comes from LAMINA_LIBRARY (the one CTest just built) rather than
a CMake run inside the test. The package is copied first, so the in-tree build leaves nothing in the
checkout. Exits 0 on success, 1 on failure, 77 (skipped) when venv or pip are missing."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SKIPPED = 77

CHECK = r"""
import os, sys
import numpy as np
import lamina
pkg = os.path.dirname(lamina.__file__)
assert pkg.startswith(sys.prefix), f"lamina imported from {pkg}, not from the venv {sys.prefix}"
assert lamina.library_path == os.path.join(pkg, "liblamina.so"), f"library from {lamina.library_path}"
g = np.floor(np.random.default_rng(1).uniform(0, 255, 10001)).astype(np.float32)
w = np.random.default_rng(2).normal(0.5, 0.1, g.size).astype(np.float32)
out = lamina.create_hidden_layer(g, w, device="cpu")
err = np.max(np.abs(out - np.tanh(g.astype(np.float64) / 255 * w)))
assert err <= 1e-6, err
print(f"installed lamina at {pkg} works: max abs error {err:.2e}")
"""


def run(cmd, env=None, cwd=None):
    print("+", " ".join(c if len(c) < 100 else "<script>" for c in cmd), flush=True)
    return subprocess.run(cmd, env=env, cwd=cwd, timeout=600).returncode


def main():
    lib = os.environ.get("LAMINA_LIBRARY")
    if not lib or not os.path.isfile(lib):
        print(f"LAMINA_LIBRARY={lib!r} must name the built liblamina.so", file=sys.stderr)
        return 1
    try:
        import venv  # noqa: F401
        import ensurepip  # noqa: F401
    except ImportError as e:
        print(f"skipped: {sys.executable} cannot make a venv with pip ({e}); install python3-venv")
        return SKIPPED
    try:  # what an offline build without isolation takes from the system
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        print(f"skipped: {sys.executable} lacks {e.name}, which pip install --no-build-isolation needs here; "
              f"install python3-setuptools, python3-wheel and python3-numpy")
        return SKIPPED
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(os.path.join(REPO, "python"), src,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "liblamina.so"))
        env_dir = os.path.join(tmp, "venv")
        if run([sys.executable, "-m", "venv", "--system-site-packages", env_dir]) != 0:
            print("skipped: could not create a venv with pip (python3-venv missing?)")
            return SKIPPED
        py = os.path.join(env_dir, "bin", "python")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        # A Python that is itself a venv (the GPU machine's) hands its scratch venv the base
        # interpreter's packages, not its own: without NumPy there, nothing can be checked offline.
        if run([py, "-c", "import numpy, setuptools"], env=env) != 0:
            print(f"skipped: a venv made from {sys.executable} does not see NumPy and setuptools "
                  f"(is it a venv itself? base: {sys.base_prefix}); run this test with Debian's /usr/bin/python3")
            return SKIPPED
        if run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", src], env=env) != 0:
            print("not ok - pip install failed", file=sys.stderr)
            return 1
        env.pop("LAMINA_LIBRARY")  # the installed package must find its own copy
        if run([py, "-c", CHECK], env=env, cwd=tmp) != 0:
            print("not ok - the installed package does not work", file=sys.stderr)
            return 1
    print("ok - pip install ./python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
