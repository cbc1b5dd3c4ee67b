"""Models from NumPy: build from a one-line spec, fit on uint8 images, evaluate, predict, save and load —
the same C engine and checkpoint files as `lamina train` / `lamina eval`."""
import os
import struct
import sys

import numpy as np
from ctypes import byref, c_double, c_float, c_void_p, create_string_buffer

from . import _arrays, _lib
from ._context import Closing, get_context
from ._lib import check, lib

# The trainer's normalization of uint8 pixels, (p / 255 - 0.5) / 0.5 (PIXEL_MEAN and PIXEL_STD in
# src/nn/train.c); predict() normalizes with these through the library (see _pixel_table).
PIXEL_MEAN = 0.5
PIXEL_STD = 0.5


def _pixel_table(ctx):
    """The normalized value of each of the 256 pixel values, as the context's backend computes it: (p/255 -
    0.5)/0.5 in float32 is p * (1/127.5) - 1, and whether that is rounded once (a fused multiply-add, as
    CUDA and CPU builds for FMA machines do) or twice changes 158 of the 256 values by an ulp. Asking the
    library once per context, through lam_normalize_images (the same arithmetic as the trainer's batch
    gather), makes predict() see exactly the inputs that training and evaluate() see."""
    lut = getattr(ctx, "pixel_table", None)
    if lut is not None:
        return lut
    pixels = np.arange(256, dtype=np.uint8)
    lut = np.empty(256, np.float32)
    mean, std = (c_float * 1)(PIXEL_MEAN), (c_float * 1)(PIXEL_STD)
    d_in, d_out = c_void_p(), c_void_p()
    with ctx.lock:
        try:
            check(lib.lam_mem_alloc(ctx.ptr, byref(d_in), pixels.nbytes))
            check(lib.lam_mem_alloc(ctx.ptr, byref(d_out), lut.nbytes))
            check(lib.lam_mem_upload(ctx.ptr, d_in, pixels.ctypes.data, pixels.nbytes))
            # One "image" of 1 x 1 x 256 pixels.
            check(lib.lam_normalize_images(ctx.ptr, 1, 1, 1, 256, _lib.LAYOUT_NCHW, d_in, mean, std, _lib.DTYPE_F32,
                                           d_out))
            check(lib.lam_mem_download(ctx.ptr, lut.ctypes.data, d_out, lut.nbytes))
        finally:
            lib.lam_mem_free(ctx.ptr, d_in)
            lib.lam_mem_free(ctx.ptr, d_out)
    ctx.pixel_table = lut
    return lut


def _dataset(x8, y8, classes):
    """A lam_dataset over NumPy memory. The caller keeps x8 and y8 alive while C uses the struct, and
    never passes it to lam_dataset_free (NumPy owns the memory)."""
    n, _, h, w = x8.shape
    return _lib.Dataset(n=n, h=h, w=w, classes=classes, images=x8.ctypes.data, labels=y8.ctypes.data)


