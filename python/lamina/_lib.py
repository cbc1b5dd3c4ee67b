"""Finding and loading liblamina, and the ctypes declarations of the C API (include/lamina.h).

Every C call returns a lam_status; check() turns a failure into LaminaError with lam_last_error()'s
message. The message is thread-local in C and ctypes calls run on the calling thread, so reading it
right after the failing call gets the right one.
"""
import ctypes
import ctypes.util
import os
import re
import warnings

from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char, c_char_p, c_double, c_float, c_int, c_size_t,
                    c_int64, c_long, c_uint8, c_uint64, c_void_p, cast)

# The C header's LAMINA_VERSION that these declarations were written against: a library of another
# version may lay its structs out differently.
C_API_VERSION = "0.2.0"

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
# <repo>/python/lamina -> <repo>: the build trees of a source checkout.
_REPO_DIR = os.path.dirname(os.path.dirname(_PKG_DIR))
LIBRARY_NAME = "liblamina.so"


class LaminaError(RuntimeError):
    """A lamina call failed. `message` is lamina's own (what failed, where, how to fix); `status` the
    lam_status number and `status_name` its short name ("invalid argument", "no CUDA device", ...)."""

    def __init__(self, message, status=None, status_name=None):
        self.message = message
        self.status = status
        self.status_name = status_name
        super().__init__(f"{message} [{status_name}]" if status_name else message)


def _candidates():
    """(where, path or name) in lookup order. A set LAMINA_LIBRARY is the only candidate: a wrong
    path there should fail loudly, not quietly load some other build."""
    env = os.environ.get("LAMINA_LIBRARY")
    if env:
        return [("LAMINA_LIBRARY", env)]
    found = [("package", os.path.join(_PKG_DIR, LIBRARY_NAME))]
    for build in ("build", "build-gpu"):
        found.append((f"build tree ({build}/)", os.path.join(_REPO_DIR, build, LIBRARY_NAME)))
    return found


def _loaded_openblas():
    """Paths of the OpenBLAS libraries already mapped into this process (NumPy's, typically)."""
    try:
        with open("/proc/self/maps") as f:
            return {line.split()[-1] for line in f if "libopenblas" in line and "/" in line}
    except OSError:
        return set()


def _keep_openmp_openblas(path):
    """Makes liblamina's BLAS calls reach the OpenMP build of OpenBLAS it was linked against, even when
    NumPy came first.

    Debian's two OpenBLAS builds share the soname libopenblas.so.0. NumPy loads the pthread build;
    when liblamina is loaded after it, the dynamic loader hands liblamina that same, already loaded
    library, whose own thread pool then fights lamina's OpenMP threads over the cores (CNN training
    on 2 cores measured 2-3x slower than `lamina train`). Loading the OpenMP build by its full path
    with RTLD_GLOBAL puts it in the global symbol scope, which the loader searches before liblamina's
    own dependencies, so liblamina's cblas calls bind to it. NumPy keeps working: both are OpenBLAS.
    Only done when liblamina names the OpenMP build (its RUNPATH, set by CMakeLists.txt) and another
    OpenBLAS is already in the process.
    """
    loaded = _loaded_openblas()
    if not loaded:
        return  # nothing to clash with: liblamina's RUNPATH finds its own
    import mmap
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            i = mm.find(b"openblas-openmp")
            if i < 0:
                return
            runpath = mm[mm.rfind(b"\0", 0, i) + 1:mm.find(b"\0", i)].decode(errors="replace")
    except (OSError, ValueError):
        return
    for d in runpath.split(":"):
        want = os.path.join(d, "libopenblas.so.0")
        if "openblas-openmp" in d and os.path.isfile(want):
            if os.path.realpath(want) not in {os.path.realpath(p) for p in loaded}:
                ctypes.CDLL(want, mode=ctypes.RTLD_GLOBAL)
            return


def _load():
    tried = []
    for where, path in _candidates():
        if where == "LAMINA_LIBRARY" and not os.path.isfile(path):
            raise ImportError(f"lamina: LAMINA_LIBRARY={path!r} is not a file; point it at a built liblamina.so "
                              f"(e.g. <repo>/build/liblamina.so after `make`) or unset it")
        if not os.path.isfile(path):
            tried.append(f"{path} ({where}: not there)")
            continue
        try:
            _keep_openmp_openblas(path)
            return ctypes.CDLL(path), path
        except OSError as e:
            # A library that exists but does not load (a missing libcublas, a wrong architecture) is
            # worth saying as such; with LAMINA_LIBRARY it is the only one we may take.
            if where == "LAMINA_LIBRARY":
                raise ImportError(f"lamina: LAMINA_LIBRARY={path!r} could not be loaded: {e}") from e
            tried.append(f"{path} ({where}: failed to load: {e})")
    name = ctypes.util.find_library("lamina")
    if name:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append(f"{name} (system library path: failed to load: {e})")
    else:
        tried.append("find_library('lamina') (system library path: not found)")
    raise ImportError("lamina: cannot find liblamina.so. Tried:\n  " + "\n  ".join(tried) +
                      "\nTo fix: build it in the repository with `make` (or `cmake -S . -B build && cmake --build build`),"
                      " set LAMINA_LIBRARY=/path/to/liblamina.so, or install the package with"
                      " `pip install --no-build-isolation ./python`, which builds and ships the library.")


