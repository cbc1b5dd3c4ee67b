"""Models from NumPy: build from a spec (a preset, a chain of layers or a labelled graph with add/concat),
fit on uint8 images of any channel count with a class per image or a mask per image, evaluate, predict,
save and load — the same C engine and checkpoint files as `lamina train` / `lamina eval`."""
import errno
import math
import os
import signal
import struct
import sys
import threading
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from ctypes import POINTER, byref, pointer, c_char_p, c_double, c_float, c_int, c_void_p, create_string_buffer

from . import _arrays, _folder, _lib
from ._context import Closing, ModelContext, get_context
from ._lib import LaminaError, check, lib

# A video's clip takes every FRAME_STRIDE-th frame unless told (`lamina train --frame-stride`'s default, and
# lam_image_opts.frame_stride 0's).
FRAME_STRIDE = 2

# A new model's normalization of uint8 pixels, (p / 255 - 0.5) / 0.5 in every channel (the C library's
# default; lam_model_set_normalization changes it, and checkpoints carry it).
PIXEL_MEAN = 0.5
PIXEL_STD = 0.5


def _pixel_table(ctx, mean, std):
    """(c, 256) float32: the normalized value of each pixel value in each channel, as the context's
    backend computes it. (p/255 - mean)/std in float32 is p * a + k, and whether that is rounded once (a
    fused multiply-add, as CUDA and CPU builds for FMA machines do) or twice changes some values by an
    ulp. Asking the library once per context and normalization, through lam_normalize_images (the same
    arithmetic as the trainer's batch gather), makes predict() see exactly the inputs that training and
    evaluate() see."""
    key = (mean.tobytes(), std.tobytes())
    with ctx.lock:
        tables = ctx.__dict__.setdefault("pixel_tables", {})
        lut = tables.get(key)
        if lut is not None:
            return lut
        c = mean.size
        pixels = np.tile(np.arange(256, dtype=np.uint8), c)  # one image of c x 1 x 256 pixels
        lut = np.empty((c, 256), np.float32)
        cmean, cstd = (c_float * c)(*mean.tolist()), (c_float * c)(*std.tolist())
        d_in, d_out = c_void_p(), c_void_p()
        try:
            check(lib.lam_mem_alloc(ctx.ptr, byref(d_in), pixels.nbytes))
            check(lib.lam_mem_alloc(ctx.ptr, byref(d_out), lut.nbytes))
            check(lib.lam_mem_upload(ctx.ptr, d_in, pixels.ctypes.data, pixels.nbytes))
            check(lib.lam_normalize_images(ctx.ptr, 1, c, 1, 256, _lib.LAYOUT_NCHW, d_in, cmean, cstd, _lib.DTYPE_F32,
                                           d_out))
            check(lib.lam_mem_download(ctx.ptr, lut.ctypes.data, d_out, lut.nbytes))
        finally:
            lib.lam_mem_free(ctx.ptr, d_in)
            lib.lam_mem_free(ctx.ptr, d_out)
        tables[key] = lut
        return lut


def _folder_keywords(size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames=None, frame_stride=None):
    """Whether any of a data folder's keywords was given (fit and evaluate refuse them with arrays)."""
    return (size is not None or bool(reduce_zero_label) or label_map is not None or bool(skip_bad) or stream is not None
            or max_memory is not None or frames is not None or frame_stride is not None)


# What predict(path) gives for video files: one row per video, in the order of `files`.
VideoPredictions = namedtuple("VideoPredictions", "files classes probabilities names")
VideoPredictions.__doc__ = """predict(path)'s result: files, the videos read (a list of paths, sorted); classes, int64
(n,), each video's most probable class; probabilities, float64 (n, classes), the softmax of the model's outputs
(each row sums to 1); names, the predicted classes' names where the model has them (a video folder's class folders,
kept by fit(DIR) and checkpoints), else None."""


def _dataset(x8, y8, classes):
    """A lam_dataset over NumPy memory: x8 (n, c, h, w) uint8, or (n, t, c, h, w) clips, y8 (n,) or (n, H, W)
    uint8. The caller keeps x8 and y8 alive while C uses the struct, and never passes it to lam_dataset_free
    (NumPy owns the memory)."""
    n, (c, h, w) = x8.shape[0], x8.shape[-3:]
    t = x8.shape[1] if x8.ndim == 5 else 1
    lh, lw = y8.shape[1:] if y8.ndim == 3 else (1, 1)
    return _lib.Dataset(n=n, h=h, w=w, classes=classes, images=x8.ctypes.data, labels=y8.ctypes.data, c=c,
                        label_h=lh, label_w=lw, t=t)


def _set_ptr(data, classes, keep):
    """A pointer to the lam_dataset of data, (x8, y8) arrays or a StreamedSet, for C to read; keep holds what it
    points into alive."""
    if isinstance(data, _folder.StreamedSet):
        return data.ptr
    ds = _dataset(*data, classes)
    keep.append((ds, data))
    return pointer(ds)


def _fit_record(row):
    """fit()'s history entry of a lam_fit_epoch: the figures measured, by their Python names."""
    es = row.es
    rec = {"epoch": es.epoch, "loss": es.train_loss, "accuracy": es.train_acc, "lr": row.lr, "seconds": es.seconds,
           "images_per_s": es.images_per_s}
    for key, v in (("loss_scale", row.loss_scale), ("skipped_steps", row.skipped_steps),
                   ("val_loss", row.val_loss), ("val_accuracy", row.val_acc), ("val_mean_iou", row.val_miou),
                   ("test_loss", row.test_loss), ("test_accuracy", row.test_acc), ("test_mean_iou", row.test_miou)):
        if math.isfinite(v):
            rec[key] = int(v) if key == "skipped_steps" else v
    return rec


def _fit_line(rec):
    """fit()'s line for an epoch (verbose=1)."""
    line = (f"epoch {rec['epoch']}: loss {rec['loss']:.4f}  accuracy {rec['accuracy']:.4f}  "
            f"{rec['seconds']:.2f} s  {rec['images_per_s']:,.0f} images/s")
    for key in ("val_loss", "val_accuracy", "val_mean_iou", "test_loss", "test_accuracy", "test_mean_iou"):
        if key in rec:
            line += f"  {key} {rec[key]:.4f}"
    return line


