"""Installing the package as a user does, in scratch virtual environments. Two checks, one per CTest test:

`check_install.py` (test_python_install): README's command, `pip install --no-build-isolation ./python`,
run from a folder holding a copy of python/, in a fresh `venv --system-site-packages` of this Python
(Debian's /usr/bin/python3 under make test). The wheel must carry liblamina.so inside the package, and
the installed package must import and compute from anywhere, with no build tree, PYTHONPATH or
LAMINA_LIBRARY in sight. Offline (as the test machines are) pip cannot fetch setuptools and wheel into
an isolated build environment: --no-build-isolation takes Debian's, which the venv sees with NumPy
through --system-site-packages. The library comes from LAMINA_LIBRARY (the one CTest just built)
rather than a CMake run inside the test.

`check_install.py message` (test_python_install_message): where the Python lacks what that takes, the
install stops with setup.py's one message (what is missing, what to use instead), not pip's `invalid
command 'bdist_wheel'` or a traceback; and `import lamina` without NumPy says the same. Its Pythons:
a fresh venv (no system site packages: pip and setuptools — none from Python 3.12 — no wheel, no NumPy) of
the first python3 on PATH and of this one, through pip; a venv of this one with setuptools taken out, through
pip (the build backend's check, _lamina_build.py); and a venv made --without-pip (nothing at all), running
setup.py directly.

The package is copied first, so the in-tree build leaves nothing in the checkout. Exits 0 on success,
1 on failure, 77 (skipped) when no venv can be made."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SKIPPED = 77
README_INSTALL = ["install", "--no-build-isolation", "./python"]  # README.md's command, after `pip`

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

IMPORT_WITHOUT_NUMPY = r"""
try:
    import lamina
except ImportError as e:
    print(e)
else:
    raise SystemExit("import lamina worked in a Python without NumPy")