lib, LIBRARY_PATH = _load()

# ---- structs, as in include/lamina.h --------------------------------------------------------------


class BuildInfo(Structure):
    _fields_ = [("version", c_char_p), ("with_cuda", c_int), ("cuda_runtime", c_int), ("cuda_archs", c_char_p),
                ("with_openmp", c_int), ("omp_max_threads", c_int)]


class CudaDeviceInfo(Structure):
    _fields_ = [("name", c_char * 256), ("cc_major", c_int), ("cc_minor", c_int), ("sm_count", c_int),
                ("mem_total", c_size_t), ("mem_free", c_size_t), ("l2_bytes", c_size_t), ("mem_bus_gbps", c_double)]


class MemStats(Structure):
    _fields_ = [("in_use", c_size_t), ("reserved", c_size_t), ("peak", c_size_t), ("cached", c_size_t),
                ("pinned_host", c_size_t), ("allocs", c_uint64), ("cache_hits", c_uint64)]


class HiddenTiming(Structure):
    _fields_ = [("staging", c_double), ("copy_in", c_double), ("kernel", c_double), ("copy_out", c_double),
                ("total", c_double), ("chunks", c_int), ("device", c_int)]


class HiddenCosts(Structure):
    _fields_ = [("cpu_ms", c_double), ("cpu_ms_per_gb", c_double), ("cuda_ms", c_double), ("cuda_ms_per_gb", c_double),
                ("calibrated", c_int)]


class Dataset(Structure):
    _fields_ = [("n", c_size_t), ("h", c_int), ("w", c_int), ("classes", c_int), ("images", c_void_p),
                ("labels", c_void_p), ("c", c_int), ("label_h", c_int), ("label_w", c_int),
                ("t", c_int), ("class_names", c_void_p), ("source", c_void_p)]


class ImageOpts(Structure):
    """lam_image_opts: how lam_dataset_load_opts reads an image or mask folder (the out fields after it)."""
    _fields_ = [("h", c_int), ("w", c_int), ("cache", c_char_p), ("skip_bad", c_int), ("skipped", c_size_t),
                ("cache_hit", c_int), ("cache_written", c_int), ("decoder", c_int), ("decoded_gpu", c_size_t),
                ("decode_s", c_double), ("converted", c_size_t), ("reduce_zero_label", c_int),
                ("label_map", c_void_p), ("stream", c_int), ("memory_cap", c_size_t), ("streamed", c_int),
                ("part_bytes", c_size_t), ("frames", c_int), ("frame_stride", c_int),
                ("missing", c_size_t), ("missing_note", c_char * 1024), ("test_clips", c_int)]


class NodeInfo(Structure):
    _fields_ = [("name", c_char * 32), ("op", c_char * 16), ("reads", c_char * 32), ("c", c_int), ("h", c_int),
                ("w", c_int), ("params", c_size_t), ("flops", c_double), ("fused", c_int), ("fusion", c_char * 24),
                ("stats", c_int)]


class ModelMemory(Structure):
    _fields_ = [("params", c_size_t), ("grads", c_size_t), ("optimizer", c_size_t), ("activations", c_size_t),
                ("scratch", c_size_t), ("data", c_size_t)]


class Opt(Structure):
    _fields_ = [("kind", c_int), ("lr", c_float), ("momentum", c_float), ("weight_decay", c_float),
                ("beta1", c_float), ("beta2", c_float), ("eps", c_float)]


class LrSchedule(Structure):
    _fields_ = [("kind", c_int), ("epochs", c_int), ("warmup_epochs", c_double), ("step_epochs", c_int),
                ("gamma", c_double)]


VAL_SPLIT_SEED = 0x76616C69  # LAM_VAL_SPLIT_SEED: fit(val_split=) holds out what `lamina train --val-split` does


