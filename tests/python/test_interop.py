"""Zero-copy exchange on the CPU: DLPack of CPU DeviceArrays into NumPy and PyTorch (same memory), the
capsule protocol (name, rename on use, the deleter called once, also when a consumer gives up), host
tensors of other libraries through lamina.from_dlpack, and the refusals that need no GPU. The CUDA
side (CuPy, Numba, PyTorch tensors in and out) is in test_cuda.py."""
import ctypes
import gc
import sys
import unittest

import numpy as np

import lamina
from lamina import _interop
from helpers import course_inputs, fresh_rng, reference

DEV = "cpu"


def need_torch(test):
    """PyTorch, imported on first use, or the test is skipped. Not at import: loading torch changes the
    process's OpenMP threads, and test_model's CPU runs, which compare Python with the CLI bit for bit,
    come before this module in run_tests.py."""
    try:
        import torch
        import torch.utils.dlpack  # noqa: F401
    except ImportError:
        test.skipTest("no PyTorch")
    return torch
_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))


def capsule_name(c):
    for name in (b"dltensor", b"used_dltensor"):
        if _valid(c, name):
            return name.decode()
    return None


class CountingDict(dict):
    """Stands in for _interop._exported: counts every release of each exported tensor."""

    def __init__(self, base):
        super().__init__(base)
        self.pops, self.sets = [], []

    def __setitem__(self, key, value):
        self.sets.append(key)
        super().__setitem__(key, value)

    def pop(self, key, *default):
        self.pops.append(key)
        return super().pop(key, *default)


class ExportReleases(unittest.TestCase):
    """Each test runs with the export table counted; every tensor must be released exactly once."""

    def setUp(self):
        gc.collect()
        self.saved = _interop._exported
        _interop._exported = self.table = CountingDict(self.saved)
        self.before = len(self.table)

    def tearDown(self):
        _interop._exported = self.saved
        self.saved.update({k: v for k, v in self.table.items() if k not in self.saved})

    def exported(self):
        return [k for k in self.table if k not in self.saved]

    def assert_released_once(self):
        gc.collect()
        self.assertEqual(self.exported(), [], "a DLManagedTensor was never released")
        # a freed tensor's address may come back for the next one: count releases against exports per key
        mine = [k for k in self.table.pops if k not in self.saved]
        for k in set(mine):
            self.assertLessEqual(mine.count(k), self.table.sets.count(k), "a deleter ran twice for one tensor")


