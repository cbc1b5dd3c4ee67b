"""Shared bits of the Python tests: paths, Fashion-MNIST from its IDX gzip files, writing a small
MNIST-layout folder for the CLI, and a reproducible random generator whose seed is reported."""
import gzip
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def cli_path():
    """The lamina command: LAMINA_CLI (CTest sets it), else the build tree's."""
    return os.environ.get("LAMINA_CLI") or os.path.join(REPO, "build", "lamina")


def fashion_mnist_dir():
    base = os.environ.get("LAMINA_DATA_DIR")
    d = os.path.join(base, "fashion-mnist") if base else "/usr/share/datasets/fashion-mnist"
    return d if os.path.isfile(os.path.join(d, "train-images-idx3-ubyte.gz")) else None


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist(n_train, n_test):
    """(x_train, y_train, x_test, y_test), the first n of each part; None without the data set."""
    d = fashion_mnist_dir()
    if d is None:
        return None
    def part(name, n):
        return read_idx(os.path.join(d, name))[:n]
    return (part("train-images-idx3-ubyte.gz", n_train), part("train-labels-idx1-ubyte.gz", n_train),
            part("t10k-images-idx3-ubyte.gz", n_test), part("t10k-labels-idx1-ubyte.gz", n_test))


def write_mnist_dir(folder, x_train, y_train, x_test, y_test):
    """A folder in the MNIST file layout (plain IDX), which `lamina train/eval --data DIR` reads."""
    def put(name, a, magic):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in a.shape) + a.tobytes())
    put("train-images-idx3-ubyte", x_train, 0x803)
    put("train-labels-idx1-ubyte", y_train, 0x801)
    put("t10k-images-idx3-ubyte", x_test, 0x803)
    put("t10k-labels-idx1-ubyte", y_test, 0x801)


def fresh_rng(test):
    """A generator with a fresh seed, printed in the test's failure messages (test.seed) so that a
    failing draw can be replayed: LAMINA_TEST_SEED=... fixes it."""
    seed = int(os.environ.get("LAMINA_TEST_SEED") or np.random.SeedSequence().entropy % 2**63)
    test.seed = seed
    return np.random.default_rng(seed)


def course_inputs(rng, n, grey_dtype=np.float32):
    """Inputs as the course draws them: greys = floor(uniform(0, 255)), weights = normal(0.5, 0.1)."""
    greys = np.floor(rng.uniform(0, 255, n)).astype(grey_dtype)
    weights = rng.normal(0.5, 0.1, n).astype(np.float32)
    return greys, weights


def reference(greys, weights):
    """The float64 reference tanh(grey / 255 * w)."""
    return np.tanh(np.asarray(greys, np.float64) / 255.0 * np.asarray(weights, np.float64))
