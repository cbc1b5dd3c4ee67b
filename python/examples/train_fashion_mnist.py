#!/usr/bin/env python3
"""Train lamina's reference CNN on Fashion-MNIST from NumPy arrays — a notebook's worth of code.

    python3 examples/train_fashion_mnist.py                       # 5 epochs, best device
    python3 examples/train_fashion_mnist.py --epochs 1 --limit 5000 --device cpu   # a quick run

The data are Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist) or any folder with the
four IDX files (--data). They are read with NumPy and gzip alone: the images stay uint8, and lamina
normalizes them on the device.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np

try:
    import lamina
except ImportError:  # run from the checkout without installing: use the package next to this folder
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import lamina

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def read_idx(path):
    """An IDX file (plain or .gz) as a NumPy array: a magic number whose last byte is the number of
    dimensions, the dimensions as big-endian uint32, then the uint8 values."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(folder, part):
    def find(name):
        for candidate in (name + ".gz", name):
            if os.path.isfile(os.path.join(folder, candidate)):
                return os.path.join(folder, candidate)
        sys.exit(f"{name}(.gz) not found in {folder}: install dataset-fashion-mnist or give --data DIR")
    return read_idx(find(f"{part}-images-idx3-ubyte")), read_idx(find(f"{part}-labels-idx1-ubyte"))


def main():
    default_data = os.path.join(os.environ["LAMINA_DATA_DIR"], "fashion-mnist") if os.environ.get(
        "LAMINA_DATA_DIR") else "/usr/share/datasets/fashion-mnist"
    ap = argparse.ArgumentParser(description="Train the reference CNN on Fashion-MNIST with lamina.")
    ap.add_argument("--epochs", type=int, default=5, help="epochs (default 5)")
    ap.add_argument("--limit", type=int, default=None, help="train on the first N images only (a quick run)")
    ap.add_argument("--batch", type=int, default=64, help="images per step (default 64)")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default 1e-3)")
    ap.add_argument("--model", default="cnn", help="a preset (cnn, mlp) or a spec (default cnn)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--data", default=default_data, help=f"folder of the IDX files (default {default_data})")
    ap.add_argument("--save", metavar="FILE", help="save the trained model (lamina eval --load FILE reads it)")
    args = ap.parse_args()

    x_train, y_train = load(args.data, "train")  # (60000, 28, 28) uint8, (60000,) uint8
    x_test, y_test = load(args.data, "t10k")
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    print(f"{len(x_train)} training and {len(x_test)} test images of {x_train.shape[1]}x{x_train.shape[2]}")

    model = lamina.Model(args.model, input_shape=(1, 28, 28), device=args.device, seed=1)
    print(f"{model.spec}: {model.param_count:,} parameters on {model.device_name}")
    t0 = time.perf_counter()
    history = model.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch, optimizer="adam", lr=args.lr,
                        validation_data=(x_test, y_test))
    print(f"trained in {time.perf_counter() - t0:.1f} s")

    result = model.evaluate(x_test, y_test)
    print(f"test accuracy {result['accuracy']:.2%}, loss {result['loss']:.4f}")
    pred = model.predict(x_test[:8])
    for i, p in enumerate(pred):
        print(f"  test image {i}: predicted {CLASSES[p]:12s} true {CLASSES[y_test[i]]}")
    if args.save:
        model.save(args.save)
        print(f"saved to {args.save}; reload with lamina.load({args.save!r})")
    return history


if __name__ == "__main__":
    main()