def _positive_int(v, name, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {type(v).__name__}")
    if v < 1 or (hi is not None and v > hi):
        raise ValueError(f"{name} = {v} is out of range (1 to {hi})" if hi else f"{name} = {v} must be at least 1")
    return int(v)


def _seed(v, name="seed"):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < 2**64:
        raise ValueError(f"{name} must be an integer from 0 to 2**64 - 1, not {v!r}")
    return int(v)


class Model(Closing):
    """A network from a one-line spec: a preset ("cnn", "mlp") or layers separated by commas, e.g.
    "conv 32 3, relu, maxpool 2, flatten, dense 10" (see README). input_shape is (channels, height,
    width) of one image (or (height, width) for one channel). Parameters start as PyTorch's defaults,
    drawn from seed. device: "auto", "cpu" or "cuda"."""

    def __init__(self, spec="cnn", input_shape=(1, 28, 28), device="auto", seed=1, _handle=None, _ctx=None):
        self._ptr = None
        self._trainer = None
        self._trainer_data = None  # (lam_dataset, x8, y8): a streaming trainer reads them until it is freed
        if not isinstance(spec, str):
            raise TypeError(f"spec must be a string such as 'cnn' or 'flatten, dense 10', not {type(spec).__name__}")
        shape = tuple(input_shape)
        if len(shape) == 2:
            shape = (1,) + shape
        if len(shape) != 3 or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in shape):
            raise ValueError(f"input_shape must be (channels, height, width) of positive integers, not {input_shape!r}")
        self.input_shape = tuple(int(s) for s in shape)
        self.seed = _seed(seed)
        self._ctx = _ctx or get_context(device)
        self._fits = 0          # fit() calls so far: later calls shuffle with seeds derived from seed
        self.epochs_done = 0    # epochs trained through this object
        if _handle is not None:
            self._ptr = _handle
        else:
            ptr = c_void_p()
            c, h, w = self.input_shape
            with self._ctx.lock:
                check(lib.lam_model_create(self._ctx.ptr, spec.encode(), c, h, w, self.seed, byref(ptr)))
            self._ptr = ptr.value

    # ---- what the model is ---------------------------------------------------------------------

    def _handle(self):
        if self._ptr is None:
            raise ValueError("this Model was closed")
        return self._ptr

    @property
    def spec(self):
        """The spec with presets expanded."""
        return lib.lam_model_spec(self._handle()).decode()

    @property
    def outputs(self):
        """Features of the last layer: the number of classes."""
        return lib.lam_model_outputs(self._handle())

    @property
    def param_count(self):
        return lib.lam_model_param_count(self._handle())

    @property
    def device(self):
        """"cpu" or "cuda"."""
        return self._ctx.device

    @property
    def device_name(self):
        return self._ctx.name

    def __repr__(self):
        if self._ptr is None:
            return "Model(closed)"
        return (f"Model({self.spec!r}, input_shape={self.input_shape}, device={self.device!r}, "
                f"params={self.param_count})")

    def summary(self):
        """One line per layer: kind, output shape, parameters."""
        buf = create_string_buffer(1 << 16)
        with self._ctx.lock:
            check(lib.lam_model_describe(self._handle(), buf, len(buf)))
        return buf.value.decode()

    def get_params(self):
        """All parameters as one flat float32 array: layer by layer, weight then bias, in PyTorch's layouts."""
        p = np.empty(self.param_count, np.float32)
        with self._ctx.lock:
            check(lib.lam_model_params_get(self._handle(), p.ctypes.data, p.size))
        return p

    def set_params(self, params):
        p = np.ascontiguousarray(_arrays.as_array(params, "params"), dtype=np.float32).reshape(-1)
        if p.size != self.param_count:
            raise ValueError(f"params has {p.size} values but the model has {self.param_count} parameters")
        with self._ctx.lock:
            check(lib.lam_model_params_set(self._handle(), p.ctypes.data, p.size))

    def memory(self):
        """Where the model's (and its last trainer's) backend memory goes, in bytes."""
        mm = _lib.ModelMemory()
        with self._ctx.lock:
            check(lib.lam_model_memory_get(self._handle(), self._trainer, byref(mm)))
        return {name: int(getattr(mm, name)) for name, _ in _lib.ModelMemory._fields_}

    # ---- training ------------------------------------------------------------------------------

    def _train_data(self, x, y, what):
        c, h, w = self.input_shape
        if c != 1:
            raise ValueError(f"{what} takes one-channel images; this model's input is {self.input_shape}")
        x8 = _arrays.images(x, self.input_shape)
        if x8.shape[0] == 0:
            raise ValueError(f"{what}: x holds no images")
        if x8.shape[0] > 2**31 - 1:
            raise ValueError(f"{what}: {x8.shape[0]} images is more than lamina's data sets hold (2**31 - 1)")
        y8 = _arrays.labels(y, x8.shape[0], self.outputs)
        return x8, y8

    def fit(self, x, y, epochs=1, batch_size=64, optimizer="adam", lr=None, momentum=None, weight_decay=None,
            seed=None, verbose=1, validation_data=None):
        """Trains on uint8 images x ((n, h, w) or (n, 1, h, w)) with integer labels y for `epochs` epochs,
        shuffling each epoch, softmax cross-entropy. The images go to the device once, as uint8, and are
        normalized there as (p/255 - 0.5)/0.5.

        optimizer: "sgd", "adam" or "adamw", with PyTorch's defaults for lr (0.01 for sgd, 1e-3 for
        adam/adamw), momentum (0) and weight_decay (0; adamw 0.01) unless given. The optimizer's state
        stays in the model, so a second fit() with the same optimizer continues it.
        seed: the shuffling seed; by default the model's seed on the first fit() (as `lamina train`,
        which uses --seed for both) and a different one derived from it on each later call.
        verbose: 0 silent, 1 a line per epoch (and a live progress line on a terminal).
        validation_data: (x_val, y_val) to evaluate after every epoch.

        Returns the history: a list with one dict per epoch: epoch, loss, accuracy (training, over
        the epoch), seconds, images_per_s, and val_loss, val_accuracy with validation_data.
        """
        x8, y8 = self._train_data(x, y, "fit")
        epochs = _positive_int(epochs, "epochs")
        batch_size = _positive_int(batch_size, "batch_size", 65536)
        if not isinstance(optimizer, str) or optimizer.lower() not in _lib.OPTIMIZERS:
            raise ValueError(f"optimizer {optimizer!r} is not one of 'sgd', 'adam', 'adamw'")
        kind = optimizer.lower()
        opt = lib.lam_opt_default(_lib.OPTIMIZERS[kind])
        for name, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, not {value!r}")
            if name == "momentum" and kind != "sgd":
                raise ValueError(f"momentum applies to sgd; {kind} has beta1/beta2 instead")
            setattr(opt, name, float(value))
        if seed is None:
            # Knuth's multiplicative constant: distinct seeds per call, none equal to the first.
            seed = (self.seed + self._fits * 2654435761) % 2**64
        seed = _seed(seed)
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise TypeError("validation_data must be a pair (x_val, y_val)")
            val = self._train_data(validation_data[0], validation_data[1], "validation_data")

        self._free_trainer()
        ds = _dataset(x8, y8, self.outputs)
        t = c_void_p()
        with self._ctx.lock:
            check(lib.lam_trainer_create(self._handle(), byref(opt), batch_size, seed, byref(ds), byref(t)))
        self._trainer = t.value
        self._trainer_data = (ds, x8, y8)
        self._fits += 1

        live = bool(verbose) and sys.stdout.isatty()
        steps = (x8.shape[0] + batch_size - 1) // batch_size
        interrupted = []

        def progress(_user, step, nsteps, loss, ips):
            # Runs inside the C epoch loop: an exception here cannot propagate through C, so a Ctrl-C
            # is noted and raised when the epoch returns.
            try:
                print(f"\r  epoch {self.epochs_done + 1}: step {step}/{nsteps}  loss {loss:.4f}  "
                      f"{ips:,.0f} images/s", end="", flush=True)
            except KeyboardInterrupt:
                interrupted.append(True)

        # Each progress report waits for the device to read the loss; a few dozen per epoch are free.
        cb = _lib.ProgressFn(progress) if live else _lib.ProgressFn()
        every = max(1, steps // 40) if live else 0
        history = []
        for _ in range(epochs):
            st = _lib.EpochStats()
            with self._ctx.lock:
                check(lib.lam_trainer_epoch(self._trainer, cb, None, every, byref(st)))
            if live:
                print("\r" + " " * 79 + "\r", end="")
            if interrupted:
                raise KeyboardInterrupt
            self.epochs_done += 1
            rec = {"epoch": self.epochs_done, "loss": st.train_loss, "accuracy": st.train_acc, "seconds": st.seconds,
                   "images_per_s": st.images_per_s}
            if validation_data is not None:
                ev = self._evaluate(*val, batch_size=1000)
                rec["val_loss"], rec["val_accuracy"] = ev["loss"], ev["accuracy"]
            history.append(rec)
            if verbose:
                line = (f"epoch {rec['epoch']}: loss {rec['loss']:.4f}  accuracy {rec['accuracy']:.4f}  "
                        f"{rec['seconds']:.2f} s  {rec['images_per_s']:,.0f} images/s")
                if "val_accuracy" in rec:
                    line += f"  val_loss {rec['val_loss']:.4f}  val_accuracy {rec['val_accuracy']:.4f}"
                print(line, flush=True)
        return history

    # ---- evaluation and inference --------------------------------------------------------------

    def evaluate(self, x, y, batch_size=1000, confusion=False):
        """Accuracy and mean loss on uint8 images x with labels y: {"accuracy", "loss"}, and with
        confusion=True a classes×classes matrix (rows: true class, columns: predicted)."""
        x8, y8 = self._train_data(x, y, "evaluate")
        return self._evaluate(x8, y8, _positive_int(batch_size, "batch_size", 65536), confusion)

    def _evaluate(self, x8, y8, batch_size, confusion=False):
        ds = _dataset(x8, y8, self.outputs)
        acc, loss = c_double(), c_double()
        k = self.outputs
        conf = np.zeros((k, k), np.uint64) if confusion else None
        with self._ctx.lock:
            check(lib.lam_evaluate(self._handle(), byref(ds), batch_size, byref(acc), byref(loss),
                                   conf.ctypes.data if confusion else None))
        res = {"accuracy": acc.value, "loss": loss.value}
        if confusion:
            res["confusion"] = conf.astype(np.int64)
        return res

    def predict_logits(self, x, batch_size=1000):
        """The last layer's outputs for uint8 images x: float32 (n, classes). The pixels are normalized
        with values that lamina's own normalize op computed, so the logits are those that evaluate()
        and training see."""
        x8 = _arrays.images(x, self.input_shape)
        batch_size = _positive_int(batch_size, "batch_size", 65536)
        n = x8.shape[0]
        logits = np.empty((n, self.outputs), np.float32)
        lut = _pixel_table(self._ctx)
        for off in range(0, n, batch_size):
            b = min(batch_size, n - off)
            xf = lut[x8[off:off + b]]  # (b, c, h, w) float32, C-contiguous
            with self._ctx.lock:
                check(lib.lam_model_forward(self._handle(), b, xf.ctypes.data, logits[off:off + b].ctypes.data))
        return logits

    def predict(self, x, batch_size=1000):
        """Predicted class of each uint8 image in x: int64 (n,)."""
        return self.predict_logits(x, batch_size).argmax(axis=1)

    # ---- files ---------------------------------------------------------------------------------

    def save(self, path):
        """Writes a checkpoint (atomically), in the format of `lamina train --save`: the model, and the
        training state of the last fit() if there was one (so `lamina train --resume` can go on)."""
        with self._ctx.lock:
            check(lib.lam_checkpoint_save(os.fsencode(path), self._handle(), self._trainer))

    # ---- lifetime ------------------------------------------------------------------------------

    def _free_trainer(self):
        t, self._trainer = self._trainer, None
        if t is not None:
            with self._ctx.lock:
                lib.lam_trainer_free(t)
        self._trainer_data = None  # only now: the trainer may read the host arrays until it is freed

    def close(self):
        """Frees the model's memory now rather than at garbage collection."""
        self._free_trainer()
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            with self._ctx.lock:
                lib.lam_model_free(ptr)



def _checkpoint_input_shape(path):
    """(in_c, in_h, in_w) from a checkpoint's header (see src/nn/checkpoint.c): the C API has no
    accessor for a model's input shape. Called after lam_checkpoint_load accepted the file."""
    with open(path, "rb") as f:
        head = f.read(16)
        spec_len = struct.unpack_from("<I", head, 12)[0]
        f.seek(16 + spec_len)
        return struct.unpack("<3i", f.read(12))


def load(path, device="auto"):
    """A Model from a checkpoint written by Model.save or `lamina train --save`, on `device`. The
    model's parameters are restored; training state in the file (optimizer moments, epochs) is not
    taken over, so fit() on the loaded model starts a fresh optimizer."""
    ctx = get_context(device)
    m = c_void_p()
    with ctx.lock:
        check(lib.lam_checkpoint_load(ctx.ptr, os.fsencode(path), byref(m), None, None))
    try:
        shape = _checkpoint_input_shape(path)
    except Exception:
        lib.lam_model_free(m.value)
        raise
    return Model(input_shape=shape, seed=1, _handle=m.value, _ctx=ctx)
