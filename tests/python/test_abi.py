"""The package's ctypes declarations (python/lamina/_lib.py) against include/lamina.h.

ctypes cannot see the C header: a parameter added in C and not in Python shifts every argument after
it, and the call goes wrong without an error. This test reads the header and checks, for every
function the package declares, the number and kind of the parameters and the return type; for every
struct it mirrors, the field names, order and kinds; and the enum values it uses. When it fails, the
message says which declaration to update."""
import ctypes
import os
import re
import unittest

from helpers import REPO
from lamina import _lib

HEADER = os.environ.get("LAMINA_HEADER") or os.path.join(REPO, "include", "lamina.h")

# C types that are ints at the ABI level (enums included).
_INT_TYPES = {"int", "lam_status", "lam_device", "lam_dtype", "lam_layout", "lam_opt_kind", "lam_precision",
              "lam_file_kind", "lam_fit_monitor", "int32_t"}
_U64_TYPES = {"size_t", "uint64_t"}  # both are c_ulong on LP64: ctypes cannot tell them apart either


def _strip_comments(text):
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def _c_kind(decl):
    """The ABI kind of a C declaration such as 'const float *mean' or 'size_t n'."""
    decl = decl.strip()
    if "*" in decl or "[" in decl:
        return "pointer"
    words = [w for w in decl.replace("const ", " ").split() if w]
    base = words[0] if words else decl
    if base in _INT_TYPES:
        return "int"
    if base in _U64_TYPES:
        return "u64"
    if base == "int64_t":
        return "i64"
    if base in ("float", "double", "void"):
        return base
    if base in ("lam_progress_fn", "lam_fit_epoch_fn"):
        return "function"
    return base  # a struct by value


def _py_kind(t):
    if t is None:
        return "void"
    if t in (ctypes.c_void_p, ctypes.c_char_p) or issubclass(t, ctypes._Pointer):
        return "pointer"
    if issubclass(t, ctypes._CFuncPtr):
        return "function"
    if t in (ctypes.c_int, ctypes.c_int32):
        return "int"
    if t in (ctypes.c_size_t, ctypes.c_uint64):
        return "u64"
    if t is ctypes.c_int64:
        return "i64"
    if t is ctypes.c_float:
        return "float"
    if t is ctypes.c_double:
        return "double"
    return t.__name__


_STRUCTS = {"lam_build_info": _lib.BuildInfo, "lam_cuda_device_info": _lib.CudaDeviceInfo,
            "lam_mem_stats": _lib.MemStats, "lam_hidden_timing": _lib.HiddenTiming, "lam_dataset": _lib.Dataset,
            "lam_node_info": _lib.NodeInfo, "lam_model_memory": _lib.ModelMemory, "lam_opt": _lib.Opt, "lam_epoch_stats": _lib.EpochStats,
            "lam_image_opts": _lib.ImageOpts, "lam_stream_stats": _lib.StreamStats, "lam_fit_epoch": _lib.FitEpoch,
            "lam_fit_opts": _lib.FitOpts, "lam_fit_result": _lib.FitResult}
_STRUCT_FOR_PY = {cls.__name__: c for c, cls in _STRUCTS.items()}


