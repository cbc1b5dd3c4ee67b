"""lamina.Model beyond one-channel classifiers, on synthetic sets (no data set needed, a few seconds on 2
cores): colour images in either layout train to the same bits, per-channel normalization (default,
"auto", given) reaches predict() as it reaches the trainer, a residual graph with BatchNorm learns, a
small U-Net learns per-pixel masks (255 = ignore) with IoU from the confusion matrix, a BatchNorm
model's checkpoint keeps its running statistics and normalization, and bad input is refused before any
work with a message that says what is wrong."""
import os
import tempfile
import unittest

import numpy as np

import lamina

DEV = "cpu"
RESIDUAL = "conv 8 3 pad 1 nobias, bn, r: relu, conv 8 3 pad 1 nobias, bn, add @r, relu, gap, dense 2"
UNET = ("e: conv 8 3 pad 1, relu, maxpool 2, conv 16 3 pad 1, relu, upsample 2, concat @e, conv 8 3 pad 1, relu, "
        "conv 2 1")


def colour_set(rng, n, hw=8):
    """3 classes of (n, 3, hw, hw) images: the class's channel is the brighter one."""
    y = rng.integers(0, 3, n)
    x = rng.integers(0, 120, (n, 3, hw, hw))
    x[np.arange(n), y] += 100
    return x.astype(np.uint8), y


