"""lamina.Model of clips (input_shape (frames, channels, height, width)) on synthetic clips: its logits are the
per-frame layers' features of every frame, pooled over the frames and put through the dense layer (here in float64,
from an image Model of the per-frame layers with the same parameters); tcat's are the image Model of frames*channels
channels on the same bytes; both layouts of x give the same logits; a clip model learns which way a dot moves (one
frame cannot tell), keeps its frames through save and load, and refuses clips of the wrong length.
A folder of video files (`lamina data clips --format mp4`) trains, evaluates and predicts from Python as the CLI
does: fit(DIR) gives `lamina train`'s losses, evaluate(DIR) `lamina eval`'s figures, predict(path) the test part's
middle clips (their softmax's mean loss is evaluate's), with clear errors for a model or options that do not fit."""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

import lamina
from helpers import cli_path, fashion_mnist_dir

DEV = "cpu"


def moving_dots(rng, n, t=5, hw=16):
    """(n, t, hw, hw) clips of a bright dot moving right (class 0) or left (class 1) one pixel a frame from a random
    place: any one frame is a dot somewhere, either way."""
    y = rng.integers(0, 2, n)
    x = rng.integers(0, 40, (n, t, hw, hw))
    for i in range(n):
        r, c0 = rng.integers(1, hw - 1), rng.integers(t, hw - t)
        for f in range(t):
            x[i, f, r, c0 + (f if y[i] == 0 else -f)] = 255
    return x.astype(np.uint8), y


class Clips(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(7)

    def test_logits_are_pooled_frames(self):
        T, C, H, W = 5, 2, 7, 6
        x = self.rng.integers(0, 256, (4, T, C, H, W), dtype=np.uint8)
        for pool in ("mean", "max"):
            clip = lamina.Model(f"conv 3 3 pad 1, tanh, gap, tpool {pool}, dense 2", input_shape=(T, C, H, W),
                                device=DEV, seed=2)
            frame = lamina.Model("conv 3 3 pad 1, tanh, gap", input_shape=(C, H, W), device=DEV, seed=2)
            p = self.rng.normal(0, 0.5, clip.param_count).astype(np.float32)
            clip.set_params(p)
            frame.set_params(p[:frame.param_count])
            feat = frame.predict_logits(x.reshape(-1, C, H, W)).astype(np.float64).reshape(4, T, 3)
            pooled = feat.mean(1) if pool == "mean" else feat.max(1)
            Wd = p[frame.param_count:frame.param_count + 6].reshape(2, 3).astype(np.float64)
            want = pooled @ Wd.T + p[frame.param_count + 6:]
            got = clip.predict_logits(x)
            self.assertEqual(got.shape, (4, 2))
            self.assertTrue(np.allclose(got, want, rtol=1e-5, atol=1e-5), f"tpool {pool}: {got} vs {want}")
            # the other layout of the same clips: (n, t, h, w, c)
            self.assertTrue(np.array_equal(clip.predict_logits(np.ascontiguousarray(x.transpose(0, 1, 3, 4, 2))), got))
            clip.close(), frame.close()

    def test_tcat_is_frames_as_channels(self):
        T, C, H, W = 3, 2, 6, 5
        x = self.rng.integers(0, 256, (5, T, C, H, W), dtype=np.uint8)
        clip = lamina.Model("tcat, conv 4 3, relu, gap, dense 3", input_shape=(T, C, H, W), device=DEV, seed=4)
        image = lamina.Model("conv 4 3, relu, gap, dense 3", input_shape=(T * C, H, W), device=DEV, seed=4)
        image.set_params(clip.get_params())
        self.assertTrue(np.allclose(clip.predict_logits(x), image.predict_logits(x.reshape(5, T * C, H, W)),
                                    rtol=1e-5, atol=1e-6))
        clip.close(), image.close()

    def test_learns_motion_and_round_trips(self):
        x, y = moving_dots(self.rng, 400)
        xt, yt = moving_dots(self.rng, 100)
        m = lamina.Model("conv 4 3 pad 1, relu, tcat, conv 16 3 pad 1, relu, maxpool 2, conv 16 3 pad 1, relu, gap, "
                         "dense 2", input_shape=(5, 1, 16, 16), device=DEV, seed=1)
        self.assertEqual(m.frames, 5)
        m.fit(x, y, epochs=8, batch_size=20, lr=3e-3, verbose=0)
        acc = m.evaluate(xt, yt)["accuracy"]
        self.assertGreater(acc, 0.9, "the direction of motion, which no single frame shows")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "clip.lamina")
            m.save(path)
            loaded = lamina.load(path, device=DEV)
        self.assertEqual(loaded.input_shape, (5, 1, 16, 16))
        self.assertTrue(np.array_equal(loaded.predict_logits(xt), m.predict_logits(xt)))
        with self.assertRaisesRegex(ValueError, r"clips of 5 frames of 1x16x16"):
            m.predict(xt[:, :4])
        loaded.close(), m.close()

    def test_bad_clip_models(self):
        with self.assertRaisesRegex(lamina.LaminaError, "its output must be one per clip"):
            lamina.Model("conv 4 3, gap, dense 3", input_shape=(4, 1, 8, 8), device=DEV)
        with self.assertRaisesRegex(ValueError, "frames 1 to 255"):
            lamina.Model("tcat, gap, dense 3", input_shape=(256, 1, 8, 8), device=DEV)