class HeaderMatchesCtypes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(HEADER):
            raise unittest.SkipTest(f"{HEADER} not found (set LAMINA_HEADER)")
        with open(HEADER) as f:
            cls.text = _strip_comments(f.read())

    def prototype(self, name):
        m = re.search(r"([\w\s\*]+?)\b" + name + r"\s*\(([^;{}]*?)\)\s*;", self.text)
        self.assertIsNotNone(m, f"{name} is declared in _lib.py but not in {HEADER}")
        ret = m.group(1).split("\n")[-1].strip()
        params = [p for p in m.group(2).replace("\n", " ").split(",") if p.strip()]
        if [p.strip() for p in params] == ["void"]:
            params = []
        return ret, params

    def test_functions(self):
        for name, (restype, argtypes) in _lib._SIGNATURES.items():
            with self.subTest(function=name):
                ret, params = self.prototype(name)
                c_args = [_c_kind(p) for p in params]
                py_args = [_py_kind(t) for t in argtypes]
                self.assertEqual(py_args, c_args, f"{name}: the header has ({', '.join(p.strip() for p in params)}); "
                                                  f"update its entry in python/lamina/_lib.py _SIGNATURES")
                c_ret = _c_kind(ret + (" *" if ret.endswith("*") else ""))
                py_ret = _py_kind(restype)
                py_ret = _STRUCT_FOR_PY.get(py_ret, py_ret)
                self.assertEqual(py_ret, c_ret, f"{name}: returns {ret} in the header")

    def test_structs(self):
        for cname, cls in _STRUCTS.items():
            with self.subTest(struct=cname):
                m = re.search(r"typedef\s+struct\s+" + cname + r"\s*\{(.*?)\}\s*" + cname + r"\s*;", self.text, re.S)
                self.assertIsNotNone(m, f"struct {cname} not found in {HEADER}")
                fields = []
                for decl in m.group(1).split(";"):
                    decl = decl.strip()
                    if not decl:
                        continue
                    first, *rest = [d.strip() for d in decl.split(",")]
                    base = first.rsplit(None, 1)[0].replace("*", "").strip()
                    for part in [first] + [base + " " + r for r in rest]:
                        fname = re.findall(r"(\w+)\s*(?:\[\s*\w+\s*\])?$", part)[0]
                        fields.append((fname, _c_kind(part)))
                py = [(n, "pointer" if issubclass(t, ctypes.Array) else _STRUCT_FOR_PY.get(_py_kind(t), _py_kind(t)))
                      for n, t in cls._fields_]
                self.assertEqual(py, fields, f"struct {cname} changed in the header: update {cls.__name__} in _lib.py")

    def enum(self, name):
        m = re.search(r"typedef\s+enum\s+" + name + r"\s*\{(.*?)\}", self.text, re.S)
        self.assertIsNotNone(m, f"enum {name} not found")
        values, nxt = {}, 0
        for item in m.group(1).split(","):
            item = item.strip()
            if not item:
                continue
            key, _, val = item.partition("=")
            nxt = int(val.strip(), 0) if val.strip() else nxt
            values[key.strip()] = nxt
            nxt += 1
        return values

    def test_enums(self):
        st = self.enum("lam_status")
        self.assertEqual(st["LAM_OK"], _lib.LAM_OK)
        self.assertEqual(st["LAM_ERR_INVALID_ARG"], _lib.LAM_ERR_INVALID_ARG)
        self.assertEqual(st["LAM_ERR_IO"], _lib.LAM_ERR_IO)
        self.assertEqual(st["LAM_ERR_INTERRUPTED"], _lib.LAM_ERR_INTERRUPTED)
        mon = self.enum("lam_fit_monitor")
        self.assertEqual({k: mon["LAM_FIT_MONITOR_" + k.upper()] for k in _lib.FIT_MONITOR}, _lib.FIT_MONITOR)
        dev = self.enum("lam_device")
        self.assertEqual({k: dev["LAM_DEVICE_" + k.upper()] for k in _lib.DEVICES}, _lib.DEVICES)
        dt = self.enum("lam_dtype")
        self.assertEqual((dt["LAM_DTYPE_F32"], dt["LAM_DTYPE_U8"]), (_lib.DTYPE_F32, _lib.DTYPE_U8))
        self.assertEqual(self.enum("lam_layout")["LAM_LAYOUT_NCHW"], _lib.LAYOUT_NCHW)
        kind = self.enum("lam_file_kind")
        self.assertEqual((kind["LAM_FILE_CHECKPOINT"], kind["LAM_FILE_LOG"]), (_lib.FILE_CHECKPOINT, _lib.FILE_LOG))
        opt = self.enum("lam_opt_kind")
        self.assertEqual({k: opt["LAM_OPT_" + k.upper()] for k in _lib.OPTIMIZERS}, _lib.OPTIMIZERS)
        folder = {k: int(v) for k, v in re.findall(r"\b(LAM_FOLDER_\w+)\s*=\s*(\d+)", self.text)}
        self.assertEqual((folder["LAM_FOLDER_TRAIN_ONLY"], folder["LAM_FOLDER_FLAT"]),
                         (_lib.FOLDER_TRAIN_ONLY, _lib.FOLDER_FLAT))

    def test_version(self):
        m = re.search(r'#define\s+LAMINA_VERSION\s+"([^"]+)"', self.text)
        self.assertEqual(m.group(1), _lib.C_API_VERSION, "LAMINA_VERSION changed: check _lib.py and bump C_API_VERSION")


if __name__ == "__main__":
    unittest.main()