class EpochStats(Structure):
    _fields_ = [("epoch", c_int), ("train_loss", c_double), ("train_acc", c_double), ("seconds", c_double),
                ("images_per_s", c_double)]


class StreamStats(Structure):
    _fields_ = [("buffers", c_int), ("epoch_ms", c_double), ("data_wait_ms", c_double), ("loader_wait_ms", c_double),
                ("why", c_char * 200)]


class FitEpoch(Structure):  # lam_fit_epoch
    _fields_ = [("es", EpochStats), ("lr", c_double), ("val_loss", c_double), ("val_acc", c_double),
                ("val_miou", c_double), ("test_loss", c_double), ("test_acc", c_double), ("test_miou", c_double),
                ("loss_scale", c_double), ("skipped_steps", c_double), ("stream", StreamStats), ("improved", c_int)]


FitEpochFn = CFUNCTYPE(c_int, c_void_p, POINTER(FitEpoch))
ProgressFn = CFUNCTYPE(None, c_void_p, c_int, c_int, c_double, c_double)


class FitOpts(Structure):  # lam_fit_opts
    _fields_ = [("epochs", c_int), ("val", POINTER(Dataset)), ("test", POINTER(Dataset)), ("monitor", c_int),
                ("patience", c_int), ("best_loss", c_double), ("best_miou", c_double), ("resume_best", c_int),
                ("save", c_char_p), ("save_best", c_char_p), ("log", c_char_p), ("on_step", ProgressFn),
                ("step_every", c_int), ("on_epoch", FitEpochFn), ("user", c_void_p), ("history", POINTER(FitEpoch)),
                ("epoch_offset", c_int)]


class FitResult(Structure):  # lam_fit_result
    _fields_ = [("epochs", c_int), ("best_epoch", c_int), ("best_loss", c_double), ("best_miou", c_double),
                ("resumed_best", c_int), ("best_test_acc", c_double), ("test_acc", c_double), ("test_miou", c_double),
                ("stopped_early", c_int), ("stopped", c_int)]


# enums (C ints)
LAM_OK = 0
LAM_ERR_INVALID_ARG, LAM_ERR_NO_DEVICE, LAM_ERR_CUDA, LAM_ERR_OUT_OF_MEMORY, LAM_ERR_UNSUPPORTED, LAM_ERR_IO = range(1, 7)
DEVICES = {"auto": 0, "cpu": 1, "cuda": 2}
DEVICE_NAMES = {v: k for k, v in DEVICES.items()}
DTYPE_F32, DTYPE_U8 = 0, 1
FILE_CHECKPOINT = 1  # lam_file_kind (lamina.h): LAM_FILE_CHECKPOINT
FILE_LOG = 4  # LAM_FILE_LOG
LAYOUT_NCHW = 0
FOLDER_TRAIN_ONLY, FOLDER_FLAT = 2, 3  # lam_dataset_image_folder_layout's: no test part of its own
STREAM_AUTO, STREAM_ON, STREAM_OFF = 0, 1, 2  # lam_image_opts.stream (LAM_STREAM_*)
LABEL_IGNORE = 255  # a per-pixel label that counts for nothing (LAM_LABEL_IGNORE, src/prims.h)
OPTIMIZERS = {"sgd": 0, "adam": 1, "adamw": 2}
PRECISIONS = {"fp32": 0, "tf32": 1, "bf16": 2, "fp16": 3}  # lam_precision

LAM_ERR_INTERRUPTED = 8
FIT_MONITOR = {"loss": 0, "miou": 1}  # lam_fit_monitor

# ---- functions ------------------------------------------------------------------------------------