def _channel_values(v, c, name):
    """One number, or c of them (one per channel), as float32 (c,)."""
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a number or {c} numbers (one per channel), not {v!r}") from e
    if a.ndim == 0:
        a = np.full(c, float(a))
    if a.shape != (c,):
        raise ValueError(f"{name} must be one number or {c} (one per channel of the model's input), not {v!r}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, not {v!r}")
    return a.astype(np.float32)


def _norm_pair(mean, std, c):
    m, s = _channel_values(mean, c, "mean"), _channel_values(std, c, "std")
    if np.any(s <= 0):
        raise ValueError(f"std must be > 0 in every channel, not {std!r}")
    return m, s


def _iou(conf):
    """Per-class intersection over union from a confusion matrix (rows: true, columns: predicted), NaN for
    a class that is neither in the labels nor in the predictions, and their mean over the other classes:
    lam_confusion_iou's, the figures fit() and `lamina eval` give."""
    conf = np.ascontiguousarray(conf, np.uint64)
    k = conf.shape[0]
    iou, present = np.empty(k, np.float64), c_int()
    mean = lib.lam_confusion_iou(conf.ctypes.data, k, iou.ctypes.data, byref(present))
    iou[iou < 0] = np.nan
    return iou, (mean if present.value else float("nan"))


def _per_pixel(data):
    """Whether data, (x8, y8) arrays or a StreamedSet, holds masks (a class per pixel)."""
    return data.per_pixel if isinstance(data, _folder.StreamedSet) else data[1].ndim == 3


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



def _augment_arg(augment):
    """fit's augment= as (pad, flip), read by lamina's own parser (`lamina train --augment`), or ValueError."""
    if not isinstance(augment, str):
        raise ValueError(f"augment must be a string such as 'crop:4,flip', not {augment!r}")
    if "\0" in augment:
        raise ValueError("augment contains a NUL character (the C library would read only the part before it)")
    pad, flip = c_int(), c_int()
    if lib.lam_augment_parse(augment.encode(), byref(pad), byref(flip)) != _lib.LAM_OK:
        raise ValueError(f"augment: {_lib.last_error().split(' [')[0]}")
    return pad.value, flip.value