class CpuDLPack(ExportReleases):
    def setUp(self):
        super().setUp()
        self.rng = fresh_rng(self)
        self.host = self.rng.normal(size=(3, 5)).astype(np.float32)
        self.a = lamina.to_device(self.host, DEV)

    def tearDown(self):
        self.a.close()
        super().tearDown()

    def test_device(self):
        self.assertEqual(self.a.__dlpack_device__(), (1, 0))
        self.assertFalse(hasattr(self.a, "__cuda_array_interface__"))  # host memory: DLPack only

    def test_numpy_view(self):
        v = np.from_dlpack(self.a)
        self.assertEqual(v.ctypes.data, self.a.ptr)
        self.assertEqual(v.shape, (3, 5))
        self.assertTrue(np.array_equal(v, self.host))
        self.a.upload(np.full((3, 5), 7.5, np.float32))  # the same memory: the view sees the upload
        self.assertTrue(np.all(v == 7.5))
        self.assertEqual(len(self.exported()), 1)
        del v
        self.assert_released_once()

    def test_numpy_view_keeps_array_alive(self):
        a = lamina.to_device(np.arange(4, dtype=np.uint8), DEV)
        v = np.from_dlpack(a)
        del a
        gc.collect()
        self.assertTrue(np.array_equal(v, np.arange(4, dtype=np.uint8)))  # still lamina's memory, still there
        del v
        self.assert_released_once()

    def test_shapes(self):
        for shape in ((), (0,), (4, 0, 2), (2, 1, 3)):
            a = lamina.to_device(np.ones(shape, np.float32), DEV)
            v = np.from_dlpack(a)
            self.assertEqual(v.shape, shape)
            self.assertTrue(v.flags.c_contiguous)
            del v
            a.close()
        self.assert_released_once()

    def test_torch_round_trip(self):
        torch = need_torch(self)
        t = torch.utils.dlpack.from_dlpack(self.a)
        self.assertEqual(t.data_ptr(), self.a.ptr)
        self.assertEqual(tuple(t.shape), (3, 5))
        self.assertTrue(np.array_equal(t.numpy(), self.host))
        t[0, 0] = -2.0
        self.assertEqual(self.a.numpy()[0, 0], -2.0)
        back = lamina.from_dlpack(t)  # a host tensor: a NumPy view of the same memory
        self.assertIsInstance(back, np.ndarray)
        self.assertEqual(back.ctypes.data, self.a.ptr)
        del t, back
        self.assert_released_once()

    def test_torch_capsule(self):
        torch = need_torch(self)
        c = self.a.__dlpack__()
        self.assertEqual(capsule_name(c), "dltensor")
        t = torch.utils.dlpack.from_dlpack(c)
        self.assertEqual(capsule_name(c), "used_dltensor")  # the consumer took it
        self.assertEqual(t.data_ptr(), self.a.ptr)
        del c
        gc.collect()
        self.assertEqual(len(self.exported()), 1)  # the tensor still views it
        del t
        self.assert_released_once()

    def test_unconsumed_capsule_is_released(self):
        c = self.a.__dlpack__()
        self.assertEqual(len(self.exported()), 1)
        del c
        self.assert_released_once()

    def test_capsule_taken_once(self):
        c = self.a.__dlpack__()
        v = lamina.from_dlpack(c)  # a capsule on the CPU: a NumPy view
        self.assertEqual(capsule_name(c), "used_dltensor")
        self.assertEqual(v.ctypes.data, self.a.ptr)
        with self.assertRaisesRegex(ValueError, "consumed already"):
            lamina.from_dlpack(c)
        del v
        self.assert_released_once()

    def test_consumer_that_gives_up(self):
        # NumPy refuses a capsule on a device it cannot read, and drops it with its exception set: the
        # capsule's destructor still releases the tensor, once.
        a = self.a

        class Lies:
            def __dlpack__(self, stream=None):
                return _interop.export_capsule(a, a.ptr, a.shape, a.dtype, (_interop.KDL_CUDA, 0))

            def __dlpack_device__(self):
                return (1, 0)

        seen, hook = [], sys.unraisablehook
        sys.unraisablehook = seen.append
        try:
            with self.assertRaises(Exception):
                np.from_dlpack(Lies())
        finally:
            sys.unraisablehook = hook
        self.assert_released_once()
        self.assertTrue(any("Unsupported device" in str(u.exc_value) for u in seen), [u.exc_value for u in seen])

    def test_export_refusals(self):
        with self.assertRaisesRegex(BufferError, "only stream=None"):
            self.a.__dlpack__(stream=1)
        with self.assertRaisesRegex(BufferError, "not \\(2, 0\\)"):
            self.a.__dlpack__(dl_device=(2, 0))
        with self.assertRaisesRegex(BufferError, "copy"):
            self.a.__dlpack__(copy=True)
        self.a.__dlpack__(dl_device=(1, 0), copy=False, max_version=(1, 0))  # accepted: the legacy capsule
        self.a.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            self.a.__dlpack__()
        self.assert_released_once()

    def test_hidden_layer_on_views(self):
        g, w = course_inputs(self.rng, 1001)
        out = lamina.create_hidden_layer(np.from_dlpack(lamina.to_device(g, DEV)), w, device=DEV)
        self.assertLessEqual(float(np.max(np.abs(out - reference(g, w)))), 1e-6)
        self.assert_released_once()


def make_capsule(data, shape, dl_dtype, device, strides=None, deleter=None):
    """A DLPack capsule built by hand, as another producer would, with no destructor: (capsule, keep)."""
    m = _interop.DLManagedTensor()
    nd = len(shape)
    dims = (ctypes.c_int64 * max(nd, 1))(*shape)
    t = m.dl_tensor
    t.data, t.device, t.ndim = data, _interop.DLDevice(*device), nd
    t.dtype = _interop.DLDataType(*dl_dtype)
    t.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    steps = None
    if strides is not None:
        steps = (ctypes.c_int64 * nd)(*strides)
        t.strides = ctypes.cast(steps, ctypes.POINTER(ctypes.c_int64))
    if deleter is not None:
        m.deleter = deleter
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
        ("PyCapsule_New", ctypes.pythonapi))
    return new(ctypes.addressof(m), b"dltensor", None), (m, dims, steps)