_status = c_int
_P = c_void_p  # opaque handles and untyped buffers: Python passes ints (addresses)
_SIGNATURES = {
    "lam_last_error": (c_char_p, []),
    "lam_status_str": (c_char_p, [c_int]),
    "lam_ctx_create": (_status, [POINTER(c_void_p), c_int]),
    "lam_ctx_free": (None, [_P]),
    "lam_ctx_device": (c_int, [_P]),
    "lam_ctx_device_name": (c_char_p, [_P]),
    "lam_ctx_choice_reason": (c_char_p, [_P]),
    "lam_ctx_sync": (_status, [_P]),
    "lam_ctx_set_precision": (_status, [_P, c_int]),
    "lam_build_info_get": (None, [POINTER(BuildInfo)]),
    "lam_cuda_device_count": (c_int, [POINTER(c_char_p)]),
    "lam_cuda_device_info_get": (_status, [c_int, POINTER(CudaDeviceInfo)]),
    "lam_mem_stats_get": (_status, [_P, POINTER(MemStats)]),
    "lam_mem_alloc": (_status, [_P, POINTER(c_void_p), c_size_t]),
    "lam_mem_free": (_status, [_P, _P]),
    "lam_mem_release_cached": (_status, [_P, POINTER(c_size_t)]),
    "lam_mem_set_limit": (_status, [_P, c_size_t]),
    "lam_mem_upload": (_status, [_P, _P, _P, c_size_t]),
    "lam_mem_download": (_status, [_P, _P, _P, c_size_t]),
    "lam_hidden": (_status, [_P, c_size_t, _P, c_int, _P, _P, POINTER(HiddenTiming)]),
    "lam_hidden_choice": (c_char_p, [_P]),
    "lam_hidden_calibrate": (_status, [_P]),
    "lam_hidden_costs_get": (_status, [_P, POINTER(HiddenCosts)]),
    "lam_hidden_costs_set": (_status, [_P, POINTER(HiddenCosts)]),
    "lam_default_threads": (c_int, [c_char_p, c_size_t]),
    "lam_ctx_threads": (c_int, [_P]),
    "lam_normalize_images": (_status, [_P, c_size_t, c_int, c_int, c_int, c_int, _P, POINTER(c_float),
                                       POINTER(c_float), c_int, _P]),
    "lam_model_create": (_status, [_P, c_char_p, c_int, c_int, c_int, c_uint64, POINTER(c_void_p)]),
    "lam_model_create_clip": (_status, [_P, c_char_p, c_int, c_int, c_int, c_int, c_uint64, POINTER(c_void_p)]),
    "lam_model_input_frames": (c_int, [_P]),
    "lam_model_free": (None, [_P]),
    "lam_model_spec": (c_char_p, [_P]),
    "lam_model_param_count": (c_size_t, [_P]),
    "lam_model_outputs": (c_int, [_P]),
    "lam_model_describe": (_status, [_P, c_char_p, c_size_t]),
    "lam_model_output_shape": (_status, [_P, POINTER(c_int), POINTER(c_int), POINTER(c_int)]),
    "lam_model_nodes": (_status, [_P, c_int, POINTER(NodeInfo), c_int, POINTER(c_int), POINTER(c_size_t)]),
    "lam_model_set_normalization": (_status, [_P, c_int, _P, _P]),
    "lam_model_normalization": (_status, [_P, _P, _P]),
    "lam_model_state_count": (c_size_t, [_P]),
    "lam_model_state_get": (_status, [_P, _P, c_size_t]),
    "lam_model_state_set": (_status, [_P, _P, c_size_t]),
    "lam_model_set_train": (_status, [_P, c_int]),
    "lam_model_set_label_smoothing": (_status, [_P, c_float]),
    "lam_model_set_augment": (_status, [_P, c_int, c_int]),
    "lam_augment_parse": (_status, [c_char_p, POINTER(c_int), POINTER(c_int)]),
    "lam_model_params_get": (_status, [_P, _P, c_size_t]),
    "lam_model_params_set": (_status, [_P, _P, c_size_t]),
    "lam_model_forward": (_status, [_P, c_int, _P, _P]),
    "lam_model_release_batch": (_status, [_P]),
    "lam_model_memory_get": (_status, [_P, _P, POINTER(ModelMemory)]),
    "lam_opt_default": (Opt, [c_int]),
    "lam_opt_check": (_status, [POINTER(Opt)]),
    "lam_trainer_create": (_status, [_P, POINTER(Opt), c_int, c_uint64, POINTER(Dataset), POINTER(c_void_p)]),
    "lam_trainer_free": (None, [_P]),
    "lam_trainer_set_stop": (_status, [_P, POINTER(c_int)]),
    "lam_fit_opts_default": (FitOpts, []),
    "lam_confusion_iou": (c_double, [_P, c_int, _P, POINTER(c_int)]),
    "lam_fit": (_status, [_P, POINTER(FitOpts), POINTER(FitResult)]),
    "lam_trainer_epoch": (_status, [_P, ProgressFn, c_void_p, c_int, POINTER(EpochStats)]),
    "lam_trainer_epochs_done": (c_int, [_P]),
    "lam_lr_schedule_parse": (_status, [c_char_p, POINTER(LrSchedule)]),
    "lam_trainer_set_lr_schedule": (_status, [_P, POINTER(LrSchedule)]),
    "lam_trainer_lr": (c_double, [_P]),
    "lam_trainer_loss_scale": (_status, [_P, POINTER(c_double), POINTER(c_long)]),
    "lam_dataset_split": (_status, [POINTER(Dataset), c_double, c_uint64, POINTER(POINTER(Dataset)),
                                    POINTER(POINTER(Dataset))]),
    "lam_dataset_free": (None, [POINTER(Dataset)]),
    "lam_dataset_load_opts": (_status, [c_char_p, c_int, POINTER(ImageOpts), POINTER(POINTER(Dataset))]),
    "lam_dataset_image_folder_layout": (c_int, [c_char_p]),
    "lam_dataset_class_name": (c_char_p, [POINTER(Dataset), c_int]),
    "lam_model_set_fit": (_status, [_P, c_int, c_int, POINTER(c_char_p)]),
    "lam_dataset_mask_folder_layout": (c_int, [c_char_p]),
    "lam_label_map_read": (_status, [c_char_p, _P]),
    "lam_video_supported": (c_int, [POINTER(c_char_p)]),
    "lam_video_read_clip": (_status, [c_char_p, c_int64, c_int, c_int, c_int, c_int, c_int, _P]),
    "lam_dataset_load_videos": (_status, [POINTER(c_char_p), c_size_t, c_int, POINTER(ImageOpts),
                                          POINTER(POINTER(Dataset))]),
    "lam_predict_clips": (_status, [_P, POINTER(Dataset), c_int, _P, _P]),
    "lam_model_frame_stride": (c_int, [_P]),
    "lam_model_set_frame_stride": (_status, [_P, c_int]),
    "lam_video_file_name": (c_int, [c_char_p]),
    "lam_dataset_is_video_folder": (c_int, [c_char_p]),
    "lam_model_class_name": (c_char_p, [_P, c_int]),
    "lam_model_fit": (_status, [_P, POINTER(c_int), POINTER(c_int)]),
    "lam_output_path_check": (_status, [c_char_p, c_char_p]),
    "lam_output_check": (_status, [c_char_p, c_char_p, c_int]),
    "lam_run_begin": (None, []),
    "lam_run_end": (None, []),
    "lam_output_write_atomic": (_status, [c_char_p, c_char_p, c_char_p, c_size_t]),
    "lam_dataset_channel_stats": (_status, [POINTER(Dataset), _P, _P]),
    "lam_evaluate": (_status, [_P, POINTER(Dataset), c_int, POINTER(c_double), POINTER(c_double), _P]),
    "lam_checkpoint_save": (_status, [c_char_p, _P, _P]),
    "lam_checkpoint_load": (_status, [_P, c_char_p, POINTER(c_void_p), POINTER(Dataset), POINTER(c_void_p)]),
}


