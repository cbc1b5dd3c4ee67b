"""New output arrays of create_hidden_layer, from recycled host memory.

A new 400 MB NumPy array is unmapped memory: the kernel maps and zeroes its pages as the call first
writes them, and on the H200 machine that made a call with a fresh output take 25-26 ms against 14 ms
into an array written before (2026-12-03, n = 100M, the host threads; 40 ms where the array did not get
huge pages). So a big output is made over a buffer of lamina's, and when the caller lets go of it (the
array and every view of it: the buffer's holder is their base) the buffer serves the next call's output,
its pages already mapped. One buffer is kept (the usual loop drops an output before making the next);
release_cached() gives it back. Every element of an output is written by the call, so what a recycled
buffer held before is never seen.
"""
import ctypes
import threading
import weakref

import numpy as np

MIN_BYTES = 4 << 20  # smaller outputs: np.empty (their faults cost less than the bookkeeping)
KEEP = 1

_free = []  # buffers (NumPy uint8 arrays) whose outputs are gone
_lock = threading.Lock()


def _give_back(buf):
    with _lock:
        _free.append(buf)
        del _free[:-KEEP]  # the oldest go (NumPy frees them)


def empty(shape, n):
    """A new float32 array of n values in `shape`, over recycled memory where a buffer fits."""
    nbytes = 4 * n
    if nbytes < MIN_BYTES:
        return np.empty(shape, np.float32)
    buf = None
    with _lock:
        for i, b in enumerate(_free):
            if nbytes <= b.nbytes <= 2 * nbytes:
                buf = _free.pop(i)
                break
    if buf is None:
        # NumPy's own memory, so a first output is the array NumPy would make (its allocator asks the
        # kernel for huge pages for big arrays: 40 ms without them on the H200 machine, 25 with them)
        buf = np.empty(nbytes, np.uint8)
    holder = (ctypes.c_char * nbytes).from_buffer(buf)  # the base of the output and of every view of it
    weakref.finalize(holder, _give_back, buf)
    return np.frombuffer(holder, np.float32, count=n).reshape(shape)


def release():
    """Lets go of the kept buffers (NumPy frees them); returns their bytes."""
    with _lock:
        gone, _free[:] = list(_free), []
    return sum(b.nbytes for b in gone)