class Import(unittest.TestCase):
    def test_host_capsule_deleter_once(self):
        calls = []
        deleter = _interop.DLDeleter(lambda p: calls.append(p))
        buf = np.arange(12, dtype=np.float32)
        # A strided view (every other value, 2x3), strides in elements as DLPack has them.
        c, keep = make_capsule(buf.ctypes.data, (2, 3), (2, 32, 1), (1, 0), strides=(6, 2), deleter=deleter)
        v = lamina.from_dlpack(c)
        self.assertEqual(capsule_name(c), "used_dltensor")
        self.assertTrue(np.array_equal(v, buf.reshape(2, 6)[:, ::2]))
        self.assertEqual(v.ctypes.data, buf.ctypes.data)
        w = v[1:]  # a view of the view keeps the producer's tensor too
        del v
        gc.collect()
        self.assertEqual(calls, [])
        del w
        gc.collect()
        self.assertEqual(calls, [ctypes.addressof(keep[0])])

    def test_device_capsule_refusals(self):
        # Refused before anything is taken: the capsule stays "dltensor" for its producer to free.
        c, keep = make_capsule(0x1000, (4,), (2, 64, 1), (_interop.KDL_CUDA, 0))
        with self.assertRaisesRegex(TypeError, "float32 or uint8 .*not float64"):
            lamina.from_dlpack(c)
        self.assertEqual(capsule_name(c), "dltensor")
        c, keep = make_capsule(0x1000, (4, 4), (2, 32, 1), (_interop.KDL_CUDA, 0), strides=(1, 4))
        with self.assertRaisesRegex(ValueError, "not C-contiguous"):
            lamina.from_dlpack(c)
        c, keep = make_capsule(0x1000, (2,), (2, 32, 1), (_interop.KDL_CUDA, 7))
        with self.assertRaisesRegex((ValueError, lamina.LaminaError), "device 7|CUDA"):
            lamina.from_dlpack(c)
        self.assertEqual(capsule_name(c), "dltensor")

    def test_cuda_array_interface_reading(self):
        class Cai:
            def __init__(self, **kw):
                self.__cuda_array_interface__ = dict({"version": 3, "shape": (2, 3), "typestr": "<f4",
                                                      "data": (0x2000, True), "strides": None, "stream": None}, **kw)

        self.assertEqual(_interop.read_cai(Cai()), (0x2000, (2, 3), np.dtype(np.float32), True, None, None))
        self.assertEqual(_interop.read_cai(Cai(strides=(12, 4), stream=5))[4:], ((3, 1), 5))
        with self.assertRaisesRegex(TypeError, "not float64"):
            lamina.from_dlpack(Cai(typestr="<f8"))
        with self.assertRaisesRegex(ValueError, "not C-contiguous"):
            lamina.from_dlpack(Cai(strides=(4, 8)))
        if lamina.cuda_device_count() == 0:
            # A CUDA array with no CUDA device for lamina: said as such, from the call that takes it too.
            for call in (lambda: lamina.from_dlpack(Cai()),
                         lambda: lamina.create_hidden_layer(Cai(), np.zeros((2, 3), np.float32))):
                with self.assertRaisesRegex(lamina.LaminaError, "CUDA"):
                    call()

    def test_not_an_array(self):
        with self.assertRaisesRegex(TypeError, "neither __dlpack__ nor __cuda_array_interface__"):
            lamina.from_dlpack([1, 2, 3])
        a = lamina.to_device(np.zeros(3, np.float32), DEV)
        self.assertIs(lamina.from_dlpack(a), a)

    def test_torch_host_tensors_in_hidden_layer(self):
        torch = need_torch(self)
        rng = fresh_rng(self)
        g, w = course_inputs(rng, 4097)
        tg, tw = torch.from_numpy(g), torch.from_numpy(w)
        v = lamina.from_dlpack(tg)
        self.assertEqual(v.ctypes.data, tg.data_ptr())
        out = lamina.create_hidden_layer(tg, tw, device=DEV)
        self.assertLessEqual(float(np.max(np.abs(out - reference(g, w)))), 1e-6, f"seed {self.seed}")


if __name__ == "__main__":
    unittest.main()
