"""lamina.Model of clips (input_shape (frames, channels, height, width)) on synthetic clips: its logits are the
per-frame layers' features of every frame, pooled over the frames and put through the dense layer (here in float64,
from an image Model of the per-frame layers with the same parameters); tcat's are the image Model of frames*channels
channels on the same bytes; both layouts of x give the same logits; a clip model learns which way a dot moves (one
frame cannot tell), keeps its frames through save and load, and refuses clips of the wrong length."""
import os
import tempfile
import unittest

import numpy as np

import lamina

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


if __name__ == "__main__":
    unittest.main()
