"""lamina's build backend: setuptools' own (setuptools.build_meta), each hook first checking that this Python
has what an offline install takes from it. Without it, a Python lacking setuptools (a fresh venv of Python 3.12
or later has none) stops in pip's import of setuptools' backend, with pip's BackendUnavailable traceback, before
setup.py could say what to do; here every such Python gets the one message setup.py gives.
"""
import importlib.util
import os
import site
import sys

try:
    from setuptools import build_meta as _setuptools
except ImportError:  # said by check_requirements, when a hook is called
    _setuptools = None


def _pip_isolated_build():
    """Whether this runs in pip's isolated build environment: pip then takes setuptools and wheel from
    its index and NumPy as a dependency, and hides this Python's own packages (its site-packages are
    off sys.path), so they are not ours to check."""
    sites = getattr(site, "getsitepackages", lambda: [])()
    on_path = {os.path.normcase(os.path.abspath(p)) for p in sys.path if p}
    return bool(sites) and not any(os.path.normcase(os.path.abspath(p)) in on_path for p in sites)


def check_requirements():
    """Stops with one message naming what this Python lacks, and what to use instead."""
    if _pip_isolated_build():
        missing = [m for m in ("setuptools",) if importlib.util.find_spec(m) is None]
    else:
        missing = [m for m in ("setuptools", "wheel", "numpy") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    names = " and ".join(missing) if len(missing) < 3 else ", ".join(missing[:-1]) + " and " + missing[-1]
    raise SystemExit(
        f"lamina setup: this Python ({sys.executable}) lacks {names}, which installing lamina without "
        f"PyPI takes from the Python it installs into (pip install --no-build-isolation ./python). Either "
        f"use Debian's Python, which has them (make deps installs python3-setuptools, python3-wheel and "
        f"python3-numpy):\n"
        f"    /usr/bin/python3 -m venv --system-site-packages VENV && VENV/bin/pip install --no-build-isolation ./python\n"
        f"or install {names} into this Python first (`{sys.executable} -m pip install {' '.join(missing)}` "
        f"where PyPI is reachable).")


def _hook(name):
    def hook(*args, **kwargs):
        check_requirements()
        return getattr(_setuptools, name)(*args, **kwargs)
    hook.__name__ = name
    return hook


get_requires_for_build_wheel = _hook("get_requires_for_build_wheel")
get_requires_for_build_sdist = _hook("get_requires_for_build_sdist")
prepare_metadata_for_build_wheel = _hook("prepare_metadata_for_build_wheel")
build_wheel = _hook("build_wheel")
build_sdist = _hook("build_sdist")
for _name in ("get_requires_for_build_editable", "prepare_metadata_for_build_editable", "build_editable"):
    if _setuptools is None or hasattr(_setuptools, _name):  # editable installs where setuptools has them (>= 64)
        globals()[_name] = _hook(_name)
