"""Data folders for fit() and evaluate(): an image-class folder, a segmentation mask folder (generic, mmsegmentation,
Pascal VOC) or an IDX/.npy folder, read through the C loader that `lamina train --data DIR` uses
(lam_dataset_load_opts), so Python and the CLI train on the same pixels. A part is decoded whole into NumPy
memory, as the CLI does; streaming a folder too large for memory is not built."""
import os
from ctypes import POINTER, byref, c_uint8, cast

import numpy as np

from . import _lib
from ._lib import check, lib


def image_opts(size=None, reduce_zero_label=False, label_map=None, skip_bad=False):
    """(lam_image_opts, the label map table it points at, kept alive by the caller) from fit()'s keywords.
    size: None (every image the size of the first) or (h, w); label_map: None, a file of 'RAW NEW' lines
    (as --label-map) or a dict {raw value: class}, values not listed ignored (255)."""
    o = _lib.ImageOpts()  # the CLI's cache: DIR/.lamina-cache, so either reuses the other's decoded images
    o.stream = _lib.STREAM_OFF  # load() copies the part into NumPy: decoded whole
    if size is not None:
        if (not isinstance(size, (tuple, list)) or len(size) != 2
                or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 < v <= 65535
                           for v in size)):
            raise ValueError(f"size must be a pair (h, w) of positive ints, not {size!r}")
        o.h, o.w = int(size[0]), int(size[1])
    o.skip_bad = int(bool(skip_bad))
    o.reduce_zero_label = int(bool(reduce_zero_label))
    table = None
    if label_map is not None:
        table = np.full(256, _lib.LABEL_IGNORE, np.uint8)
        if isinstance(label_map, (str, os.PathLike)):
            check(lib.lam_label_map_read(os.fsencode(label_map), table.ctypes.data), "label_map")
        elif isinstance(label_map, dict):
            for raw, new in label_map.items():
                if not all(isinstance(v, (int, np.integer)) and 0 <= v <= 255 for v in (raw, new)):
                    raise ValueError(f"label_map: {raw!r} -> {new!r} is not a pair of values from 0 to 255")
                table[raw] = new
        else:
            raise TypeError(f"label_map must be a path or a dict {{raw: class}}, not {label_map!r}")
        o.label_map = table.ctypes.data
    return o, table


def is_mask_folder(path):
    return lib.lam_dataset_mask_folder_layout(os.fsencode(path)) != 0


def has_test_part(path):
    """False for an image folder whose training part is its only one (flat, or train/ alone)."""
    return lib.lam_dataset_image_folder_layout(os.fsencode(path)) not in (_lib.FOLDER_TRAIN_ONLY, _lib.FOLDER_FLAT)


def load(path, train, opts):
    """The training (train=True) or test part of the folder at path: (x, y, classes, class_names), x (n, c, h, w)
    or clips (n, t, c, h, w) uint8, y (n,) or (n, h, w) uint8 (255 ignored), NumPy copies of the C set."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"a data folder must be a path, not {path!r}")
    if (opts.reduce_zero_label or opts.label_map) and not is_mask_folder(path):
        raise ValueError(f"reduce_zero_label and label_map are for mask folders (DIR/train/images + DIR/train/masks, "
                         f"DIR/img_dir + DIR/ann_dir, or Pascal VOC's), and {os.fspath(path)!r} is not one")
    d = POINTER(_lib.Dataset)()
    check(lib.lam_dataset_load_opts(os.fsencode(path), int(bool(train)), byref(opts), byref(d)),
          f"reading {os.fspath(path)!r}")
    try:
        s = d.contents
        if s.n == 0:
            raise ValueError(f"{os.fspath(path)!r}: its {'training' if train else 'test'} part holds no images")
        c, t = max(s.c, 1), max(s.t, 1)
        shape = (s.n, t, c, s.h, s.w) if s.t > 1 else (s.n, c, s.h, s.w)
        lshape = (s.n, s.label_h, s.label_w) if s.label_h > 1 or s.label_w > 1 else (s.n,)
        x = np.ctypeslib.as_array(cast(s.images, POINTER(c_uint8)), (int(np.prod(shape)),)).reshape(shape).copy()
        y = np.ctypeslib.as_array(cast(s.labels, POINTER(c_uint8)), (int(np.prod(lshape)),)).reshape(lshape).copy()
        names = []
        for k in range(s.classes):
            name = lib.lam_dataset_class_name(d, k)
            if name is None:
                break
            names.append(name.decode(errors="replace"))
        return x, y, s.classes, names or None
    finally:
        lib.lam_dataset_free(d)
