"""Checking NumPy inputs before they reach C: dtypes, layout, sizes, with messages that name the
argument. C only sees a pointer and a length, so anything wrong here would be a wrong answer or a
crash there."""
import numpy as np

# Kinds that are numbers: signed and unsigned integers and floats. Bool, complex, objects, strings,
# bytes, datetimes and structured records are not values a layer can weigh.
_REAL_KINDS = "iuf"


def describe_dtype(dt):
    return "Python objects" if dt.kind == "O" else str(dt)


def as_array(x, name):
    """x as an ndarray (no copy when it is one), refusing what is not real numbers."""
    try:
        a = np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise TypeError(f"{name} could not be read as a NumPy array: {e}") from e
    if a.dtype.kind not in _REAL_KINDS:
        raise TypeError(f"{name} holds {describe_dtype(a.dtype)}; expected real numbers (float32, or uint8 for "
                        f"greyscales)")
    return a


def host_input(x, name, keep):
    """A C-contiguous, aligned, native-order host array of one of the dtypes in `keep`, without a copy
    when x already is one; real numbers of other dtypes are converted (a copy) to keep[0]."""
    a = as_array(x, name)
    dt = a.dtype if any(a.dtype == k for k in keep) else np.dtype(keep[0])
    # np.require copies only when it must (another dtype, a strided view, misaligned data).
    return np.require(a, dtype=dt, requirements=["C_CONTIGUOUS", "ALIGNED"])


