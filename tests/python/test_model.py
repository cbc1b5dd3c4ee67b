"""lamina.Model on the CPU backend: training on a slice of Fashion-MNIST learns, evaluate() and
predict() agree, save/load round-trips, and the checkpoints are the CLI's: a Python-trained model
evaluates in `lamina eval`, a `lamina train --save` model loads in Python, and the same seed trains to
the same parameters either way. Kept small (a few seconds on 2 cores)."""
import contextlib
import io
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

import lamina
from helpers import cli_path, load_fashion_mnist, write_mnist_dir

DEV = "cpu"
N_TRAIN, N_TEST = 2000, 1000
DATA = load_fashion_mnist(N_TRAIN, N_TEST)
NO_DATA = "Fashion-MNIST not found (Debian's dataset-fashion-mnist, or $LAMINA_DATA_DIR/fashion-mnist)"


def run_cli(*args):
    cli = cli_path()
    proc = subprocess.run([cli, *args], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"{cli} {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


@unittest.skipIf(DATA is None, NO_DATA)
class Folders(unittest.TestCase):
    """fit(DIR) and evaluate(DIR) read a folder through the CLI's loader and train as `lamina train --data DIR`."""
    SEG = "conv 8 3 pad 1, relu, conv 11 1"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.seg = os.path.join(cls.tmp.name, "seg")
        subprocess.run([cli_path(), "data", "segment", "--format", "folder", "--n", "40", "--test", "10", "--size",
                        "32x32", "--out", cls.seg], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_mask_folder_trains_as_the_cli(self):
        out = run_cli("train", "--data", self.seg, "--model", self.SEG, "--epochs", "2", "--batch", "8", "--seed", "5",
                      "--device", "cpu", "--no-progress", "--json")
        m = lamina.Model(self.SEG, input_shape=(1, 32, 32), device=DEV, seed=5)
        log = os.path.join(self.tmp.name, "seg-log.csv")
        h = m.fit(self.seg, epochs=2, batch_size=8, verbose=0, log=log)
        for mine, cli in zip(h, out["epochs"]):
            self.assertAlmostEqual(mine["loss"], cli["train_loss"], places=5)
            self.assertAlmostEqual(mine["test_accuracy"], cli["test_acc"], places=5)
            self.assertAlmostEqual(mine["test_mean_iou"], cli["test_miou"], places=5)
        self.assertGreater(h[-1]["test_mean_iou"], 0)
        ev = m.evaluate(self.seg, batch_size=8)
        self.assertAlmostEqual(ev["mean_iou"], h[-1]["test_mean_iou"], places=9)
        with open(log) as f:
            rows = [r.split(",") for r in f.read().splitlines()]
        self.assertEqual(rows[0][9:], ["val_miou", "test_miou", "loss_scale", "skipped_steps"])
        self.assertEqual([r[9] for r in rows[1:]], ["", ""])
        self.assertEqual([float(r[10]) for r in rows[1:]], [float(f"{r['test_mean_iou']:.6f}") for r in h])
        with self.assertRaisesRegex(TypeError, "no y"):
            m.fit(self.seg, np.zeros(40, np.uint8))
        with self.assertRaisesRegex(ValueError, "mask folders"):
            m.fit(os.path.join(self.tmp.name, "nothing"), reduce_zero_label=True)
        small = lamina.Model("conv 2 1", input_shape=(1, 32, 32), device=DEV)
        with self.assertRaisesRegex(ValueError, "classes and the model outputs 2"):
            small.fit(self.seg, verbose=0)

    def test_monitor_miou_keeps_the_cli_best_model(self):
        cli_best = os.path.join(self.tmp.name, "cli-best.lamina")
        out = run_cli("train", "--data", self.seg, "--model", self.SEG, "--epochs", "3", "--batch", "8", "--seed", "5",
                      "--lr", "0.01", "--device", "cpu", "--val-split", "0.25", "--monitor", "miou", "--save-best",
                      cli_best, "--no-progress", "--json")
        m = lamina.Model(self.SEG, input_shape=(1, 32, 32), device=DEV, seed=5)
        best = os.path.join(self.tmp.name, "py-best.lamina")
        h = m.fit(self.seg, epochs=3, batch_size=8, lr=0.01, verbose=0, val_split=0.25, monitor="miou", save_best=best)
        for mine, cli in zip(h, out["epochs"]):
            self.assertAlmostEqual(mine["val_mean_iou"], cli["val_miou"], places=5)
        self.assertEqual(max(h, key=lambda r: r["val_mean_iou"])["epoch"], out["best_epoch"])
        self.assertAlmostEqual(h[-1]["test_mean_iou"], out["test_miou"], places=5)
        self.assertTrue(np.allclose(lamina.load(best, device=DEV).get_params(),
                                    lamina.load(cli_best, device=DEV).get_params(), atol=1e-5),
                        "monitor='miou' and --monitor miou kept different models")
        with self.assertRaisesRegex(ValueError, "validation"):
            m.fit(self.seg, monitor="miou", verbose=0)
        with self.assertRaisesRegex(ValueError, "'loss' or 'miou'"):
            m.fit(self.seg, monitor="acc", verbose=0)

    def test_image_class_folder(self):
        imgs = os.path.join(self.tmp.name, "imgs")
        subprocess.run([cli_path(), "data", "images", "--format", "png", "--n", "40", "--test", "10", "--out", imgs],
                       check=True, capture_output=True)
        out = run_cli("train", "--data", imgs, "--model", "mlp", "--epochs", "1", "--batch", "8", "--seed", "4",
                      "--device", "cpu", "--no-progress", "--json")
        m = lamina.Model("mlp", input_shape=(3, 28, 28), device=DEV, seed=4)
        h = m.fit(imgs, epochs=1, batch_size=8, verbose=0)
        self.assertAlmostEqual(h[0]["loss"], out["epochs"][0]["train_loss"], places=5)
        self.assertAlmostEqual(h[0]["test_accuracy"], out["test_acc"], places=5)
        self.assertNotIn("test_mean_iou", h[0])
        self.assertAlmostEqual(m.evaluate(imgs)["accuracy"], out["test_acc"], places=5)


def _figures(history):
    """A history without its timings: what a streamed and a resident fit must agree on exactly."""
    return [{k: v for k, v in r.items() if k not in ("seconds", "images_per_s")} for r in history]


@unittest.skipIf(DATA is None, NO_DATA)
class StreamedFolders(unittest.TestCase):
    """fit(DIR, stream=True) and evaluate(DIR, stream=True) keep a folder's parts as streamed C sets, decoded
    batch by batch from the files: the same batches as a resident set, so the same figures to the last bit."""
    SEG = "conv 8 3 pad 1, relu, conv 11 1"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.seg = os.path.join(cls.tmp.name, "seg")
        cls.imgs = os.path.join(cls.tmp.name, "imgs")
        subprocess.run([cli_path(), "data", "segment", "--format", "folder-jpeg", "--n", "60", "--test", "20", "--size",
                        "40x48", "--out", cls.seg, "--seed", "5"], check=True, capture_output=True)
        subprocess.run([cli_path(), "data", "images", "--format", "jpeg", "--n", "60", "--test", "20", "--out",
                        cls.imgs], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def seg_model(self):
        return lamina.Model(self.SEG, input_shape=(1, 40, 48), device=DEV, seed=5)

    def parts_read(self, fn):
        """fn()'s result and the kinds of the folder parts it read: "streamed" or "arrays", in order."""
        from lamina import _folder
        kinds, read = [], _folder.read

        def spy(*a, **k):
            out = read(*a, **k)
            kinds.append("streamed" if isinstance(out[0], _folder.StreamedSet) else "arrays")
            return out

        _folder.read = spy
        try:
            return fn(), kinds
        finally:
            _folder.read = read

    def test_mask_folder_streamed_as_resident(self):
        runs = {}
        for stream in (False, True):
            m = self.seg_model()
            h, kinds = self.parts_read(lambda: m.fit(self.seg, epochs=2, batch_size=8, lr=0.01, verbose=0,
                                                     stream=stream, val_split=0.2, normalize="auto"))
            self.assertEqual(kinds, ["streamed"] * 2 if stream else ["arrays"] * 2)
            self.assertEqual(m.last_fit_streamed, stream)
            runs[stream] = (h, m.normalization, m.get_params(), m.evaluate(self.seg, batch_size=8, stream=stream))
            m.close()
        (h0, norm0, p0, ev0), (h1, norm1, p1, ev1) = runs[False], runs[True]
        self.assertEqual(_figures(h1), _figures(h0))
        self.assertIn("val_mean_iou", h1[-1])
        self.assertIn("test_mean_iou", h1[-1])
        self.assertGreater(h1[-1]["test_mean_iou"], 0)
        self.assertTrue(np.array_equal(norm0[0], norm1[0]) and np.array_equal(norm0[1], norm1[1]))
        self.assertTrue(np.array_equal(p0, p1), "a streamed fit trained other parameters")
        np.testing.assert_equal(ev1, ev0)
        self.assertEqual(ev1["mean_iou"], h1[-1]["test_mean_iou"])

    def test_image_folder_streamed_as_resident(self):
        hs, evs = [], []
        for stream in (False, True):
            m = lamina.Model("mlp", input_shape=(3, 28, 28), device=DEV, seed=4)
            hs.append(m.fit(self.imgs, epochs=2, batch_size=8, verbose=0, stream=stream))
            self.assertEqual(m.last_fit_streamed, stream)
            evs.append(m.evaluate(self.imgs, stream=stream, confusion=True))
            m.close()
        self.assertEqual(_figures(hs[1]), _figures(hs[0]))
        self.assertIn("test_accuracy", hs[1][-1])
        np.testing.assert_equal(evs[1], evs[0])

    def test_max_memory_streams(self):
        m = self.seg_model()
        # 60 images of 40x48 and their masks take 230 KB decoded: more than half of a 100 KB cap
        h, kinds = self.parts_read(lambda: m.fit(self.seg, epochs=1, batch_size=8, verbose=0, max_memory=100000))
        self.assertTrue(m.last_fit_streamed)
        self.assertEqual(kinds, ["streamed", "streamed"])  # the test part follows the training part
        ref = self.seg_model()
        self.assertEqual(_figures(h), _figures(ref.fit(self.seg, epochs=1, batch_size=8, verbose=0, stream=False)))
        # a cap the folder fits in, and the default (3/4 of available memory): decoded whole
        _, kinds = self.parts_read(lambda: m.fit(self.seg, epochs=1, batch_size=8, verbose=0, max_memory=1 << 40))
        self.assertFalse(m.last_fit_streamed)
        self.assertEqual(kinds, ["arrays", "arrays"])
        m.fit(self.seg, epochs=1, batch_size=8, verbose=0)
        self.assertFalse(m.last_fit_streamed)
        _, kinds = self.parts_read(lambda: m.evaluate(self.seg, batch_size=8, max_memory=20000))
        self.assertEqual(kinds, ["streamed"])
        np.testing.assert_equal(m.evaluate(self.seg, batch_size=8, max_memory=20000),
                                m.evaluate(self.seg, batch_size=8, stream=False))
        for bad in (0, -1, 1.5, True):
            with self.assertRaisesRegex(ValueError, "max_memory"):
                m.fit(self.seg, verbose=0, max_memory=bad)
        with self.assertRaisesRegex(TypeError, "stream"):
            m.fit(self.seg, verbose=0, stream="yes")
        with self.assertRaisesRegex(ValueError, "stream, max_memory, frames and frame_stride are for fit"):
            m.fit(np.zeros((4, 1, 40, 48), np.uint8), np.zeros((4, 40, 48), np.uint8), verbose=0, stream=True)
        with self.assertRaisesRegex(ValueError, "are for evaluate"):
            m.evaluate(np.zeros((4, 1, 40, 48), np.uint8), np.zeros((4, 40, 48), np.uint8), max_memory=10)

    def test_streamed_set_freed(self):
        m = self.seg_model()
        m.fit(self.seg, epochs=1, batch_size=8, verbose=0, stream=True)
        first = m._trainer_data[0]
        self.assertIsNotNone(first.ptr)
        h = m.fit(self.seg, epochs=1, batch_size=8, verbose=0, stream=True)  # replaces the trainer and its set
        self.assertIsNone(first.ptr)
        second = m._trainer_data[0]
        self.assertIsNot(second, first)
        self.assertEqual(len(h), 1)
        m.fit(self.seg, epochs=1, batch_size=8, verbose=0, stream=False)  # a resident fit frees it too
        self.assertIsNone(second.ptr)
        m.fit(self.seg, epochs=1, batch_size=8, verbose=0, stream=True, val_split=0.25)
        third = m._trainer_data[0]
        m.close()
        self.assertIsNone(third.ptr)
        # a model whose input does not match the folder is told so before any training
        wrong = lamina.Model(self.SEG, input_shape=(3, 40, 48), device=DEV)
        with self.assertRaisesRegex(ValueError, "samples are"):
            wrong.fit(self.seg, verbose=0, stream=True)
        with self.assertRaisesRegex(ValueError, "samples are"):
            wrong.evaluate(self.seg, stream=True)
        per_image = lamina.Model("flatten, dense 11", input_shape=(1, 40, 48), device=DEV)
        with self.assertRaisesRegex(ValueError, "labels are"):
            per_image.fit(self.seg, verbose=0, stream=True)


@unittest.skipIf(DATA is None, NO_DATA)
class Training(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.x, cls.y, cls.xt, cls.yt = DATA
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = lamina.Model("mlp", device=DEV, seed=3)
        cls.history = cls.model.fit(cls.x, cls.y, epochs=2, batch_size=64, verbose=0,
                                    validation_data=(cls.xt, cls.yt))

    @classmethod
    def tearDownClass(cls):
        cls.model.close()
        cls.tmp.cleanup()

    def test_learns(self):
        h = self.history
        self.assertEqual([e["epoch"] for e in h], [1, 2])
        for e in h:
            self.assertEqual(set(e), {"epoch", "loss", "accuracy", "lr", "seconds", "images_per_s", "val_loss",
                                      "val_accuracy"})
        self.assertLess(h[1]["loss"], h[0]["loss"])
        self.assertLess(h[0]["loss"], np.log(10))  # below a uniform guess's loss
        res = self.model.evaluate(self.xt, self.yt)
        self.assertGreater(res["accuracy"], 0.6, res)  # chance is 0.1; ~0.75 after 2 epochs of 2,000
        self.assertEqual(res["accuracy"], h[1]["val_accuracy"])

    def test_predict_matches_evaluate(self):
        # predict() normalizes the pixels as the trainer does, so its argmax is evaluate()'s.
        res = self.model.evaluate(self.xt, self.yt, confusion=True)
        pred = self.model.predict(self.xt)
        self.assertEqual(pred.shape, (N_TEST,))
        self.assertEqual(float(np.mean(pred == self.yt)), res["accuracy"])
        conf = np.zeros((10, 10), np.int64)
        np.add.at(conf, (self.yt, pred), 1)
        self.assertTrue(np.array_equal(conf, res["confusion"]))
        # (n, 1, 28, 28) is the same input as (n, 28, 28); another batch size changes only the BLAS
        # blocking, so the summation order (float32 rounding), not the values beyond it.
        a = self.model.predict_logits(self.xt[:300], batch_size=300)
        self.assertEqual(a.shape, (300, 10))
        self.assertTrue(np.array_equal(a, self.model.predict_logits(self.xt[:300].reshape(300, 1, 28, 28), batch_size=300)))
        b = self.model.predict_logits(self.xt[:300], batch_size=128)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

    def test_save_load(self):
        path = os.path.join(self.tmp.name, "py.lamina")
        self.model.save(path)
        loaded = lamina.load(path, device=DEV)
        self.assertEqual(loaded.spec, self.model.spec)
        self.assertEqual(loaded.input_shape, (1, 28, 28))
        self.assertTrue(np.array_equal(loaded.get_params(), self.model.get_params()))
        self.assertTrue(np.array_equal(loaded.predict_logits(self.xt), self.model.predict_logits(self.xt)))
        self.assertTrue(np.array_equal(loaded.predict(self.xt), self.model.predict(self.xt)))
        # A loaded model trains on (a fresh optimizer).
        h = loaded.fit(self.x[:256], self.y[:256], epochs=1, verbose=0)
        self.assertEqual(len(h), 1)
        loaded.close()

    def test_python_checkpoint_in_cli(self):
        path = os.path.join(self.tmp.name, "for-cli.lamina")
        self.model.save(path)
        data = os.path.join(self.tmp.name, "data-eval")
        os.mkdir(data)
        write_mnist_dir(data, self.x[:10], self.y[:10], self.xt, self.yt)
        out = run_cli("eval", "--load", path, "--data", data, "--device", "cpu", "--json")
        mine = self.model.evaluate(self.xt, self.yt, confusion=True)
        self.assertEqual(out["n"], N_TEST)
        self.assertEqual(out["confusion"], mine["confusion"].tolist())
        self.assertAlmostEqual(out["accuracy"], mine["accuracy"], places=6)

    def test_cli_checkpoint_in_python_and_same_training(self):
        # `lamina train` uses --seed for the initialization and the shuffle; Model(seed=S).fit() does
        # the same on its first fit, so on the CPU both runs must end with the same parameters.
        n = 1024
        data = os.path.join(self.tmp.name, "data-train")
        os.mkdir(data)
        write_mnist_dir(data, self.x[:n], self.y[:n], self.xt, self.yt)
        path = os.path.join(self.tmp.name, "cli.lamina")
        out = run_cli("train", "--data", data, "--model", "mlp", "--epochs", "1", "--batch", "32", "--opt", "sgd",
                      "--lr", "0.05", "--momentum", "0.9", "--seed", "7", "--device", "cpu", "--save", path,
                      "--no-progress", "--json")
        cli_model = lamina.load(path, device=DEV)
        py = lamina.Model("mlp", device=DEV, seed=7)
        h = py.fit(self.x[:n], self.y[:n], epochs=1, batch_size=32, optimizer="sgd", lr=0.05, momentum=0.9, verbose=0)
        self.assertAlmostEqual(h[0]["loss"], out["epochs"][0]["train_loss"], places=5)
        self.assertTrue(np.array_equal(py.get_params(), cli_model.get_params()),
                        "the same seed and settings trained to different parameters in Python and the CLI")
        self.assertAlmostEqual(cli_model.evaluate(self.xt, self.yt)["accuracy"], out["test_acc"], places=6)
        cli_model.close()
        py.close()

    def test_cnn(self):
        # The reference CNN: a few steps, enough to run every layer kind forward and backward.
        m = lamina.Model("cnn", device=DEV, seed=1)
        self.assertEqual(m.param_count, 34826)
        h = m.fit(self.x[:256], self.y[:256], epochs=1, batch_size=64, verbose=0)
        self.assertTrue(np.isfinite(h[0]["loss"]))
        pred = m.predict(self.xt[:200])
        self.assertEqual(float(np.mean(pred == self.yt[:200])), m.evaluate(self.xt[:200], self.yt[:200])["accuracy"])
        m.close()

    def test_training_controls_match_cli(self):
        # val_split holds out the images `lamina train --val-split` does, and lr_schedule/warmup give the
        # CLI's rates: the same seed and settings train to the same parameters and validation losses.
        n = 640
        data = os.path.join(self.tmp.name, "data-controls")
        os.mkdir(data)
        write_mnist_dir(data, self.x[:n], self.y[:n], self.xt[:100], self.yt[:100])
        cli_best = os.path.join(self.tmp.name, "cli-best.lamina")
        out = run_cli("train", "--data", data, "--model", "mlp", "--epochs", "3", "--batch", "32", "--lr", "3e-3",
                      "--seed", "9", "--device", "cpu", "--val-split", "0.25", "--lr-schedule", "step:1:0.5",
                      "--warmup", "0.5", "--save-best", cli_best, "--no-progress", "--json")
        py = lamina.Model("mlp", device=DEV, seed=9)
        best = os.path.join(self.tmp.name, "py-best.lamina")
        log = os.path.join(self.tmp.name, "py-log.csv")
        h = py.fit(self.x[:n], self.y[:n], epochs=3, batch_size=32, lr=3e-3, verbose=0, val_split=0.25,
                   lr_schedule="step:1:0.5", warmup=0.5, save_best=best, log=log)
        for mine, cli in zip(h, out["epochs"]):
            self.assertAlmostEqual(mine["loss"], cli["train_loss"], places=5)
            self.assertAlmostEqual(mine["val_loss"], cli["val_loss"], places=5)
            self.assertAlmostEqual(mine["lr"], cli["lr"], places=9)
        self.assertAlmostEqual(h[2]["lr"], 3e-3 / 4, places=9)
        py_best, cli_model = lamina.load(best, device=DEV), lamina.load(cli_best, device=DEV)
        self.assertTrue(np.array_equal(py_best.get_params(), cli_model.get_params()),
                        "save_best and --save-best kept different models")
        with open(log) as f:
            rows = f.read().splitlines()
        self.assertEqual(rows[0], "epoch,train_loss,train_acc,val_loss,val_acc,test_acc,lr,seconds,images_per_s,"
                                  "val_miou,test_miou,loss_scale,skipped_steps")
        self.assertEqual([r.split(",")[0] for r in rows[1:]], ["1", "2", "3"])
        self.assertEqual([r.split(",")[9:] for r in rows[1:]], [["", "", "", ""]] * 3, "a label per image, fp32: no mean IoU, no loss scale")
        # early_stop: with lr 0 nothing improves after epoch 1, so 2 epochs of patience stop after epoch 3
        h = py.fit(self.x[:n], self.y[:n], epochs=8, optimizer="sgd", lr=0.0, verbose=0, val_split=0.25, early_stop=2)
        self.assertEqual(len(h), 3)
        # issue 30: the two outputs may not be one file, and neither replaces a file of another kind
        with open(best, "rb") as f:
            best_bytes = f.read()
        with self.assertRaisesRegex(lamina.LaminaError, "also this run's"):
            both = os.path.join(self.tmp.name, "both")  # no file there yet
            py.fit(self.x[:n], self.y[:n], epochs=1, val_split=0.25, save_best=both, log=both, verbose=0)
        with self.assertRaisesRegex(lamina.LaminaError, "not a lamina training log"):
            py.fit(self.x[:n], self.y[:n], epochs=1, val_split=0.25, log=best, verbose=0)
        with self.assertRaisesRegex(lamina.LaminaError, "not a lamina checkpoint"):
            py.fit(self.x[:n], self.y[:n], epochs=1, val_split=0.25, save_best=log, verbose=0)
        with open(best, "rb") as f:
            self.assertEqual(f.read(), best_bytes, "a refused fit changed the checkpoint")
        with self.assertRaises(ValueError):
            py.fit(self.x[:n], self.y[:n], epochs=2, save_best=best)  # no validation data
        with self.assertRaises(ValueError):
            py.fit(self.x[:n], self.y[:n], epochs=2, warmup=2)
        for m in (py, py_best, cli_model):
            m.close()

    def test_ctrl_c_stops_the_fit(self):
        # A Ctrl-C while lam_fit runs (here interrupt_main, as the terminal's SIGINT) reaches Python only in a
        # callback: fit() raises the trainer's stop flag there and raises KeyboardInterrupt when lam_fit returns,
        # within the epoch after; the model stays usable.
        import _thread
        import threading
        m = lamina.Model("mlp", device=DEV, seed=6)
        timer = threading.Timer(0.5, _thread.interrupt_main)
        timer.start()
        try:
            with self.assertRaises(KeyboardInterrupt):
                m.fit(self.x[:512], self.y[:512], epochs=100000, verbose=0)
        finally:
            timer.cancel()
        self.assertGreater(m.epochs_done, 0)
        self.assertLess(m.epochs_done, 100000)
        self.assertGreater(m.evaluate(self.xt, self.yt)["accuracy"], 0.3)
        m.close()

    def test_second_fit_continues(self):
        m = lamina.Model("mlp", device=DEV, seed=5)
        h1 = m.fit(self.x[:512], self.y[:512], epochs=1, verbose=0)
        h2 = m.fit(self.x[:512], self.y[:512], epochs=1, verbose=0)
        self.assertEqual((h1[0]["epoch"], h2[0]["epoch"]), (1, 2))
        self.assertEqual(m.epochs_done, 2)
        self.assertLess(h2[0]["loss"], h1[0]["loss"])
        m.close()


class Models(unittest.TestCase):
    """What needs no data set: building, describing, parameters, and the errors."""

    def test_build_and_describe(self):
        m = lamina.Model("conv 4 3 pad 1, relu, maxpool 2, flatten, dense 3", input_shape=(1, 8, 8), device=DEV)
        self.assertEqual(m.outputs, 3)
        self.assertEqual(m.device, "cpu")
        self.assertEqual(m.param_count, 4 * 9 + 4 + 3 * 4 * 4 * 4 + 3)
        self.assertIn("conv", m.summary())
        self.assertIn("params", repr(m))
        p = m.get_params()
        m.set_params(np.zeros_like(p))
        self.assertTrue(np.all(m.get_params() == 0))
        logits = m.predict_logits(np.zeros((5, 8, 8), np.uint8))
        self.assertTrue(np.all(logits == 0))  # zero weights and biases
        self.assertEqual(m.predict(np.zeros((0, 8, 8), np.uint8)).shape, (0,))
        m.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            m.predict(np.zeros((1, 8, 8), np.uint8))

    def test_synthetic_fit(self):
        # Without Fashion-MNIST: two classes a one-layer model separates (bright vs dark images).
        rng = np.random.default_rng(0)
        y = rng.integers(0, 2, 512)
        x = (rng.integers(0, 100, (512, 6, 6)) + 150 * y[:, None, None]).astype(np.uint8)
        m = lamina.Model("flatten, dense 2", input_shape=(6, 6), device=DEV, seed=2)
        m.fit(x, y, epochs=3, batch_size=32, optimizer="sgd", lr=0.1, verbose=0)
        self.assertGreater(m.evaluate(x, y)["accuracy"], 0.95)
        m.close()

    def test_verbose(self):
        rng = np.random.default_rng(1)
        x = rng.integers(0, 256, (64, 6, 6), dtype=np.uint8)
        y = rng.integers(0, 3, 64)
        m = lamina.Model("flatten, dense 3", input_shape=(6, 6), device=DEV)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            m.fit(x, y, epochs=2, verbose=1, validation_data=(x, y))
        lines = buf.getvalue().splitlines()
        self.assertEqual(len(lines), 2, lines)
        self.assertRegex(lines[1], r"^epoch 2: loss [\d.]+  accuracy [\d.]+ .* val_accuracy [\d.]+$")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            m.fit(x, y, epochs=1, verbose=0)
        self.assertEqual(buf.getvalue(), "")
        m.close()

    def test_errors(self):
        m = lamina.Model("mlp", device=DEV)
        x = np.zeros((4, 28, 28), np.uint8)
        y = np.zeros(4, np.int64)
        with self.assertRaises(lamina.LaminaError) as cm:
            lamina.Model("dense ten", device=DEV)
        self.assertIn("^", cm.exception.message)  # the caret under the bad word
        with self.assertRaisesRegex(TypeError, "spec must be a string"):
            lamina.Model(10, device=DEV)
        with self.assertRaisesRegex(ValueError, "input_shape"):
            lamina.Model("mlp", input_shape=(28, 0), device=DEV)
        # sizes that wrapped in C ints (2**32 + 28 became 28) or overflowed (65536 x 65536 flat = 0 values)
        with self.assertRaisesRegex(ValueError, "too large"):
            lamina.Model("flatten, dense 10", input_shape=(1, 2**32 + 28, 28), device=DEV)
        with self.assertRaises(lamina.LaminaError) as cm:
            lamina.Model("flatten, dense 10", input_shape=(1, 65536, 65536), device=DEV)
        self.assertIn("values per sample", cm.exception.message)
        with self.assertRaisesRegex(ValueError, "NUL"):  # the C library would read only "flatten"
            lamina.Model("flatten\0, dense 10", device=DEV)
        with self.assertRaisesRegex(TypeError, "uint8 pixels.*not float32.*raw pixels"):
            m.fit(x.astype(np.float32), y, verbose=0)
        with self.assertRaisesRegex(ValueError, r"shape \(4, 28, 27\)"):
            m.fit(x[:, :, :27], y, verbose=0)
        with self.assertRaisesRegex(ValueError, "4 images but y has 3 labels"):
            m.fit(x, y[:3], verbose=0)
        with self.assertRaisesRegex(ValueError, r"y\[2\] = 10 is not a class"):
            m.fit(x, np.array([0, 1, 10, 2]), verbose=0)
        with self.assertRaisesRegex(ValueError, r"y\[0\] = -1"):
            m.evaluate(x, np.array([-1, 1, 1, 2]))
        with self.assertRaisesRegex(TypeError, "integer class labels, not float64"):
            m.fit(x, y.astype(np.float64), verbose=0)
        with self.assertRaisesRegex(ValueError, "optimizer 'rmsprop'"):
            m.fit(x, y, optimizer="rmsprop", verbose=0)
        with self.assertRaisesRegex(ValueError, "momentum applies to sgd"):
            m.fit(x, y, optimizer="adam", momentum=0.9, verbose=0)
        with self.assertRaisesRegex(ValueError, r"learning rate \(lr\) -1 is not a number from 0 to 1000"):
            m.fit(x, y, lr=-1, verbose=0)
        # the library's bound (lam_opt_check), as the CLI's --lr: an infinite or NaN rate made every weight NaN
        for bad in (float("inf"), float("nan"), 1e9, 1e39):
            with self.assertRaisesRegex(ValueError, "learning rate .* is not a number from 0 to 1000"):
                m.fit(x, y, lr=bad, verbose=0)
        with self.assertRaisesRegex(ValueError, "momentum inf is not a number from 0 to 1000"):
            m.fit(x, y, optimizer="sgd", momentum=float("inf"), verbose=0)
        with self.assertRaisesRegex(ValueError, "weight decay nan is not a number from 0 to 1000"):
            m.fit(x, y, weight_decay=float("nan"), verbose=0)
        with self.assertRaisesRegex(ValueError, "batch_size = 0"):
            m.fit(x, y, batch_size=0, verbose=0)
        with self.assertRaisesRegex(ValueError, "epochs = 0"):
            m.fit(x, y, epochs=0, verbose=0)
        with self.assertRaisesRegex(ValueError, "no images"):
            m.fit(x[:0], y[:0], verbose=0)
        with self.assertRaises(FileNotFoundError) as cm:  # more in test_api.py
            lamina.load("/nonexistent/model.lamina", device=DEV)
        self.assertIn("/nonexistent/model.lamina", str(cm.exception))
        with tempfile.NamedTemporaryFile(suffix=".lamina") as f:
            f.write(b"not a checkpoint")
            f.flush()
            with self.assertRaises(lamina.LaminaError):
                lamina.load(f.name, device=DEV)
        m.close()


if __name__ == "__main__":
    unittest.main()