class Model(Closing):
    """A network from a spec: a preset ("cnn", "mlp") or layers separated by commas, e.g.
    "conv 32 3, relu, maxpool 2, flatten, dense 10", where "NAME:" labels a layer's output and "add @NAME"
    or "concat @NAME" joins it back in (residual and U-Net-like graphs; see README and lamina.h). The last
    layer gives the classes: (classes, 1, 1) for a class per image, or (classes, H, W) for a class per
    pixel. input_shape is (channels, height, width) of one image (or (height, width) for one channel), or
    (frames, channels, height, width) for a model of clips (its layers before a tpool or tcat run on every
    frame; x then holds (n, frames, channels, height, width) or (n, frames, height, width, channels); or fit,
    evaluate and predict take video files by their path).
    Parameters start as PyTorch's defaults, drawn from seed. device: "auto", "cpu" or "cuda".
    precision: of the dense and conv layers' matrix products, "fp32" (IEEE single), "tf32" (tensor
    cores, CUDA only), "bf16" (operands rounded to bfloat16, sums in fp32; on CUDA a model with convs
    of its own keeps bfloat16 activations too; emulated on the CPU) or "fp16" (the same in IEEE half, with
    the loss scaled as PyTorch's GradScaler does: fit's history gains loss_scale and skipped_steps);
    parameters, gradients and optimizer state stay fp32 in all four (lam_ctx_set_precision)."""

    def __init__(self, spec="cnn", input_shape=(1, 28, 28), device="auto", seed=1, precision="fp32", _handle=None,
                 _ctx=None):
        self._ptr = None
        self._trainer = None
        self._trainer_data = None  # (lam_dataset, x8, y8) or (StreamedSet,): the trainer reads them until it is freed
        self.last_fit_streamed = False  # whether the last fit(DIR) streamed the folder's training part
        if not isinstance(spec, str):
            raise TypeError(f"spec must be a string such as 'cnn' or 'flatten, dense 10', not {type(spec).__name__}")
        shape = tuple(input_shape)
        if len(shape) == 2:
            shape = (1,) + shape
        if len(shape) not in (3, 4) or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1
                                           for s in shape):
            raise ValueError(f"input_shape must be (channels, height, width) or (frames, channels, height, width) of "
                             f"positive integers, not {input_shape!r}")
        frames, chw = (shape[0], shape[1:]) if len(shape) == 4 else (1, shape)
        if chw[0] > 64 or chw[1] > 65536 or chw[2] > 65536 or frames > 255:  # checked here: C ints would wrap them
            raise ValueError(f"input_shape {input_shape!r} is too large: frames 1 to 255, channels 1 to 64, height and "
                             f"width 1 to 65536")
        if "\0" in spec:
            raise ValueError("spec contains a NUL character (the C library would read only the part before it)")
        self.input_shape = tuple(int(s) for s in shape)
        self.frames = int(frames)  # frames per sample: 1 for images
        self._chw = tuple(int(s) for s in chw)  # one image or frame
        self.seed = _seed(seed)
        self._ctx = ModelContext(_ctx or get_context(device), precision)
        try:  # the lock sets the precision: one the device lacks fails here, not at the first fit
            with self._ctx.lock:
                pass
        except LaminaError as e:
            why = e.message.split("lam_ctx_set_precision: ", 1)[-1]
            raise LaminaError(f"precision={self._ctx.precision_name!r}: {why}", e.status, e.status_name) from None
        self._fits = 0          # fit() calls so far: later calls shuffle with seeds derived from seed
        self.epochs_done = 0    # epochs trained through this object
        if _handle is not None:
            self._ptr = _handle
        else:
            ptr = c_void_p()
            c, h, w = self._chw
            with self._ctx.lock:
                if len(self.input_shape) == 4:
                    check(lib.lam_model_create_clip(self._ctx.ptr, spec.encode(), self.frames, c, h, w, self.seed,
                                                    byref(ptr)))
                else:
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
    def output_shape(self):
        """The output per image, (classes, H, W): H = W = 1 for a class per image."""
        c, h, w = c_int(), c_int(), c_int()
        check(lib.lam_model_output_shape(self._handle(), byref(c), byref(h), byref(w)))
        return (c.value, h.value, w.value)

    @property
    def per_pixel(self):
        """Whether the model labels every pixel (its labels are (n, H, W) masks) rather than each image."""
        _, h, w = self.output_shape
        return h * w > 1

    @property
    def normalization(self):
        """(mean, std), float32 arrays of one value per input channel: the model sees (pixel / 255 -
        mean) / std. 0.5 and 0.5 for a new model; fit(normalize=...) or set_normalization() change it,
        and checkpoints keep it."""
        c = self._chw[0]
        mean, std = np.empty(c, np.float32), np.empty(c, np.float32)
        check(lib.lam_model_normalization(self._handle(), mean.ctypes.data, std.ctypes.data))
        return mean, std

    def set_normalization(self, mean, std):
        """Sets the per-channel normalization: each one number (every channel) or one per channel."""
        m, s = _norm_pair(mean, std, self._chw[0])
        with self._ctx.lock:
            check(lib.lam_model_set_normalization(self._handle(), m.size, m.ctypes.data, s.ctypes.data))

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

    @property
    def precision(self):
        """"fp32", "tf32", "bf16" or "fp16": the precision of the model's matrix products."""
        return self._ctx.precision_name

    def __repr__(self):
        if self._ptr is None:
            return "Model(closed)"
        precision = "" if self.precision == "fp32" else f", precision={self.precision!r}"
        return (f"Model({self.spec!r}, input_shape={self.input_shape}, device={self.device!r}{precision}, "
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

    def get_state(self):
        """BatchNorm's running statistics as one flat float32 array (per bn layer: the running means,
        then the running variances); empty for a model without bn. Checkpoints keep them."""
        n = lib.lam_model_state_count(self._handle())
        st = np.empty(n, np.float32)
        if n:
            with self._ctx.lock:
                check(lib.lam_model_state_get(self._handle(), st.ctypes.data, n))
        return st

    def set_state(self, state):
        st = np.ascontiguousarray(_arrays.as_array(state, "state"), dtype=np.float32).reshape(-1)
        n = lib.lam_model_state_count(self._handle())
        if st.size != n:
            raise ValueError(f"state has {st.size} values but the model's running statistics have {n}")
        if n:
            with self._ctx.lock:
                check(lib.lam_model_state_set(self._handle(), st.ctypes.data, n))

    def nodes(self):
        """The graph, one dict per node: name (its label or ""), op, reads (the label that add/concat
        reads, or ""), shape (c, h, w) of its output, params, flops (forward, per image), fused (1: it
        runs inside another node's fused kernel, 2: it runs the fused block), fusion (that block's name,
        e.g. "bn_add_act", or "") and stats (1: a conv that sums the next BatchNorm's statistics, 2: did so in
        its own kernel in its last training forward, 3: that BatchNorm; 0 otherwise)."""
        count = c_int()
        check(lib.lam_model_nodes(self._handle(), 1, None, 0, byref(count), None))
        arr = (_lib.NodeInfo * count.value)()
        check(lib.lam_model_nodes(self._handle(), 1, arr, count.value, byref(count), None))
        return [{"name": n.name.decode(), "op": n.op.decode(), "reads": n.reads.decode(), "shape": (n.c, n.h, n.w),
                 "params": int(n.params), "flops": float(n.flops), "fused": int(n.fused),
                 "fusion": n.fusion.decode(), "stats": int(n.stats)} for n in arr]

    def memory(self):
        """Where the model's (and its last trainer's) backend memory goes, in bytes."""
        mm = _lib.ModelMemory()
        with self._ctx.lock:
            check(lib.lam_model_memory_get(self._handle(), self._trainer, byref(mm)))
        return {name: int(getattr(mm, name)) for name, _ in _lib.ModelMemory._fields_}

    # ---- training ------------------------------------------------------------------------------

    def _train_data(self, x, y, what, layout=None):
        """x as (n, c, h, w) uint8 and y as (n,) uint8 classes or (n, H, W) uint8 masks, checked."""
        x8 = _arrays.samples(x, self.input_shape, layout=layout)
        n = x8.shape[0]
        if n == 0:
            raise ValueError(f"{what}: x holds no images")
        if n > 2**31 - 1:
            raise ValueError(f"{what}: {n} images is more than lamina's data sets hold (2**31 - 1)")
        k, oh, ow = self.output_shape
        if oh * ow > 1:
            y8 = _arrays.masks(y, n, (k, oh, ow), _lib.LABEL_IGNORE)
        else:
            y8 = _arrays.labels(y, n, k)
        return x8, y8

    def _streamed_data(self, s, what):
        """A streamed folder part checked as _train_data checks arrays: samples of the model's input shape,
        labels a class per image or a mask of the model's output size (else the C set would be refused only
        when the trainer or lam_evaluate first reads it)."""
        d = s.ptr.contents
        shape = ((max(d.t, 1),) if d.t > 1 or len(self.input_shape) == 4 else ()) + (max(d.c, 1), d.h, d.w)
        if shape != self.input_shape:
            raise ValueError(f"{what}: the folder's samples are {shape} and the model takes {self.input_shape} "
                             f"(size=(h, w) fits the images to a size)")
        _, oh, ow = self.output_shape
        if s.per_pixel != (oh * ow > 1) or (s.per_pixel and (d.label_h, d.label_w) != (oh, ow)):
            have = f"{d.label_h}x{d.label_w} masks" if s.per_pixel else "a class per image"
            want = f"{oh}x{ow} masks" if oh * ow > 1 else "a class per image"
            raise ValueError(f"{what}: the folder's labels are {have} and the model's outputs are {want}")
        return s

    def _normalize_arg(self, normalize):
        """fit(normalize=...): None (keep the model's), "default", "auto" or (mean, std)."""
        c = self._chw[0]
        if normalize is None:
            return None
        if isinstance(normalize, str) and normalize.strip().lower() in ("default", "auto"):
            if normalize.strip().lower() == "auto":
                return "auto"
            return np.full(c, PIXEL_MEAN, np.float32), np.full(c, PIXEL_STD, np.float32)
        if isinstance(normalize, (tuple, list)) and len(normalize) == 2:
            return _norm_pair(normalize[0], normalize[1], c)
        raise ValueError(f"normalize must be None (keep the model's), 'default', 'auto' or a pair (mean, std), "
                         f"not {normalize!r}")

    def fit(self, x, y=None, epochs=1, batch_size=64, optimizer="adam", lr=None, momentum=None, weight_decay=None,
            seed=None, verbose=1, validation_data=None, normalize=None, label_smoothing=None, layout=None,
            val_split=None, lr_schedule=None, warmup=0, save_best=None, early_stop=None, log=None, augment=None,
            monitor="loss", size=None, reduce_zero_label=False, label_map=None, skip_bad=False, stream=None,
            max_memory=None, frames=None, frame_stride=None):
        """Trains on uint8 images x with integer labels y for `epochs` epochs, shuffling each epoch,
        softmax cross-entropy. The images go to the device once, as uint8, and are normalized there
        per channel as (p/255 - mean)/std (see normalization).

        x: (n, c, h, w) or (n, h, w, c) uint8 (layout "nchw" or "nhwc"; by default told from the shape
        against input_shape, refused where both fit), or (n, h, w) for one channel.
        y: (n,) a class per image, or for a model whose output is (classes, H, W), (n, H, W) masks: a
        class per pixel, 255 = ignore (counted in neither loss nor accuracy).
        Or x a folder, y left out: what `lamina train --data DIR` reads (an image-class folder, a mask
        folder: generic, mmsegmentation's or Pascal VOC's, or IDX/.npy files), decoded into memory by the
        same C loader; its training part is trained on and its test (or val) part, where it has one,
        evaluated every epoch (at the end only, with validation data), as the CLI does. size=(h, w) fits
        the images to h x w (--size), reduce_zero_label and label_map (a 'RAW NEW' file as --label-map, or
        a dict {raw: class}) change a mask folder's values, skip_bad leaves undecodable files out. The
        size and the class names go into the model's checkpoints, as the CLI's.
        stream: how an image or mask folder's parts are held, as `lamina train` holds them: False decodes
        each part whole into memory; True streams it, keeping only the file list and decoding each batch
        from its files on the host threads a few batches ahead of the device, so a folder larger than
        memory trains; None (default) streams where the decoded training part would take more than
        max_memory // 2 bytes (`--max-memory`), or without max_memory more than 3/4 of the memory
        available. Where the training part streams, its test part streams too. A streamed fit gives the
        same batches, figures and model as a resident one (val_split holds out the same images, normalize=
        "auto" reads the same statistics); normalize="auto" decodes the folder once more to read them.
        model.last_fit_streamed tells whether the last fit streamed its training part.
        A video folder (DIR/{train,test|val}/CLASS/*.mp4, .avi, .mkv, .webm or .mov, as `lamina train --data
        DIR` reads it; needs a lamina built with FFmpeg's libraries, see lamina.video_unavailable_reason())
        trains a model of clips, input_shape=(frames, channels, height, width), and is always streamed: each
        sample is a clip of the model's frames (frames=, where given, must be them: `--frames`), every
        frame_stride-th frame (default 2, `--frame-stride`), each fitted to size=(h, w) where given (else every
        video must be the first's size); in training from a start drawn anew each epoch from the seed, in the
        test part the video's middle clip. The frames are grey or colour as the first video is. The same
        options and seed give `lamina train`'s losses to the bit.

        optimizer: "sgd", "adam" or "adamw", with PyTorch's defaults for lr (0.01 for sgd, 1e-3 for
        adam/adamw), momentum (0) and weight_decay (0; adamw 0.01) unless given. The optimizer's state
        stays in the model, so a second fit() with the same optimizer continues it.
        seed: the shuffling seed; by default the model's seed on the first fit() (as `lamina train`,
        which uses --seed for both) and a different one derived from it on each later call.
        verbose: 0 silent, 1 a line per epoch (and a live progress line on a terminal).
        validation_data: (x_val, y_val) to evaluate after every epoch (in the same layout as x).
        normalize: None keeps the model's normalization (0.5/0.5 for a new model, the file's for a
        loaded one); "default" 0.5/0.5; "auto" each channel's mean and std over x; or (mean, std), each
        one number or one per channel. Kept in the model and its checkpoints, used by evaluate/predict.
        label_smoothing: in [0, 1) (PyTorch's label_smoothing); None keeps the model's (0 when new).
        augment: "crop:P", "flip" or "crop:P,flip" (as `lamina train --augment`): every training batch
        cropped at random after padding P black pixels, and flipped left to right half the time, on the
        device as it is gathered (masks alike, padded labels ignored); "none"; None keeps the model's
        (none when new). Evaluation and predict never augment.
        val_split: a fraction 0 < F < 1 of x held out as validation data (the images `lamina train
        --val-split F` holds out: the same every call), instead of validation_data.
        lr_schedule: the rate over this call's epochs, stepped every batch on the device: "constant"
        (default), "cosine", "step:E:G" or "onecycle" (as `lamina train --lr-schedule`); warmup: a
        linear warm-up over that many epochs (fractions allowed; onecycle's rise).
        save_best: a path: the model of the epoch with the best validation figure is written there.
        early_stop: stop when the validation figure has not improved for that many epochs.
        monitor: the figure save_best and early_stop follow: "loss", the validation loss, lower is
        better (default), or "miou", the validation mean IoU, higher is better (masks only).
        save_best, early_stop and monitor="miou" need validation data (validation_data or val_split).
        log: a CSV path, rewritten atomically after every epoch (the columns of `lamina train --log`).

        Returns the history: a list with one dict per epoch: epoch, loss, accuracy (training, over
        the epoch; over the pixels not ignored for masks), lr (of the epoch's last step), seconds,
        images_per_s, and val_loss, val_accuracy (and val_mean_iou for masks) with validation data;
        test_loss, test_accuracy (and test_mean_iou) where a folder's test part was evaluated; in fp16,
        loss_scale (at the epoch's end) and skipped_steps (so far).
        """
        if monitor not in ("loss", "miou"):
            raise ValueError(f"monitor must be 'loss' or 'miou', not {monitor!r}")
        test = None
        if isinstance(x, (str, os.PathLike)):
            if y is not None:
                raise TypeError("fit(DIR): the labels come from the folder; give no y")
            x, y, test = self._folder_parts(x, size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames,
                                            frame_stride)
            layout = "nchw"
        elif _folder_keywords(size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames, frame_stride):
            raise ValueError("size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames and "
                             "frame_stride are for fit(DIR), a data folder")
        elif y is None:
            raise TypeError("fit(x, y): give the labels y, or a data folder as x")
        # A streamed part (a StreamedSet) has no arrays: the trainer and lam_evaluate read the C set itself.
        streamed = isinstance(x, _folder.StreamedSet)
        if streamed:
            x8 = y8 = None
            self._streamed_data(x, "fit")
        else:
            x8, y8 = self._train_data(x, y, "fit", layout)
        if isinstance(test, _folder.StreamedSet):
            self._streamed_data(test, "the folder's test part")
        elif test is not None:
            test = self._train_data(*test, "the folder's test part", "nchw")
        epochs = _positive_int(epochs, "epochs")
        batch_size = _positive_int(batch_size, "batch_size", 65536)
        if not isinstance(optimizer, str) or optimizer.lower() not in _lib.OPTIMIZERS:
            raise ValueError(f"optimizer {optimizer!r} is not one of 'sgd', 'adam', 'adamw'")
        kind = optimizer.lower()
        opt = lib.lam_opt_default(_lib.OPTIMIZERS[kind])
        for name, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise ValueError(f"{name} must be a number, not {value!r}")
            if name == "momentum" and kind != "sgd":
                raise ValueError(f"momentum applies to sgd; {kind} has beta1/beta2 instead")
            setattr(opt, name, float(value))
        if lib.lam_opt_check(byref(opt)) != _lib.LAM_OK:  # the library's bound (the CLI's --lr's too): inf, NaN, < 0
            raise ValueError(f"fit(): {_lib.last_error()}")
        if seed is None:
            # Knuth's multiplicative constant: distinct seeds per call, none equal to the first.
            seed = (self.seed + self._fits * 2654435761) % 2**64
        seed = _seed(seed)
        val = None
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise TypeError("validation_data must be a pair (x_val, y_val)")
            if val_split is not None:
                raise ValueError("give validation_data or val_split, not both")
            val = self._train_data(validation_data[0], validation_data[1], "validation_data", layout)
        if val_split is not None:
            if isinstance(val_split, bool) or not isinstance(val_split, (float, np.floating)) or not 0 < val_split < 1:
                raise ValueError(f"val_split must be a fraction between 0 and 1 (e.g. 0.1), not {val_split!r}")
            if streamed:  # views sharing the folder's source, which each keeps alive
                train, val = x.split(float(val_split), _lib.VAL_SPLIT_SEED)
                x.close()
                x = train
            else:
                x8, y8, val = self._split(x8, y8, float(val_split))
        sched = self._schedule_arg(lr_schedule, warmup, epochs)
        if early_stop is not None:
            early_stop = _positive_int(early_stop, "early_stop")
        if (save_best is not None or early_stop is not None) and val is None:
            raise ValueError(f"{'save_best' if save_best is not None else 'early_stop'} chooses by the validation "
                             f"loss: give validation_data=(x_val, y_val) or val_split=F too")
        if monitor == "miou" and val is None:
            raise ValueError("monitor='miou' follows the validation mean IoU: give validation_data=(x_val, y_val) "
                             "or val_split=F too")
        if monitor == "miou" and not _per_pixel(val):
            raise ValueError("monitor='miou' follows the validation mean IoU, which only masks (a class per pixel) "
                             "have, and these labels are a class per image: use monitor='loss'")
        # Checked before any training that a bad path would throw away, as one run's outputs: neither may
        # replace the other, nor an existing file of another kind (files.c).
        lib.lam_run_begin()
        try:
            for path, what, kind in ((save_best, b"best model (save_best=)", _lib.FILE_CHECKPOINT),
                                     (log, b"log (log=)", _lib.FILE_LOG)):
                if path is not None:
                    check(lib.lam_output_check(os.fsencode(path), what, kind))
        finally:
            lib.lam_run_end()
        norm = self._normalize_arg(normalize)
        aug = None if augment is None else _augment_arg(augment)
        if label_smoothing is not None:
            if (isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float, np.number))
                    or not 0 <= label_smoothing < 1):
                raise ValueError(f"label_smoothing must be a number in [0, 1), not {label_smoothing!r}")

        self._free_trainer()
        if streamed:
            ds, ds_ref = None, x.ptr
        else:
            ds = _dataset(x8, y8, self.outputs)
            ds_ref = byref(ds)
        if norm == "auto":
            c = self._chw[0]
            mean, std = np.empty(c, np.float32), np.empty(c, np.float32)
            check(lib.lam_dataset_channel_stats(ds_ref, mean.ctypes.data, std.ctypes.data))
            # A channel that is one value everywhere has std 0: leave it unscaled rather than divide by 0.
            norm = (mean, np.where(std > 0, std, np.float32(1)).astype(np.float32))
        if norm is not None:
            self.set_normalization(*norm)
        if label_smoothing is not None:
            check(lib.lam_model_set_label_smoothing(self._handle(), float(label_smoothing)))
        if aug is not None:
            check(lib.lam_model_set_augment(self._handle(), *aug))
        t = c_void_p()
        with self._ctx.lock:
            check(lib.lam_trainer_create(self._handle(), byref(opt), batch_size, seed, ds_ref, byref(t)))
        self._trainer = t.value
        self._trainer_data = (x,) if streamed else (ds, x8, y8)
        self.last_fit_streamed = streamed
        self._fits += 1
        check(lib.lam_trainer_set_lr_schedule(self._trainer, byref(sched)))

        live = bool(verbose) and sys.stdout.isatty()
        steps = ((x.n if streamed else x8.shape[0]) + batch_size - 1) // batch_size
        # The epoch loop is the library's (lam_fit, as `lamina train`'s): these callbacks only report. An exception
        # cannot propagate through C: one in a callback is kept, stops the fit (the trainer's stop flag, read after
        # every step) and is raised when lam_fit returns. A Ctrl-C reaches Python only when a callback runs, so
        # while fit runs SIGINT (where Python's default handler has it) raises the stop flag instead, and fit
        # raises KeyboardInterrupt when lam_fit returns.
        stop = c_int(0)
        history, failed = [], []
        base = self.epochs_done

        def guarded(fn, on_error):
            def call(*args):
                try:
                    return fn(*args)
                except BaseException as e:  # noqa: B902 — re-raised by fit() once lam_fit has returned
                    failed.append(e)
                    stop.value = 1
                    return on_error
            return call

        def progress(_user, step, nsteps, loss, ips):
            print(f"\r  epoch {self.epochs_done + 1}: step {step}/{nsteps}  loss {loss:.4f}  {ips:,.0f} images/s",
                  end="", flush=True)

        def epoch_done(_user, row):
            self.epochs_done += 1
            rec = _fit_record(row.contents)
            history.append(rec)
            if live:
                print("\r" + " " * 79 + "\r", end="")
            if verbose:
                print(_fit_line(rec), flush=True)
            return 0

        # Each progress report waits for the device to read the loss; a few dozen per epoch are free.
        cb = _lib.ProgressFn(guarded(progress, None)) if live else _lib.ProgressFn()
        on_epoch = _lib.FitEpochFn(guarded(epoch_done, 1))
        rows = (_lib.FitEpoch * epochs)()
        fo = lib.lam_fit_opts_default()
        fo.epochs, fo.monitor, fo.patience = epochs, _lib.FIT_MONITOR[monitor], early_stop or 0
        keep = []
        fo.val = None if val is None else _set_ptr(val, self.outputs, keep)
        fo.test = None if test is None else _set_ptr(test, self.outputs, keep)
        fo.save_best = None if save_best is None else os.fsencode(save_best)
        fo.log = None if log is None else os.fsencode(log)
        fo.on_step, fo.step_every, fo.on_epoch = cb, max(1, steps // 40), on_epoch
        fo.history, fo.epoch_offset = rows, base
        fr = _lib.FitResult()
        check(lib.lam_trainer_set_stop(self._trainer, byref(stop)))
        interrupted = []

        def on_sigint(_signum, _frame):
            interrupted.append(True)
            stop.value = 1

        own_sigint = (threading.current_thread() is threading.main_thread()
                      and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if own_sigint:
            signal.signal(signal.SIGINT, on_sigint)
        try:
            with self._ctx.lock:
                status = lib.lam_fit(self._trainer, byref(fo), byref(fr))
        finally:
            if own_sigint:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            lib.lam_trainer_set_stop(self._trainer, None)
        if live:
            print("\r" + " " * 79 + "\r", end="")
        if failed:
            raise failed[0]
        if interrupted:
            raise KeyboardInterrupt
        check(status)
        if fr.stopped_early and verbose:
            best = fr.best_miou if monitor == "miou" else fr.best_loss
            print(f"early stop: val_{'mean_iou' if monitor == 'miou' else 'loss'} has not improved for {early_stop} "
                  f"epochs (best {best:.4f})")
        if val is not None and test is not None and history:  # lam_fit's test of the model the run ends with
            history[-1].update(_fit_record(rows[fr.epochs - 1]))
        return history

    def _folder_parts(self, path, size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames=None,
                      frame_stride=None):
        """fit(DIR): (x, y, (x_test, y_test) or None) from the folder, its classes checked against the
        model's outputs and its size and class names kept in the model (as `lamina train` keeps them). A
        part that streamed comes as a StreamedSet in place of its pair (y None)."""
        frames, frame_stride = self._video_args(path, frames, frame_stride, stream, "fit")
        opts, table = _folder.image_opts(size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames,
                                         frame_stride)
        x, y, classes, names = _folder.read(path, True, opts)
        test = None
        if _folder.has_test_part(path):
            tx, ty = _folder.read(path, False, _folder.test_opts(opts))[:2]
            test = tx if ty is None else (tx, ty)
        del table  # read by the loads above
        if classes > self.outputs:
            raise ValueError(f"{os.fspath(path)!r} has {classes} classes and the model outputs {self.outputs}: build "
                             f"the model with {classes} outputs")
        cnames = None
        if names:
            cnames = (_lib.c_char_p * (len(names) + 1))(*[n.encode() for n in names], None)
        check(lib.lam_model_set_fit(self._handle(), opts.h, opts.w, cnames))
        if frames is not None:  # a video folder's: kept in the checkpoint, evaluate and predict's default
            check(lib.lam_model_set_frame_stride(self._handle(), frame_stride))
        return x, y, test

    def _video_args(self, path, frames, frame_stride, stream, what):
        """(frames, frame_stride) to read the folder at path with: for a video folder the model's frames (frames=,
        where given, must be them) and frame_stride (default 2, `lamina train --frame-stride`'s), the model checked
        to be one of clips and this lamina to read videos, so that none of these is found only after the folder was
        listed and probed; for any other folder (None, None), frames and frame_stride refused."""
        where = repr(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else repr(path)
        if not isinstance(path, (str, os.PathLike)) or not _folder.is_video_folder(path):
            if frames is not None or frame_stride is not None:
                raise ValueError(f"{what}: frames and frame_stride are for a video folder (DIR/train/CLASS/*.mp4 and "
                                 f"DIR/test/CLASS/...), and {where} is not one")
            return None, None
        why = _folder.video_unavailable_reason()
        if why:
            raise ValueError(f"{what}: {where} is a folder of videos, and this lamina reads none: {why}")
        if len(self.input_shape) != 4:
            raise ValueError(f"{what}: {where} is a folder of videos, whose samples are clips, and this model takes "
                             f"images of {self.input_shape}: build a model of clips, Model(spec, input_shape=(frames, "
                             f"channels, height, width)), whose layers before a tpool or tcat run on every frame")
        frames = self.frames if frames is None else _positive_int(frames, "frames", 255)
        if frames != self.frames:
            raise ValueError(f"{what}: frames={frames}, and the model takes clips of {self.frames} frames: leave "
                             f"frames out (the model's) or build the model with input_shape=({frames}, "
                             f"{', '.join(map(str, self._chw))})")
        kept = lib.lam_model_frame_stride(self._handle())  # the stride it was fitted at, 0 where none
        stride = _positive_int(frame_stride if frame_stride is not None else kept or FRAME_STRIDE, "frame_stride", 1000)
        if stream is False:
            raise ValueError(f"{what}: {where} is a folder of videos, which is always streamed (each clip decoded from "
                             f"its file when its batch is needed): leave stream out or give stream=True")
        return frames, stride

    def _split(self, x8, y8, fraction):
        """(x_train, y_train, (x_val, y_val)): the images `lamina train --val-split` holds out."""
        ds = _dataset(x8, y8, self.outputs)
        parts = (_lib.POINTER(_lib.Dataset)(), _lib.POINTER(_lib.Dataset)())
        check(lib.lam_dataset_split(byref(ds), fraction, _lib.VAL_SPLIT_SEED, byref(parts[0]), byref(parts[1])))
        out = []
        try:
            for p in parts:
                n = p.contents.n
                xs = np.ctypeslib.as_array(_lib.cast(p.contents.images, _lib.POINTER(_lib.c_uint8)),
                                           (n * int(np.prod(x8.shape[1:])),))
                ys = np.ctypeslib.as_array(_lib.cast(p.contents.labels, _lib.POINTER(_lib.c_uint8)),
                                           (n * int(np.prod(y8.shape[1:])),))
                out.append((xs.reshape((n,) + x8.shape[1:]).copy(), ys.reshape((n,) + y8.shape[1:]).copy()))
        finally:
            for p in parts:
                lib.lam_dataset_free(p)
        return out[0][0], out[0][1], out[1]

    @staticmethod
    def _schedule_arg(lr_schedule, warmup, epochs):
        s = _lib.LrSchedule()
        name = "constant" if lr_schedule is None else lr_schedule
        if not isinstance(name, str):
            raise TypeError(f"lr_schedule must be a string such as 'cosine' or 'step:10:0.1', not {lr_schedule!r}")
        if lib.lam_lr_schedule_parse(name.encode(), byref(s)) != _lib.LAM_OK:
            raise ValueError(f"lr_schedule {name!r}: expected 'constant', 'cosine', 'step:E:G' (e.g. 'step:10:0.1') "
                             f"or 'onecycle'")
        if isinstance(warmup, bool) or not isinstance(warmup, (int, float, np.number)) or not 0 <= warmup < epochs:
            raise ValueError(f"warmup must be a number of epochs from 0 to less than epochs ({epochs}), not {warmup!r}")
        s.epochs, s.warmup_epochs = epochs, float(warmup)
        return s

    # ---- evaluation and inference --------------------------------------------------------------

    def evaluate(self, x, y=None, batch_size=1000, confusion=False, layout=None, size=None, reduce_zero_label=False,
                 label_map=None, skip_bad=False, stream=None, max_memory=None, frames=None, frame_stride=None):
        """Accuracy and mean loss on uint8 images x with labels y (as fit() takes them): {"accuracy",
        "loss"}; for masks, over the pixels not ignored, plus "iou" (per class, NaN for a class neither in
        y nor predicted) and "mean_iou" (over the other classes), from the confusion matrix. With
        confusion=True also the classes×classes matrix (rows: true class, columns: predicted; pixels for
        masks). Or x a data folder, y left out: its test part (as `lamina eval --data DIR`; all of a
        folder without one), read with fit(DIR)'s size (by default the one the model was fitted to, kept in
        its checkpoints, as `lamina eval` takes it), reduce_zero_label, label_map, skip_bad, stream and
        max_memory (streamed, it is decoded batch by batch: the same figures in bounded memory). A video
        folder's test part is its videos' middle clips, read with fit(DIR)'s frames, frame_stride and size
        (as `lamina eval --data DIR --frames T --frame-stride S`)."""
        batch_size = _positive_int(batch_size, "batch_size", 65536)
        if isinstance(x, (str, os.PathLike)):
            if y is not None:
                raise TypeError("evaluate(DIR): the labels come from the folder; give no y")
            frames, frame_stride = self._video_args(x, frames, frame_stride, stream, "evaluate")
            if size is None:  # as `lamina eval`: the size the model was fitted to, kept in its checkpoint
                fh, fw = c_int(), c_int()
                check(lib.lam_model_fit(self._handle(), byref(fh), byref(fw)))
                size = (fh.value, fw.value) if fh.value and fw.value else None
            opts, table = _folder.image_opts(size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames,
                                             frame_stride)
            x, y, classes, _ = _folder.read(x, False, opts)
            del table  # read by the load
            layout = "nchw"
        elif _folder_keywords(size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames, frame_stride):
            raise ValueError("size, reduce_zero_label, label_map, skip_bad, stream, max_memory, frames and "
                             "frame_stride are for evaluate(DIR), a data folder")
        elif y is None:
            raise TypeError("evaluate(x, y): give the labels y, or a data folder as x")
        if isinstance(x, _folder.StreamedSet):
            with x:  # freed as soon as it is evaluated
                data = self._streamed_data(x, "evaluate")
                try:
                    return self._evaluate(data, batch_size, confusion)
                finally:
                    self._release_batch()
        data = self._train_data(x, y, "evaluate", layout)
        try:
            return self._evaluate(data, batch_size, confusion)
        finally:
            self._release_batch()

    def _release_batch(self):
        """Frees the batch buffers that evaluate and predict planned (hundreds of MB of device memory for
        the CNN at batch 1000), which the model would otherwise hold until it is freed; the next call
        plans them again. They go back to the context's cache: lamina.release_cached() hands them on."""
        if self._ptr is not None:
            with self._ctx.lock:
                check(lib.lam_model_release_batch(self._ptr))

    def _evaluate(self, data, batch_size, confusion=False):
        """lam_evaluate's figures for data: (x8, y8) arrays or a StreamedSet (decoded batch by batch), the
        IoU of masks from the confusion matrix either way."""
        if isinstance(data, _folder.StreamedSet):
            ds_ref = data.ptr
        else:
            ds = _dataset(*data, self.outputs)  # kept alive by this frame while C reads it
            ds_ref = byref(ds)
        acc, loss = c_double(), c_double()
        k = self.outputs
        per_pixel = _per_pixel(data)
        conf = np.zeros((k, k), np.uint64) if confusion or per_pixel else None
        with self._ctx.lock:
            check(lib.lam_evaluate(self._handle(), ds_ref, batch_size, byref(acc), byref(loss),
                                   None if conf is None else conf.ctypes.data))
        res = {"accuracy": acc.value, "loss": loss.value}
        if per_pixel:
            res["iou"], res["mean_iou"] = _iou(conf)
        if confusion:
            res["confusion"] = conf.astype(np.int64)
        return res

    def predict_logits(self, x, batch_size=1000, layout=None):
        """The last layer's outputs for uint8 images x (as fit() takes them), in evaluation mode
        (BatchNorm's running statistics, no dropout): float32 (n, classes), or (n, classes, H, W) for a
        model that labels every pixel. The pixels are normalized with values that lamina's own normalize
        op computed, so the logits are those that evaluate() and training see."""
        x8 = _arrays.samples(x, self.input_shape, layout=layout)
        batch_size = _positive_int(batch_size, "batch_size", 65536)
        n, c = x8.shape[0], self._chw[0]  # x8 (n, c, h, w) or clips (n, t, c, h, w)
        k, oh, ow = self.output_shape
        logits = np.empty((n, k, oh, ow), np.float32)
        lut = _pixel_table(self._ctx, *self.normalization)
        chan = np.arange(c).reshape(c, 1, 1)
        with self._ctx.lock:
            check(lib.lam_model_set_train(self._handle(), 0))
        try:
            for off in range(0, n, batch_size):
                b = min(batch_size, n - off)
                xb = x8[off:off + b]
                xf = lut[0][xb] if c == 1 else lut[chan, xb]  # (b, c, h, w) float32, C-contiguous
                with self._ctx.lock:
                    check(lib.lam_model_forward(self._handle(), b, xf.ctypes.data, logits[off:off + b].ctypes.data))
        finally:
            self._release_batch()
        return logits if oh * ow > 1 else logits.reshape(n, k)

    def predict(self, x, batch_size=1000, layout=None, frame_stride=None, test_clips=1):
        """Predicted class of each uint8 image in x: int64 (n,), or (n, H, W) for a model that labels
        every pixel.

        Or, for a model of clips, x a path: a video file, or a folder whose video files (.mp4, .avi, .mkv,
        .webm, .mov, at any depth: a video folder's DIR/test/CLASS/*.mp4 too) are each predicted. From each
        video its middle clip is read, the clip a video folder's test part takes (so evaluate(DIR) and predict
        on its test folder see the same clips), or with test_clips=K its K clips evenly spaced, their softmax
        averaged (`lamina predict --test-clips K`): the model's frames, every frame_stride-th (default: the
        stride the model was trained at where its checkpoint keeps it, else 2), each fitted to the model's height
        and width (cover, centre crop) in its channels, decoded on the host threads a batch at a time. Returns a VideoPredictions:
        files, classes (int64, one a video), probabilities (float64, the softmax, a row a video) and names (the
        classes' names where the model keeps them, else None). A file that is not a readable video raises
        LaminaError naming it."""
        if isinstance(x, (str, os.PathLike)):
            return self._predict_videos(x, batch_size, frame_stride, test_clips)
        if frame_stride is not None:
            raise ValueError("frame_stride is for predict(path) on video files")
        if test_clips != 1:
            raise ValueError("test_clips is for predict(path) on video files")
        return self.predict_logits(x, batch_size, layout).argmax(axis=1)

    def _predict_videos(self, path, batch_size, frame_stride, test_clips):
        """predict(path): test_clips clips of each video (lam_dataset_load_videos) through the model, their softmax
        averaged (lam_predict_clips), as `lamina predict --test-clips K` does."""
        batch_size = _positive_int(batch_size, "batch_size", 65536)
        kept = lib.lam_model_frame_stride(self._handle())  # 0: the model keeps none
        stride = _positive_int(frame_stride if frame_stride is not None else kept or FRAME_STRIDE, "frame_stride", 1000)
        test_clips = _positive_int(test_clips, "test_clips", 64)
        if len(self.input_shape) != 4:
            raise ValueError(f"predict(path) reads video files, whose samples are clips, and this model takes images "
                             f"of {self.input_shape}: give the images as an array")
        why = _folder.video_unavailable_reason()
        if why:
            raise ValueError(f"predict: this lamina reads no video files: {why}")
        files = _folder.video_files(path)
        t, (c, h, w) = self.frames, self._chw
        o = _lib.ImageOpts()
        o.h, o.w, o.frames, o.frame_stride, o.test_clips = h, w, t, stride, test_clips
        names = (c_char_p * len(files))(*[os.fsencode(f) for f in files])
        d = POINTER(_lib.Dataset)()
        check(lib.lam_dataset_load_videos(names, len(files), c, byref(o), byref(d)), f"reading the videos of {path!r}")
        probs = np.empty((len(files), self.outputs), np.float64)
        try:  # decoded on the host threads a batch at a time: memory bounded whatever the count
            check(lib.lam_predict_clips(self._handle(), d, min(batch_size, 64 * test_clips), probs.ctypes.data, None),
                  f"predicting on the videos of {path!r}")
        finally:
            lib.lam_dataset_free(d)
        classes = probs.argmax(axis=1)
        names = [lib.lam_model_class_name(self._handle(), int(k)) for k in classes]
        names = None if any(n is None for n in names) else [n.decode(errors="replace") for n in names]
        return VideoPredictions(files, classes, probs, names)

    # ---- files ---------------------------------------------------------------------------------

    def save(self, path):
        """Writes a checkpoint (atomically), in the format of `lamina train --save`: the model, and the
        training state of the last fit() if there was one (so `lamina train --resume` can go on).
        FileNotFoundError when the folder it goes in does not exist."""
        folder = os.path.dirname(os.path.abspath(os.fsdecode(path)))
        if not os.path.isdir(folder):
            raise FileNotFoundError(errno.ENOENT, f"Model.save: the folder {folder!r} does not exist; create it "
                                                  f"first (os.makedirs) or save elsewhere", os.fsdecode(path))
        with self._ctx.lock:
            check(lib.lam_checkpoint_save(os.fsencode(path), self._handle(), self._trainer))

    # ---- lifetime ------------------------------------------------------------------------------

    def _free_trainer(self):
        t, self._trainer = self._trainer, None
        if t is not None:
            with self._ctx.lock:
                lib.lam_trainer_free(t)
        data, self._trainer_data = self._trainer_data, None  # only now: the trainer reads them until it is freed
        if data is not None and isinstance(data[0], _folder.StreamedSet):
            data[0].close()

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


def load(path, device="auto", precision="fp32"):
    """A Model from a checkpoint written by Model.save or `lamina train --save`, on `device`, computing
    in `precision` (as Model's). The model's parameters are restored; training state in the file
    (optimizer moments, epochs) is not taken over, so fit() on the loaded model starts a fresh
    optimizer. FileNotFoundError when there is no file at path."""
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "lamina.load: no checkpoint file there (Model.save or `lamina train "
                                              "--save` writes one)", os.fsdecode(path))
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "lamina.load: a folder, not a checkpoint file", os.fsdecode(path))
    ctx = get_context(device)
    m = c_void_p()
    with ctx.lock:
        check(lib.lam_checkpoint_load(ctx.ptr, os.fsencode(path), byref(m), None, None))
    try:
        shape = tuple(_checkpoint_input_shape(path))
        frames = lib.lam_model_input_frames(m.value)
        shape = (frames,) + shape if frames > 1 else shape
    except Exception:
        lib.lam_model_free(m.value)
        raise
    try:
        return Model(input_shape=shape, seed=1, precision=precision, _handle=m.value, _ctx=ctx)
    except Exception:
        lib.lam_model_free(m.value)
        raise