"""


def run(cmd, env=None, cwd=None, capture=False):
    print("+", " ".join(c if len(c) < 100 else "<script>" for c in cmd), flush=True)
    p = subprocess.run(cmd, env=env, cwd=cwd, timeout=600, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None, text=True)
    if capture:
        print(p.stdout, end="", flush=True)
    return p


def clean_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def copy_package(tmp):
    """tmp/python: the package as the checkout has it, without build leftovers."""
    dst = os.path.join(tmp, "python")
    shutil.copytree(os.path.join(REPO, "python"), dst,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "liblamina.so"))
    return dst


def good_path():
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
        copy_package(tmp)
        env_dir = os.path.join(tmp, "venv")
        if run([sys.executable, "-m", "venv", "--system-site-packages", env_dir]).returncode != 0:
            print("skipped: could not create a venv with pip (python3-venv missing?)")
            return SKIPPED
        py, pip = os.path.join(env_dir, "bin", "python"), os.path.join(env_dir, "bin", "pip")
        env = clean_env()
        # A Python that is itself a venv (the GPU machine's) hands its scratch venv the base
        # interpreter's packages, not its own: without NumPy there, nothing can be checked offline.
        if run([py, "-c", "import numpy, setuptools, wheel"], env=env).returncode != 0:
            print(f"skipped: a venv made from {sys.executable} does not see NumPy, setuptools and wheel "
                  f"(is it a venv itself? base: {sys.base_prefix}); run this test with Debian's /usr/bin/python3")
            return SKIPPED
        if run([pip, *README_INSTALL], env=env, cwd=tmp).returncode != 0:
            print("not ok - pip install --no-build-isolation ./python failed", file=sys.stderr)
            return 1
        env.pop("LAMINA_LIBRARY")  # the installed package must find its own copy
        if run([py, "-c", CHECK], env=env, cwd=tmp).returncode != 0:
            print("not ok - the installed package does not work", file=sys.stderr)
            return 1
    print("ok - pip install --no-build-isolation ./python")
    return 0


def expect_message(what, out, missing):
    """setup.py's message, naming each of `missing`, and nothing of pip's own failures."""
    bad = []
    named = re.search(r"lamina setup: this Python \(.*?\) lacks (.*?), which", out)
    if not named:
        bad.append("no 'lamina setup: this Python (...) lacks ...' message")
    for name in missing:
        if named and name not in re.findall(r"\w+", named.group(1)):
            bad.append(f"the message does not name {name}")
    for want in ("/usr/bin/python3 -m venv --system-site-packages", "--no-build-isolation"):
        if want not in out:
            bad.append(f"the message does not mention {want!r}")
    for unwanted in ("Traceback", "invalid command 'bdist_wheel'", "BackendUnavailable"):
        if unwanted in out:
            bad.append(f"the output holds {unwanted!r}")
    if bad:
        print(f"not ok - {what}: " + "; ".join(bad), file=sys.stderr)
        return False
    print(f"ok - {what}")
    return True


def expect_refused(what, cmd, env, cwd, missing):
    """cmd must fail with the message naming `missing` (expect_message)."""
    p = run(cmd, env=env, cwd=cwd, capture=True)
    if p.returncode == 0:
        print(f"not ok - {what} succeeded", file=sys.stderr)
        return False
    return expect_message(what, p.stdout, missing)


def message_path():
    ok, made = True, 0
    with tempfile.TemporaryDirectory() as tmp:
        src = copy_package(tmp)
        env = clean_env()
        # Through pip, as a user would: fresh venvs without the system's packages. Each has pip and
        # (Python <= 3.11) setuptools, but neither wheel nor NumPy.
        pythons = []
        for py in (shutil.which("python3"), sys.executable):
            if py and os.path.realpath(py) not in [os.path.realpath(p) for p in pythons]:
                pythons.append(py)
        for i, base in enumerate(pythons):
            env_dir = os.path.join(tmp, f"bare{i}")
            if run([base, "-m", "venv", env_dir], env=env).returncode != 0:
                print(f"note: {base} cannot make a venv with pip; trying the next Python")
                continue
            made += 1
            py, pip = os.path.join(env_dir, "bin", "python"), os.path.join(env_dir, "bin", "pip")
            has = run([py, "-c", "import importlib.util as u; "
                                 "print(' '.join(m for m in ('setuptools', 'wheel', 'numpy') if u.find_spec(m)))"],
                      env=env, capture=True).stdout.split()
            missing = [m for m in ("wheel", "numpy") if m not in has]
            if "setuptools" not in has:  # Python >= 3.12: the build backend's check says it
                missing = ["setuptools"] + missing
            if not missing:
                print(f"note: a fresh venv of {base} has wheel and NumPy; nothing is missing there")
                continue
            ok &= expect_refused(f"pip install in a venv of {base} without {' and '.join(missing)}",
                                 [pip, *README_INSTALL], env, tmp, missing)
        # pip and nothing else (setuptools taken out of a fresh venv of this Python): pip imports lamina's build
        # backend, whose check speaks before setuptools' backend is needed (no BackendUnavailable traceback).
        env_dir = os.path.join(tmp, "nosetuptools")
        if run([sys.executable, "-m", "venv", env_dir], env=env).returncode == 0:
            made += 1
            py, pip = os.path.join(env_dir, "bin", "python"), os.path.join(env_dir, "bin", "pip")
            run([pip, "uninstall", "-y", "-q", "setuptools"], env=env, capture=True)
            left = run([py, "-c", "import importlib.util as u; print(u.find_spec('setuptools') is None)"], env=env,
                       capture=True).stdout.strip()
            if left != "True":
                print(f"note: setuptools could not be taken out of a venv of {sys.executable}; not checked")
            else:
                ok &= expect_refused("pip install in a venv without setuptools, wheel and numpy",
                                     [pip, *README_INSTALL], env, tmp, ["setuptools", "wheel", "numpy"])
        # With nothing installed at all: setup.py itself, and the package's import.
        env_dir = os.path.join(tmp, "none")
        if run([sys.executable, "-m", "venv", "--without-pip", env_dir], env=env).returncode == 0:
            made += 1
            py = os.path.join(env_dir, "bin", "python")
            ok &= expect_refused("setup.py in a venv without setuptools, wheel and numpy",
                                 [py, "setup.py", "bdist_wheel"], env, src, ["setuptools", "wheel", "numpy"])
            p = run([py, "-c", IMPORT_WITHOUT_NUMPY], env=dict(env, PYTHONPATH=src), cwd=tmp, capture=True)
            msg_ok = p.returncode == 0 and "lamina needs NumPy" in p.stdout and "--system-site-packages" in p.stdout
            print(("ok" if msg_ok else "not ok") + " - import lamina without NumPy says what to do",
                  file=sys.stdout if msg_ok else sys.stderr)
            ok &= msg_ok
    if made == 0:
        print("skipped: no venv could be made (python3-venv missing?)")
        return SKIPPED
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(message_path() if sys.argv[1:] == ["message"] else good_path())
