"""Ships liblamina.so inside the `lamina` package, so that an installed package needs no build tree.

Where the library comes from, in order:
  1. LAMINA_LIBRARY=/path/to/liblamina.so: that file, as it is;
  2. the repository around this folder, built with CMake: an existing build/ (or build-gpu/) is
     brought up to date (`cmake --build`, the library target only); without one, build-python/ is
     configured (Release, no tests; LAMINA_CMAKE_ARGS adds options, e.g. -DLAMINA_CUDA=OFF) and built.
Everything else about the package is in pyproject.toml.

Before anything else it checks that the Python it installs into has what an offline install takes
from it (setuptools, wheel, NumPy), and says what to do where it does not: pip's own messages for
that are `invalid command 'bdist_wheel'` or a traceback.
"""
import os
import shlex
import subprocess
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _lamina_build import check_requirements  # noqa: E402  (the build backend's check, one definition)

check_requirements()

from setuptools import Distribution, setup  # noqa: E402  (after the check, which says why it may be missing)
from setuptools.command.build_py import build_py  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LIB = "liblamina.so"


def _run(cmd):
    print("lamina setup:", " ".join(shlex.quote(c) for c in cmd), flush=True)
    try:
        subprocess.run(cmd, check=True)
    except FileNotFoundError as e:
        raise SystemExit(f"lamina setup: {cmd[0]} not found ({e}): install CMake and a C compiler "
                         f"(`make deps` in the repository), or build liblamina.so elsewhere and set LAMINA_LIBRARY")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"lamina setup: building liblamina failed ({' '.join(cmd)} exited {e.returncode}); "
                         f"see the output above, or set LAMINA_LIBRARY to a library built beforehand")


def find_or_build_library():
    env = os.environ.get("LAMINA_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise SystemExit(f"lamina setup: LAMINA_LIBRARY={env!r} is not a file")
        return env
    if not os.path.isfile(os.path.join(REPO, "CMakeLists.txt")):
        raise SystemExit(f"lamina setup: no lamina sources at {REPO} (this package builds its library from the "
                         f"repository around it); set LAMINA_LIBRARY=/path/to/liblamina.so")
    jobs = str(os.cpu_count() or 2)
    for name in ("build", "build-gpu"):
        build = os.path.join(REPO, name)
        if os.path.isfile(os.path.join(build, "CMakeCache.txt")):
            # An existing build tree may be older than the sources: bring the library up to date.
            _run(["cmake", "--build", build, "--target", "lamina_shared", "-j", jobs])
            return os.path.join(build, LIB)
    build = os.path.join(REPO, "build-python")
    _run(["cmake", "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DLAMINA_BUILD_TESTS=OFF"]
         + shlex.split(os.environ.get("LAMINA_CMAKE_ARGS", "")))
    _run(["cmake", "--build", build, "--target", "lamina_shared", "-j", jobs])
    return os.path.join(build, LIB)


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = find_or_build_library()
        self.copy_file(lib, os.path.join(self.build_lib, "lamina", LIB), preserve_mode=True)


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