def _declare():
    missing = []
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise ImportError(f"lamina: {LIBRARY_PATH} lacks {', '.join(missing)}: it is an older or different "
                          f"liblamina; rebuild it (`make`) or point LAMINA_LIBRARY at a current build")


_declare()


def _version_check():
    info = BuildInfo()
    lib.lam_build_info_get(byref(info))
    version = info.version.decode() if info.version else "?"
    if version != C_API_VERSION:
        warnings.warn(f"lamina: {LIBRARY_PATH} is version {version} but this package was written against "
                      f"{C_API_VERSION}; if calls misbehave, rebuild the library from the same checkout",
                      RuntimeWarning, stacklevel=3)


_version_check()


def last_error():
    msg = lib.lam_last_error()
    return msg.decode(errors="replace") if msg else ""


# The C library's advice names the CLI's flags (its messages serve `lamina train` too); from Python the
# same advice is a keyword argument or a function.
_CLI_ADVICE = [
    (re.compile(r"--device (auto|cpu|cuda)\b"), r"device='\1'"),
    (re.compile(r"\(--max-memory\)"), "(lamina.set_memory_limit(max_memory))"),
    (re.compile(r"--max-memory\b"), "lamina.set_memory_limit(max_memory)"),
    (re.compile(r"a smaller --batch\b"), "a smaller batch_size"),
    (re.compile(r"see 'lamina (?:train|model) --help'"), "see help(lamina.Model)"),
    (re.compile(r"--size HxW( \(size in the API\))?"), "size=(h, w)"),
    (re.compile(r"--skip-bad\b"), "skip_bad=True"),
]


def python_advice(msg):
    """msg with the CLI flags it suggests turned into what a Python caller passes instead."""
    for pattern, repl in _CLI_ADVICE:
        msg = pattern.sub(repl, msg)
    return msg


def check(status, what=None):
    """Raises LaminaError for a non-OK status, with lamina's message (or `what` if C left none)."""
    if status != LAM_OK:
        name = lib.lam_status_str(status)
        name = name.decode() if name else f"status {status}"
        raise LaminaError(python_advice(last_error() or what or "lamina call failed"), status, name)
