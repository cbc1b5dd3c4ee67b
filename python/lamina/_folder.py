"""Data folders for fit() and evaluate(): an image-class folder, a segmentation mask folder (generic, mmsegmentation,
Pascal VOC), a video folder (DIR/{train,test|val}/CLASS/*.mp4, always streamed as clips) or an IDX/.npy folder,
read through the C loader that `lamina train --data DIR` uses (lam_dataset_load_opts), so Python and the CLI train
on the same pixels; and the video files predict(path) reads. A part is either decoded whole and
copied into NumPy, or, for an image or mask folder, streamed (read() with stream on, or auto and the
part too large for the memory cap): kept as the C set, whose samples are decoded from their files when the
trainer or lam_evaluate asks for them, so a folder larger than memory trains in bounded memory, as `lamina
train` streams it."""
import os
from ctypes import POINTER, byref, c_char_p, c_uint8, cast

import numpy as np

from . import _lib
from ._context import Closing
from ._lib import check, lib


def image_opts(size=None, reduce_zero_label=False, label_map=None, skip_bad=False, stream=False, max_memory=None,
               frames=None, frame_stride=None):
    """(lam_image_opts, the label map table it points at, kept alive by the caller) from fit()'s keywords.
    size: None (every image the size of the first) or (h, w); label_map: None, a file of 'RAW NEW' lines
    (as --label-map) or a dict {raw value: class}, values not listed ignored (255). stream: False (decoded
    whole), True (streamed) or None (streamed where the decoded part would take more than max_memory // 2
    bytes, or without max_memory more than 3/4 of the memory available: `lamina train --max-memory`'s rule).
    frames, frame_stride: a video folder's clips (checked by the caller; None: the C defaults, 16 and 2)."""
    o = _lib.ImageOpts()  # the CLI's cache: DIR/.lamina-cache, so either reuses the other's decoded images
    if stream is not None and not isinstance(stream, bool):
        raise TypeError(f"stream must be None (auto), True or False, not {stream!r}")
    if max_memory is not None and (isinstance(max_memory, bool) or not isinstance(max_memory, (int, np.integer))
                                   or not 0 < max_memory < 2**62):
        raise ValueError(f"max_memory must be a number of bytes above 0, not {max_memory!r}")
    o.stream = {True: _lib.STREAM_ON, False: _lib.STREAM_OFF, None: _lib.STREAM_AUTO}[stream]
    # as the CLI: half of the cap for the decoded part, the rest for the trainer's own buffers; at least a byte,
    # since 0 would mean "3/4 of available memory"
    o.memory_cap = max(int(max_memory) // 2, 1) if max_memory is not None else 0
    if size is not None:
        if (not isinstance(size, (tuple, list)) or len(size) != 2
                or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 < v <= 65535
                           for v in size)):
            raise ValueError(f"size must be a pair (h, w) of positive ints, not {size!r}")
        o.h, o.w = int(size[0]), int(size[1])
    o.skip_bad = int(bool(skip_bad))
    o.frames, o.frame_stride = frames or 0, frame_stride or 0
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


def video_unavailable_reason():
    """Why this lamina reads no video files ("" when it does): what to install (lam_video_supported)."""
    why = c_char_p()
    if lib.lam_video_supported(byref(why)):
        return ""
    return why.value.decode(errors="replace") if why.value else "this lamina reads no video files"


def is_video_folder(path):
    """Whether path is a video folder (DIR/train/CLASS/ holding video files), as lam_dataset_load_opts tells."""
    return lib.lam_dataset_is_video_folder(os.fsencode(path)) != 0


def video_files(path):
    """The videos predict(path) reads: [path] for a file; for a folder the files under it (at any depth) that lamina
    reads as videos (lam_video_file_name: .mp4, .avi, .mkv, .webm, .mov), hidden ones left out, sorted by path."""
    p = os.fspath(path)
    if os.path.isfile(p):
        return [p]
    if not os.path.isdir(p):
        raise FileNotFoundError(2, "predict: no video file or folder there", p)
    found = []
    for root, dirs, files in os.walk(p):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [os.path.join(root, f) for f in files
                  if not f.startswith(".") and lib.lam_video_file_name(os.fsencode(f))]
    if not found:
        raise ValueError(f"predict: {p!r} holds no video files (.mp4, .avi, .mkv, .webm or .mov)")
    return sorted(found)