def host_output(out, shape, name="out"):
    """Checks a caller's output array: float32, C-contiguous, writeable, the right number of values."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a NumPy float32 array or a lamina DeviceArray, not {type(out).__name__}")
    size = int(np.prod(shape, dtype=np.int64))
    if out.dtype != np.float32:
        raise TypeError(f"{name} has dtype {describe_dtype(out.dtype)}; it must be float32 (the result is written "
                        f"into it as is)")
    if out.size != size:
        raise ValueError(f"{name} has {out.size} values but the inputs have {size}")
    if not out.flags.c_contiguous or not out.flags.aligned:
        raise ValueError(f"{name} must be C-contiguous (the result is written straight into its memory); "
                         f"use np.empty({size}, np.float32)")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return out


def labels(y, n, classes, name="y"):
    """Class labels as uint8 (what the C data set holds), each checked to be below `classes`."""
    a = np.asarray(y)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer class labels, not {describe_dtype(a.dtype)}"
                        + ("; convert with y.astype(np.int64) if they are whole numbers" if a.dtype.kind == "f" else ""))
    if a.ndim != 1:
        raise ValueError(f"{name} must be one label per image, shape ({n},), not {a.shape}"
                         + ("; this model gives one class per image (its output is classes x 1 x 1), so it cannot "
                            "learn masks" if a.ndim == 3 else ""))
    if a.shape[0] != n:
        raise ValueError(f"x has {n} images but {name} has {a.shape[0]} labels")
    if n:
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= classes:
            bad = int(np.flatnonzero((a < 0) | (a >= classes))[0])
            raise ValueError(f"{name}[{bad}] = {int(a[bad])} is not a class of this model, which has {classes} "
                             f"outputs (labels 0 to {classes - 1})")
    return np.ascontiguousarray(a, dtype=np.uint8)


def masks(y, n, output_shape, ignore, name="y"):
    """Per-pixel labels (n, H, W) as uint8 for a model whose output is output_shape = (classes, H, W):
    each a class below `classes` or `ignore` (a pixel that counts for nothing)."""
    classes, h, w = output_shape
    a = np.asarray(y)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer class labels (masks), not {describe_dtype(a.dtype)}"
                        + ("; convert with y.astype(np.uint8) if they are whole numbers" if a.dtype.kind in "fb" else ""))
    if a.ndim != 3 or a.shape[1:] != (h, w):
        raise ValueError(f"{name} has shape {a.shape}; this model labels every pixel of a {h}x{w} output, so {name} must "
                         f"be masks of shape ({n}, {h}, {w}): a class per pixel, {ignore} = ignore")
    if a.shape[0] != n:
        raise ValueError(f"x has {n} images but {name} has {a.shape[0]} masks")
    if classes > ignore:
        raise ValueError(f"this model gives {classes} classes per pixel; per-pixel labels take at most {ignore} "
                         f"({ignore} marks ignored pixels)")
    bad = (a < 0) | ((a >= classes) & (a != ignore))
    if bad.any():
        at = np.unravel_index(int(np.flatnonzero(bad)[0]), a.shape)
        raise ValueError(f"{name}[{', '.join(str(int(i)) for i in at)}] = {int(a[at])} is not a class of this model, "
                         f"which has {classes} outputs per pixel (labels 0 to {classes - 1}, {ignore} = ignore)")
    return np.ascontiguousarray(a, dtype=np.uint8)


LAYOUTS = ("nchw", "nhwc")


def layout_arg(layout):
    """None (inferred from the model's input shape), "nchw" or "nhwc"."""
    if layout is None:
        return None
    if not isinstance(layout, str) or layout.strip().lower() not in LAYOUTS:
        raise ValueError(f"layout must be 'nchw', 'nhwc' or None (inferred from the shape), not {layout!r}")
    return layout.strip().lower()


def samples(x, input_shape, name="x", layout=None):
    """images() for input_shape (c, h, w); for clips, input_shape (t, c, h, w): x (n, t, c, h, w) ("nchw"), (n, t, h,
    w, c) ("nhwc") or (n, t, h, w) for one channel, as a C-contiguous (n, t, c, h, w) array (each frame as images()
    takes an image)."""
    if len(input_shape) == 3:
        return images(x, input_shape, name, layout)
    t, c, h, w = input_shape
    a = np.asarray(x)
    if a.ndim not in (4, 5) or a.shape[1] != t:
        want = (f"(n, {t}, {h}, {w}), " if c == 1 else "") + f"(n, {t}, {c}, {h}, {w}) or (n, {t}, {h}, {w}, {c})"
        raise ValueError(f"{name} has shape {np.shape(x)}; this model takes clips of {t} frames of {c}x{h}x{w}: {want}")
    frames = images(a.reshape((a.shape[0] * t,) + a.shape[2:]), (c, h, w), name, layout)
    return frames.reshape(a.shape[0], t, c, h, w)


def images(x, input_shape, name="x", layout=None):
    """uint8 images as a C-contiguous (n, c, h, w) array for a model taking input_shape = (c, h, w).

    x is (n, c, h, w) (layout "nchw") or (n, h, w, c) ("nhwc", transposed here, a copy), or (n, h, w)
    for one channel. With layout None the shape tells which: the one of the two that matches the model's
    input; where both match (c == h == w, more than one channel) it is ambiguous and refused."""
    c, h, w = input_shape
    layout = layout_arg(layout)
    a = np.asarray(x)
    if a.dtype != np.uint8:
        hint = ""
        if a.dtype.kind == "f":
            hint = ("; lamina normalizes uint8 pixels itself (the model's normalization), so pass the raw pixels "
                    "(for images in [0, 1]: (x * 255).round().astype(np.uint8))")
        raise TypeError(f"{name} must be uint8 pixels (0 to 255), not {describe_dtype(a.dtype)}{hint}")
    if a.ndim == 3 and c == 1 and a.shape[1:] == (h, w):
        return np.ascontiguousarray(a.reshape(a.shape[0], 1, h, w))
    if a.ndim == 4:
        fits = [lay for lay, s in (("nchw", (c, h, w)), ("nhwc", (h, w, c))) if a.shape[1:] == s]
        if layout is None:
            if len(fits) == 2 and c > 1:
                raise ValueError(f"{name} has shape {a.shape}, which reads as both (n, c, h, w) and (n, h, w, c) for "
                                 f"this model's {c}x{h}x{w} input: pass layout='nchw' or layout='nhwc'")
            layout = fits[0] if fits else None
        elif layout not in fits:
            other = [f for f in fits if f != layout]
            want = f"(n, {c}, {h}, {w})" if layout == "nchw" else f"(n, {h}, {w}, {c})"
            raise ValueError(f"{name} has shape {a.shape}, which is not layout='{layout}' {want} for this model's "
                             f"{c}x{h}x{w} input" + (f"; it is '{other[0]}': pass layout='{other[0]}'" if other else ""))
        if layout == "nhwc":
            return np.ascontiguousarray(a.transpose(0, 3, 1, 2))
        if layout == "nchw":
            return np.ascontiguousarray(a)
    want = (f"(n, {h}, {w}), " if c == 1 else "") + f"(n, {c}, {h}, {w}) or (n, {h}, {w}, {c})"
    raise ValueError(f"{name} has shape {np.shape(x)}; this model takes {c}x{h}x{w} images: {want}")