def run_cli(*args):
    proc = subprocess.run([cli_path(), *args], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"lamina {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout) if "--json" in args else proc.stdout


@unittest.skipIf(lamina.video_unavailable_reason(), f"no video files: {lamina.video_unavailable_reason()}")
@unittest.skipIf(fashion_mnist_dir() is None, "Fashion-MNIST not found (lamina data clips makes its videos from it)")
@unittest.skipUnless(os.path.isfile(cli_path()), f"no lamina command at {cli_path()}")
class VideoFolders(unittest.TestCase):
    """fit, evaluate and predict on video files, against `lamina train` and `lamina eval` on the same folder."""
    SPEC = "conv 8 3 pad 1, relu, maxpool 2, tpool max, flatten, dense 10"
    SHAPE = (6, 1, 40, 48)  # the videos are 64x64 grey: size=(40, 48) fits them (cover, centre crop)

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.videos = os.path.join(cls.tmp.name, "videos")
        run_cli("data", "clips", "--format", "mp4", "--n", "24", "--test", "8", "--out", cls.videos, "--seed", "3")
        cls.ckpt = os.path.join(cls.tmp.name, "cli.lamina")
        cls.cli = run_cli("train", "--data", cls.videos, "--frames", "6", "--frame-stride", "3", "--size", "40x48",
                          "--model", cls.SPEC, "--classes", "10", "--epochs", "2", "--batch", "4", "--seed", "5",
                          "--device", "cpu", "--no-progress", "--json", "--save", cls.ckpt)
        cls.cli_eval = run_cli("eval", "--data", cls.videos, "--frames", "6", "--frame-stride", "3", "--load",
                               cls.ckpt, "--device", "cpu", "--json")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def model(self, shape=SHAPE):
        return lamina.Model(self.SPEC, input_shape=shape, device=DEV, seed=5)

    def test_fit_and_evaluate_as_the_cli(self):
        m = self.model()
        h = m.fit(self.videos, frame_stride=3, size=(40, 48), epochs=2, batch_size=4, verbose=0)
        self.assertTrue(m.last_fit_streamed, "a video folder is always streamed")
        self.assertEqual(len(h), 2)
        for mine, cli in zip(h, self.cli["epochs"]):  # the CLI's JSON keeps 10 significant digits
            self.assertAlmostEqual(mine["loss"], cli["train_loss"], places=6)
            self.assertAlmostEqual(mine["accuracy"], cli["train_acc"], places=6)
        self.assertAlmostEqual(h[-1]["test_accuracy"], self.cli["test_acc"], places=6)
        self.assertTrue(np.allclose(m.get_params(), lamina.load(self.ckpt, device=DEV).get_params(), rtol=0, atol=1e-6),
                        "fit(DIR) trained other parameters than `lamina train` on the same folder, options and seed")
        ev = m.evaluate(self.videos, frame_stride=3, size=(40, 48), confusion=True)
        self.assertTrue(0 <= ev["accuracy"] <= 1)
        self.assertAlmostEqual(ev["accuracy"], self.cli_eval["accuracy"], places=6)
        self.assertAlmostEqual(ev["loss"], self.cli_eval["loss"], places=5)
        self.assertEqual(ev["confusion"].tolist(), self.cli_eval["confusion"])
        self.assertEqual(ev["confusion"].sum(), 8, "one row a test video")
        # the same seed again, stream=True said: the same clips, the same losses to the bit
        again = self.model().fit(self.videos, frame_stride=3, size=(40, 48), epochs=2, batch_size=4, verbose=0,
                                 stream=True)
        self.assertEqual([r["loss"] for r in again], [r["loss"] for r in h])
        # the stride fitted at is kept (in the checkpoint too): evaluate and predict default to it
        saved = os.path.join(self.tmp.name, "py.lamina")
        m.save(saved)
        back = lamina.load(saved, device=DEV)
        test = os.path.join(self.videos, "test")
        self.assertTrue(np.array_equal(back.predict(test).probabilities, m.predict(test, frame_stride=3).probabilities))
        self.assertEqual(back.evaluate(self.videos)["loss"], ev["loss"])
        back.close()
        m.close()

    def test_predict_files_and_folders(self):
        m = lamina.load(self.ckpt, device=DEV)  # the CLI's model: its class names came from the folder
        test = os.path.join(self.videos, "test")
        p = m.predict(test, frame_stride=3)
        files = sorted(os.path.join(r, f) for r, _, fs in os.walk(test) for f in fs if f.endswith(".mp4"))
        self.assertEqual(p.files, files)
        self.assertEqual(p.probabilities.shape, (8, 10))
        self.assertTrue(np.allclose(p.probabilities.sum(axis=1), 1, rtol=0, atol=1e-12))
        self.assertTrue(np.all(p.probabilities >= 0))
        self.assertTrue(np.array_equal(p.classes, p.probabilities.argmax(axis=1)))
        # the class folders' names (the training part's, sorted) are the classes
        names = sorted(os.listdir(os.path.join(self.videos, "train")))
        self.assertEqual(p.names, [names[k] for k in p.classes])
        # the middle clips evaluate(DIR) reads: its accuracy and mean loss from these probabilities (float64)
        label = np.array([names.index(os.path.basename(os.path.dirname(f))) for f in files])
        ev = m.evaluate(self.videos, frame_stride=3)
        self.assertAlmostEqual(float(np.mean(p.classes == label)), ev["accuracy"], places=9)
        self.assertAlmostEqual(float(np.mean(-np.log(p.probabilities[np.arange(8), label]))), ev["loss"], places=5)
        # one file: one row, as in the folder's
        one = m.predict(files[3], frame_stride=3)
        self.assertEqual(one.files, [files[3]])
        self.assertEqual(one.probabilities.shape, (1, 10))
        self.assertTrue(np.allclose(one.probabilities[0], p.probabilities[3], rtol=0, atol=1e-6))
        self.assertAlmostEqual(float(one.probabilities.sum()), 1.0, places=12)
        # another stride reads other frames (the videos move): other probabilities
        self.assertFalse(np.allclose(m.predict(test, frame_stride=1).probabilities, p.probabilities, atol=1e-6))
        # no frame_stride: the one the checkpoint keeps (the CLI trained at 3)
        self.assertTrue(np.array_equal(m.predict(test).probabilities, p.probabilities))
        # test_clips=3: the softmax of 3 clips a video averaged, as `lamina predict --test-clips 3` gives it
        k3 = m.predict(test, test_clips=3)
        cli = run_cli("predict", "--load", self.ckpt, "--input", test, "--test-clips", "3", "--device", "cpu", "--json")
        self.assertEqual(k3.files, [r["name"] for r in cli])
        self.assertTrue(np.allclose(k3.probabilities, [r["probabilities"] for r in cli], rtol=0, atol=1e-6))
        self.assertFalse(np.allclose(k3.probabilities, p.probabilities, atol=1e-6), "3 clips read as one")
        with self.assertRaisesRegex(ValueError, "test_clips"):
            m.predict(test, test_clips=65)
        m.close()

    def test_errors(self):
        images = lamina.Model("flatten, dense 10", input_shape=(1, 64, 64), device=DEV)
        for call in (lambda: images.fit(self.videos, verbose=0), lambda: images.evaluate(self.videos)):
            with self.assertRaisesRegex(ValueError, r"folder of videos.*model of clips"):
                call()
        with self.assertRaisesRegex(ValueError, r"reads video files.*takes images"):
            images.predict(os.path.join(self.videos, "test"))
        m = self.model()
        with self.assertRaisesRegex(ValueError, r"frames=8, and the model takes clips of 6 frames"):
            m.fit(self.videos, frames=8, size=(40, 48), verbose=0)
        with self.assertRaisesRegex(ValueError, r"frames=4, and the model takes clips of 6 frames"):
            m.evaluate(self.videos, frames=4, size=(40, 48))
        with self.assertRaisesRegex(ValueError, r"always streamed"):
            m.fit(self.videos, size=(40, 48), stream=False, verbose=0)
        with self.assertRaisesRegex(ValueError, r"frame_stride = 1001 is out of range"):
            m.fit(self.videos, size=(40, 48), frame_stride=1001, verbose=0)
        with self.assertRaisesRegex(ValueError, r"frames and frame_stride are for a video folder"):
            m.fit(os.path.join(self.videos, "train"), frames=6, verbose=0)  # class folders without train/: not one
        with self.assertRaisesRegex(ValueError, r"frame_stride is for predict\(path\)"):
            m.predict(np.zeros((1,) + self.SHAPE, np.uint8), frame_stride=2)
        with self.assertRaisesRegex(ValueError, r"frames and frame_stride are for fit\(DIR\)"):
            m.fit(np.zeros((1,) + self.SHAPE, np.uint8), np.zeros(1, np.uint8), frame_stride=2, verbose=0)
        # the videos' own 64x64 against the model's 40x48, without size=: the shapes named
        with self.assertRaisesRegex(ValueError, r"\(6, 1, 64, 64\).*\(6, 1, 40, 48\)"):
            m.fit(self.videos, verbose=0)
        with self.assertRaises(FileNotFoundError):
            m.predict(os.path.join(self.tmp.name, "nothing"))
        empty = os.path.join(self.tmp.name, "empty")
        os.makedirs(empty, exist_ok=True)
        with open(os.path.join(empty, "notes.txt"), "w") as f:
            f.write("no videos here")
        with self.assertRaisesRegex(ValueError, "holds no video files"):
            m.predict(empty)
        bad = os.path.join(empty, "broken.mp4")
        with open(bad, "w") as f:
            f.write("not a video at all")
        with self.assertRaisesRegex(lamina.LaminaError, "broken.mp4"):
            m.predict(empty)
        images.close(), m.close()

    def test_video_support_as_lamina_info(self):
        info = run_cli("info", "--json")
        self.assertEqual(info["video"], lamina.video_unavailable_reason() == "")


if __name__ == "__main__":
    unittest.main()