def read_clip(path, stride, out):
    """The middle clip of the video at path (as a video folder's test part takes it), every stride-th frame, fitted
    to out's (t, h, w, c) uint8 (C-contiguous): lam_video_read_clip. A file that is not a readable video raises
    LaminaError naming it."""
    t, h, w, c = out.shape
    check(lib.lam_video_read_clip(os.fsencode(path), -1, stride, t, c, h, w, out.ctypes.data), f"reading {path!r}")


def has_test_part(path):
    """False for an image folder whose training part is its only one (flat, or train/ alone)."""
    return lib.lam_dataset_image_folder_layout(os.fsencode(path)) not in (_lib.FOLDER_TRAIN_ONLY, _lib.FOLDER_FLAT)


def test_opts(opts):
    """The options for the test part after the training part was read with opts (whose out fields it reads),
    as `lamina train`: streamed too where the training part streamed (evaluated resident it would be held twice,
    read and uploaded), else auto with what the training part left of the cap."""
    o = _lib.ImageOpts.from_buffer_copy(opts)
    if opts.streamed:
        o.stream = _lib.STREAM_ON
    elif o.stream == _lib.STREAM_AUTO and o.memory_cap:
        o.memory_cap = o.memory_cap - o.part_bytes if o.memory_cap > o.part_bytes else 1
    o.streamed, o.part_bytes = 0, 0
    return o


class StreamedSet(Closing):
    """A streamed part of a folder: the C lam_dataset (images and labels NULL, a source that decodes each sample
    from its files when asked for), owned here and freed by close(). Whoever hands it to a trainer keeps it
    until the trainer is freed: the trainer reads it all along."""

    def __init__(self, ptr):
        self.ptr = ptr  # POINTER(lam_dataset), passed to the C functions as it is

    @property
    def n(self):
        return self.ptr.contents.n

    @property
    def per_pixel(self):
        s = self.ptr.contents
        return s.label_h > 1 or s.label_w > 1

    def split(self, fraction, seed):
        """(train, val): lam_dataset_split's views, sharing this set's source (each keeps it alive)."""
        parts = (POINTER(_lib.Dataset)(), POINTER(_lib.Dataset)())
        check(lib.lam_dataset_split(self.ptr, fraction, seed, byref(parts[0]), byref(parts[1])))
        return StreamedSet(parts[0]), StreamedSet(parts[1])

    def close(self):
        p, self.ptr = getattr(self, "ptr", None), None
        if p:
            lib.lam_dataset_free(p)


def open_part(path, train, opts):
    """The training (train=True) or test part of the folder at path as the C set: (d, classes, class_names);
    the caller frees d (lam_dataset_free). opts.streamed tells whether it streamed."""
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
        names = []
        for k in range(s.classes):
            name = lib.lam_dataset_class_name(d, k)
            if name is None:
                break
            names.append(name.decode(errors="replace"))
        return d, s.classes, names or None
    except BaseException:
        lib.lam_dataset_free(d)
        raise


def read(path, train, opts):
    """The training (train=True) or test part of the folder at path: (x, y, classes, class_names), x and y
    NumPy copies (see arrays), or for a part that streamed x a StreamedSet and y None."""
    d, classes, names = open_part(path, train, opts)
    if d.contents.source:
        return StreamedSet(d), None, classes, names
    try:
        return arrays(d) + (classes, names)
    finally:
        lib.lam_dataset_free(d)


def arrays(d):
    """(x, y): NumPy copies of a resident C set's images and labels, x (n, c, h, w) or clips (n, t, c, h, w)
    uint8, y (n,) or (n, h, w) uint8 (255 ignored)."""
    s = d.contents
    c, t = max(s.c, 1), max(s.t, 1)
    shape = (s.n, t, c, s.h, s.w) if s.t > 1 else (s.n, c, s.h, s.w)
    lshape = (s.n, s.label_h, s.label_w) if s.label_h > 1 or s.label_w > 1 else (s.n,)
    x = np.ctypeslib.as_array(cast(s.images, POINTER(c_uint8)), (int(np.prod(shape)),)).reshape(shape).copy()
    y = np.ctypeslib.as_array(cast(s.labels, POINTER(c_uint8)), (int(np.prod(lshape)),)).reshape(lshape).copy()
    return x, y