def stripes_set(rng, n, hw=12):
    """2 classes of noisy (n, hw, hw) images: horizontal stripes (0) or vertical ones (1), at random phases."""
    y = rng.integers(0, 2, n)
    yy, xx = np.mgrid[0:hw, 0:hw]
    ph = rng.integers(0, 4, n)[:, None, None]
    pat = np.where(y[:, None, None] == 0, (yy + ph) // 2 % 2, (xx + ph) // 2 % 2)
    return (pat * 120 + rng.integers(0, 100, (n, hw, hw))).astype(np.uint8), y


def squares_set(rng, n, hw=16):
    """(n, hw, hw) noise with a brighter square in each; masks 1 on the square, 0 elsewhere, and the top
    row 255 (ignored)."""
    x = rng.integers(0, 110, (n, hw, hw))
    mask = np.zeros((n, hw, hw), np.uint8)
    for i in range(n):
        r, c = rng.integers(0, hw - 6, 2)
        s = rng.integers(4, 7)
        mask[i, r:r + s, c:c + s] = 1
    x = (x + 100 * mask).astype(np.uint8)
    mask[:, 0, :] = 255
    return x, mask


class Colour(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.x, cls.y = colour_set(np.random.default_rng(0), 384)
        cls.spec = "conv 8 3 pad 1, relu, gap, dense 3"

    def model(self, seed=4):
        return lamina.Model(self.spec, input_shape=(3, 8, 8), device=DEV, seed=seed)

    def test_layouts_identical(self):
        nhwc = np.ascontiguousarray(self.x.transpose(0, 2, 3, 1))  # (n, 8, 8, 3)
        a, b = self.model(), self.model()
        ha = a.fit(self.x, self.y, epochs=3, batch_size=32, lr=0.01, verbose=0)
        hb = b.fit(nhwc, self.y, epochs=3, batch_size=32, lr=0.01, verbose=0)
        self.assertEqual([e["loss"] for e in ha], [e["loss"] for e in hb])
        self.assertTrue(np.array_equal(a.get_params(), b.get_params()), "NCHW and NHWC trained differently")
        self.assertGreater(a.evaluate(self.x, self.y)["accuracy"], 0.8)  # chance is 1/3
        self.assertEqual(a.evaluate(self.x, self.y), b.evaluate(nhwc, self.y))
        logits = a.predict_logits(self.x)
        self.assertEqual(logits.shape, (384, 3))
        self.assertTrue(np.array_equal(logits, a.predict_logits(nhwc)))
        self.assertTrue(np.array_equal(logits, a.predict_logits(nhwc, layout="nhwc")))
        self.assertTrue(np.array_equal(logits, a.predict_logits(self.x, layout="NCHW")))
        pred = a.predict(nhwc)
        self.assertEqual(float(np.mean(pred == self.y)), a.evaluate(self.x, self.y)["accuracy"])
        a.close()
        b.close()

    def test_divergence_raises(self):
        # a NaN weight (behind the relu: relu lets NaN through, as PyTorch's) makes the loss NaN: fit says so
        # (status "diverged") instead of returning it. (lr=inf did it before; fit() now refuses it up front.)
        m = self.model()
        p = m.get_params()
        p[0] = np.nan
        m.set_params(p)
        with self.assertRaises(lamina.LaminaError) as cm:
            m.fit(self.x, self.y, epochs=2, batch_size=32, optimizer="sgd", lr=0.1, verbose=0)
        self.assertEqual(cm.exception.status_name, "diverged")
        self.assertIn("epoch 1", cm.exception.message)
        m.close()

    def test_normalization(self):
        m = self.model()
        mean, std = m.normalization
        self.assertTrue(np.all(mean == 0.5) and np.all(std == 0.5) and mean.shape == (3,))
        m.fit(self.x, self.y, epochs=1, verbose=0, normalize="auto")
        want = self.x.transpose(1, 0, 2, 3).reshape(3, -1) / 255.0
        mean, std = m.normalization
        np.testing.assert_allclose(mean, want.mean(axis=1), rtol=1e-5)
        np.testing.assert_allclose(std, want.std(axis=1), rtol=1e-5)
        # predict() normalizes each channel as the trainer does, so its argmax is evaluate()'s.
        res = m.evaluate(self.x, self.y, confusion=True)
        pred = m.predict(self.x)
        self.assertEqual(float(np.mean(pred == self.y)), res["accuracy"])
        conf = np.zeros((3, 3), np.int64)
        np.add.at(conf, (self.y, pred), 1)
        self.assertTrue(np.array_equal(conf, res["confusion"]))
        m.fit(self.x, self.y, epochs=1, verbose=0)  # None keeps it
        self.assertTrue(np.array_equal(m.normalization[0], mean))
        m.fit(self.x, self.y, epochs=1, verbose=0, normalize=([0.1, 0.2, 0.3], 0.25))
        np.testing.assert_array_equal(m.normalization[0], np.float32([0.1, 0.2, 0.3]))
        np.testing.assert_array_equal(m.normalization[1], np.float32([0.25] * 3))
        self.assertEqual(float(np.mean(m.predict(self.x) == self.y)), m.evaluate(self.x, self.y)["accuracy"])
        m.set_normalization(0.5, 0.5)
        self.assertTrue(np.all(m.normalization[1] == 0.5))
        m.close()

    def test_label_smoothing(self):
        plain, smooth = self.model(), self.model()
        h0 = plain.fit(self.x, self.y, epochs=1, verbose=0)
        h1 = smooth.fit(self.x, self.y, epochs=1, verbose=0, label_smoothing=0.2)
        self.assertNotEqual(h0[0]["loss"], h1[0]["loss"])
        plain.close()
        smooth.close()

    def test_augment(self):
        # the same seed, the same augmented run; another than the plain one
        runs = []
        for aug in ("crop:2,flip", "crop:2,flip", None):
            m = self.model()
            runs.append(m.fit(self.x, self.y, epochs=1, verbose=0, seed=4, augment=aug)[0]["loss"])
            m.close()
        self.assertEqual(runs[0], runs[1])
        self.assertNotEqual(runs[0], runs[2])
        m = self.model()
        with self.assertRaisesRegex(ValueError, r"augment: 'blur' is not one of crop:P"):
            m.fit(self.x, self.y, verbose=0, augment="crop:2,blur")
        with self.assertRaisesRegex(lamina.LaminaError, "crop padding 200 is not in"):
            m.fit(self.x, self.y, verbose=0, augment="crop:200")
        self.assertEqual(m.epochs_done, 0)
        m.close()

    def test_ambiguous_layout(self):
        # c == h == w: (n, 3, 3, 3) reads either way, so the layout must be said.
        rng = np.random.default_rng(1)
        x = rng.integers(0, 256, (4, 3, 3, 3), dtype=np.uint8)
        m = lamina.Model("flatten, dense 2", input_shape=(3, 3, 3), device=DEV)
        with self.assertRaisesRegex(ValueError, r"both \(n, c, h, w\) and \(n, h, w, c\).*layout='nchw'"):
            m.predict(x)
        a = m.predict_logits(x, layout="nhwc")
        self.assertTrue(np.array_equal(a, m.predict_logits(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), layout="nchw")))
        self.assertFalse(np.array_equal(a, m.predict_logits(x, layout="nchw")))
        m.close()


class Residual(unittest.TestCase):
    def test_learns_with_bn(self):
        x, y = stripes_set(np.random.default_rng(0), 512)
        m = lamina.Model(RESIDUAL, input_shape=(12, 12), device=DEV, seed=1)
        ops = [(n["op"], n["reads"]) for n in m.nodes()]
        self.assertIn(("add", "r"), ops)
        self.assertEqual([n["name"] for n in m.nodes()].count("r"), 1)
        self.assertEqual(m.output_shape, (2, 1, 1))
        self.assertFalse(m.per_pixel)
        # Two bn layers of 8 channels: running means 0, variances 1 before training.
        st0 = m.get_state()
        self.assertTrue(np.array_equal(st0, np.float32(([0] * 8 + [1] * 8) * 2)))
        h = m.fit(x, y, epochs=3, batch_size=32, verbose=0, normalize="auto")
        self.assertLess(h[-1]["loss"], h[0]["loss"])
        res = m.evaluate(x, y)
        self.assertGreater(res["accuracy"], 0.9, res)  # chance is 0.5
        self.assertFalse(np.array_equal(m.get_state(), st0))
        # predict() runs in evaluation mode (running statistics), as evaluate() does; batch size no matter.
        pred = m.predict(x, batch_size=100)
        self.assertEqual(float(np.mean(pred == y)), res["accuracy"])
        np.testing.assert_allclose(m.predict_logits(x[:64], batch_size=7), m.predict_logits(x[:64]), rtol=1e-5,
                                   atol=1e-5)
        m.close()


class Masks(unittest.TestCase):
    def test_unet_learns(self):
        x, mask = squares_set(np.random.default_rng(0), 256)
        m = lamina.Model(UNET, input_shape=(1, 16, 16), device=DEV, seed=1)
        self.assertEqual(m.output_shape, (2, 16, 16))
        self.assertTrue(m.per_pixel)
        h = m.fit(x, mask, epochs=5, batch_size=16, verbose=0, validation_data=(x, mask))
        self.assertIn("val_mean_iou", h[-1])
        res = m.evaluate(x, mask, confusion=True)
        self.assertGreater(res["mean_iou"], 0.7, res)  # ~0.87; predicting all background gives ~0.45
        self.assertEqual(res["mean_iou"], h[-1]["val_mean_iou"])
        # The confusion matrix counts the pixels not ignored; IoU and accuracy come from it.
        conf = res["confusion"]
        keep = mask != 255
        self.assertEqual(int(conf.sum()), int(keep.sum()))
        pred = m.predict(x)
        self.assertEqual(pred.shape, (256, 16, 16))
        mine = np.zeros((2, 2), np.int64)
        np.add.at(mine, (mask[keep], pred[keep]), 1)
        self.assertTrue(np.array_equal(mine, conf))
        self.assertAlmostEqual(res["accuracy"], float(np.mean(pred[keep] == mask[keep])), places=12)
        iou = [conf[k, k] / (conf[k].sum() + conf[:, k].sum() - conf[k, k]) for k in range(2)]
        np.testing.assert_allclose(res["iou"], iou)
        self.assertAlmostEqual(res["mean_iou"], float(np.mean(iou)), places=12)
        self.assertEqual(m.predict_logits(x[:3]).shape, (3, 2, 16, 16))
        # A class nowhere in the labels nor the predictions has IoU NaN and stays out of the mean.
        everywhere0 = np.zeros_like(mask)
        m.set_params(np.zeros(m.param_count, np.float32))  # all logits 0: argmax picks class 0
        r0 = m.evaluate(x, everywhere0)
        self.assertEqual(r0["iou"][0], 1.0)
        self.assertTrue(np.isnan(r0["iou"][1]))
        self.assertEqual(r0["mean_iou"], 1.0)
        m.close()


class Checkpoint(unittest.TestCase):
    def test_bn_round_trip(self):
        x, y = colour_set(np.random.default_rng(2), 128, hw=6)
        spec = RESIDUAL.replace("dense 2", "dense 3")
        m = lamina.Model(spec, input_shape=(3, 6, 6), device=DEV, seed=3)
        m.fit(x, y, epochs=1, batch_size=16, verbose=0, normalize=([0.4, 0.5, 0.6], [0.2, 0.3, 0.4]),
              label_smoothing=0.1)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bn.lamina")
            m.save(path)
            loaded = lamina.load(path, device=DEV)
        self.assertEqual(loaded.spec, m.spec)
        self.assertEqual(loaded.input_shape, (3, 6, 6))
        self.assertTrue(np.array_equal(loaded.get_params(), m.get_params()))
        self.assertTrue(np.array_equal(loaded.get_state(), m.get_state()))
        self.assertEqual(loaded.get_state().size, 32)
        for a, b in zip(loaded.normalization, m.normalization):
            self.assertTrue(np.array_equal(a, b))
        self.assertTrue(np.array_equal(loaded.predict_logits(x), m.predict_logits(x)))
        self.assertEqual(loaded.evaluate(x, y), m.evaluate(x, y))
        # The running statistics matter: resetting them changes the outputs.
        loaded.set_state(np.float32(([0] * 8 + [1] * 8) * 2))
        self.assertFalse(np.array_equal(loaded.predict_logits(x), m.predict_logits(x)))
        loaded.close()
        m.close()


class BadInput(unittest.TestCase):
    """Each is refused before any work: the model is left as it was."""

    @classmethod
    def setUpClass(cls):
        cls.colour = lamina.Model("conv 4 3 pad 1, relu, gap, dense 3", input_shape=(3, 8, 8), device=DEV)
        cls.unet = lamina.Model(UNET, input_shape=(1, 16, 16), device=DEV)

    @classmethod
    def tearDownClass(cls):
        cls.colour.close()
        cls.unet.close()

    def test_images(self):
        m, y = self.colour, np.zeros(4, np.int64)
        x = np.zeros((4, 3, 8, 8), np.uint8)
        with self.assertRaisesRegex(TypeError, "uint8 pixels.*not float32.*raw pixels"):
            m.fit(x.astype(np.float32), y, verbose=0)
        with self.assertRaisesRegex(ValueError, r"shape \(4, 8, 8, 4\); this model takes 3x8x8 images: "
                                                r"\(n, 3, 8, 8\) or \(n, 8, 8, 3\)"):
            m.predict(np.zeros((4, 8, 8, 4), np.uint8))
        with self.assertRaisesRegex(ValueError, r"shape \(4, 8, 8\); this model takes 3x8x8"):
            m.evaluate(np.zeros((4, 8, 8), np.uint8), y)
        with self.assertRaisesRegex(ValueError, r"not layout='nhwc'.*it is 'nchw': pass layout='nchw'"):
            m.fit(x, y, layout="nhwc", verbose=0)
        with self.assertRaisesRegex(ValueError, "layout must be 'nchw', 'nhwc' or None"):
            m.predict(x, layout="chw")

    def test_labels(self):
        m, x = self.colour, np.zeros((4, 3, 8, 8), np.uint8)
        with self.assertRaisesRegex(ValueError, r"y\[1\] = 3 is not a class of this model, which has 3 outputs"):
            m.fit(x, np.array([0, 3, 1, 2]), verbose=0)
        with self.assertRaisesRegex(ValueError, r"one label per image.*cannot learn masks"):
            m.evaluate(x, np.zeros((4, 8, 8), np.uint8))

    def test_masks(self):
        m, x = self.unet, np.zeros((4, 16, 16), np.uint8)
        ok = np.zeros((4, 16, 16), np.uint8)
        ok[:, 0] = 255  # ignore is not a class, and is fine
        before = m.get_params()
        with self.assertRaisesRegex(ValueError, r"y\[2, 3, 5\] = 2 is not a class of this model, which has 2 outputs "
                                                r"per pixel \(labels 0 to 1, 255 = ignore\)"):
            bad = ok.copy()
            bad[2, 3, 5] = 2
            m.fit(x, bad, verbose=0)
        with self.assertRaisesRegex(ValueError, r"y\[0, 1, 1\] = -1"):
            bad = ok.astype(np.int64)
            bad[0, 1, 1] = -1
            m.evaluate(x, bad)
        with self.assertRaisesRegex(ValueError, r"shape \(4, 8, 8\); this model labels every pixel of a 16x16 output, "
                                                r"so y must be masks of shape \(4, 16, 16\)"):
            m.fit(x, ok[:, :8, :8], verbose=0)
        with self.assertRaisesRegex(ValueError, r"shape \(4,\); this model labels every pixel"):
            m.evaluate(x, np.zeros(4, np.int64))
        with self.assertRaisesRegex(ValueError, "4 images but y has 3 masks"):
            m.fit(x, ok[:3], verbose=0)
        with self.assertRaisesRegex(TypeError, "integer class labels \\(masks\\), not bool"):
            m.fit(x, ok == 1, verbose=0)
        with self.assertRaisesRegex(ValueError, "at most 255"):
            lamina.Model("conv 256 1", input_shape=(1, 4, 4), device=DEV).evaluate(np.zeros((1, 4, 4), np.uint8),
                                                                                  np.zeros((1, 4, 4), np.uint8))
        self.assertEqual(m.epochs_done, 0)
        self.assertTrue(np.array_equal(m.get_params(), before))
        self.assertEqual(m.evaluate(x, ok)["accuracy"], m.evaluate(x, ok)["accuracy"])  # 255 accepted

    def test_options(self):
        m, x, y = self.colour, np.zeros((4, 3, 8, 8), np.uint8), np.zeros(4, np.int64)
        norm = m.normalization
        with self.assertRaisesRegex(ValueError, "std must be > 0"):
            m.fit(x, y, verbose=0, normalize=(0.5, [0.5, 0, 0.5]))
        with self.assertRaisesRegex(ValueError, "mean must be one number or 3"):
            m.fit(x, y, verbose=0, normalize=([0.5, 0.5], 0.5))
        with self.assertRaisesRegex(ValueError, "normalize must be None.*'auto'"):
            m.fit(x, y, verbose=0, normalize="imagenet")
        with self.assertRaisesRegex(ValueError, r"label_smoothing must be a number in \[0, 1\)"):
            m.fit(x, y, verbose=0, label_smoothing=1.0)
        with self.assertRaisesRegex(ValueError, "std must be > 0"):
            m.set_normalization(0.5, -1)
        with self.assertRaisesRegex(ValueError, "state has 3 values but the model's running statistics have 0"):
            m.set_state([1, 2, 3])
        self.assertEqual(m.epochs_done, 0)
        self.assertTrue(np.array_equal(m.normalization[1], norm[1]))


if __name__ == "__main__":
    unittest.main()
