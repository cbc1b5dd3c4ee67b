"""lamina from Python: the fused hidden layer on NumPy arrays and small networks trained from NumPy,
over liblamina (C/CUDA) through ctypes.

    import numpy as np, lamina
    out = lamina.create_hidden_layer(greys, weights)          # tanh(greys / 255 * weights), float32
    g, w = lamina.to_device(greys), lamina.to_device(weights)  # upload once ...
    out = lamina.create_hidden_layer(g, w).numpy()             # ... run many times
    out = lamina.create_hidden_layer(torch_g, torch_w)         # CUDA arrays of CuPy/Numba/PyTorch: no copy
    t = torch.from_dlpack(out)                                 # and back (DLPack, __cuda_array_interface__)

    model = lamina.Model("cnn")                                # the reference CNN, 1x28x28 inputs
    history = model.fit(x_train, y_train, epochs=5)            # x: uint8 images, y: integer labels
    model.evaluate(x_test, y_test)                             # {"accuracy": ..., "loss": ...}
    model.save("cnn.lamina"); model = lamina.load("cnn.lamina")

    # Any spec (labels, add/concat, bn, dropout), colour images (N,C,H,W) or (N,H,W,C), masks (N,H,W):
    unet = lamina.Model("e: conv 8 3 pad 1, relu, maxpool 2, conv 16 3 pad 1, relu, upsample 2, "
                        "concat @e, conv 2 1", input_shape=(3, 32, 32))
    unet.fit(images, masks, normalize="auto")                  # masks: a class per pixel, 255 = ignore
    unet.evaluate(images, masks)["mean_iou"]

    # A folder of videos (DIR/{train,test}/CLASS/*.mp4), streamed as clips of the model's frames:
    clip = lamina.Model("conv 16 3 pad 1, relu, maxpool 2, tpool max, flatten, dense 10", input_shape=(16, 3, 112, 112))
    clip.fit("videos/", size=(112, 112), frame_stride=2, epochs=5)
    clip.predict("videos/test").probabilities                 # a row per video, its middle clip

The library is found through LAMINA_LIBRARY, then inside this package, then in the repository's
build/ and build-gpu/ folders, then on the system library path. Failures in C raise LaminaError with
lamina's own message; bad arguments are caught first as TypeError or ValueError, and a file that is not
there as FileNotFoundError.
"""
try:
    import numpy as _numpy  # noqa: F401  (every array lamina takes or gives is NumPy's)
except ImportError as _e:
    import sys as _sys
    raise ImportError(
        f"lamina needs NumPy, which this Python ({_sys.executable}) lacks ({_e}). Use Debian's "
        f"/usr/bin/python3 with python3-numpy (`make deps`), or a venv made by it with "
        f"`/usr/bin/python3 -m venv --system-site-packages VENV`, or install numpy into this Python "
        f"(`pip install numpy` where PyPI is reachable).") from None
from ._lib import C_API_VERSION as __version__
from ._lib import LIBRARY_PATH as library_path
from ._lib import LaminaError
from ._context import (build_info, cuda_device_count, cuda_unavailable_reason, device_info, memory_stats,
                       release_cached, set_memory_limit, synchronize)
from .hidden import DeviceArray, create_hidden_layer, device_empty, from_dlpack, last_call, to_device
from .model import Model, VideoPredictions, load
from ._folder import video_unavailable_reason

import os as _os

if _os.environ.get("LAMINA_PREWARM", "").strip() == "1":  # the AUTO context starts now, on a background thread
    from ._context import start_auto as _start_auto

    _start_auto()

__all__ = ["__version__", "LaminaError", "Model", "DeviceArray", "build_info", "create_hidden_layer", "cuda_device_count",
           "cuda_unavailable_reason", "device_empty", "device_info", "from_dlpack", "last_call", "library_path", "load",
           "memory_stats",
           "release_cached", "set_memory_limit", "synchronize", "to_device", "video_unavailable_reason",
           "VideoPredictions"]
