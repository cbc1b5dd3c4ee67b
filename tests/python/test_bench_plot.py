"""The plot of `lamina bench transfer --plot`, read back through matplotlib's objects: x ticks at the
batches measured, a line style and marker per dtype, and "host copy" labels (never host-to-device
wording) on the CPU backend. The command runs the script through --python; a wrapper Python keeps a
copy of it, which is run again here on the command's CSV (and on a GPU-style CSV) to look at its axes."""
import contextlib
import csv
import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

from helpers import cli_path

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None

BATCHES = (32, 64, 128, 4096)


@unittest.skipIf(plt is None, "no matplotlib")
@unittest.skipUnless(os.path.isfile(cli_path()), f"no lamina command at {cli_path()}")
class TransferPlot(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lamina-plot-")
        cls.script = os.path.join(cls.tmp, "plot_script.py")
        wrapper = os.path.join(cls.tmp, "python")
        with open(wrapper, "w") as f:  # `python - CSV STEM` reads the script from stdin: keep a copy
            f.write(f'#!/bin/sh\nif [ "$1" = "-" ]; then tee "{cls.script}" | exec "{sys.executable}" "$@"; '
                    f'else exec "{sys.executable}" "$@"; fi\n')
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
        cls.csv = os.path.join(cls.tmp, "t.csv")
        cls.proc = subprocess.run(
            [cli_path(), "bench", "transfer", "--device", "cpu", "--batch", ",".join(map(str, BATCHES)), "--reps", "3",
             "--warmup", "0", "--csv", cls.csv, "--plot", os.path.join(cls.tmp, "plot.png"), "--python", wrapper],
            capture_output=True, text=True, timeout=300)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def draw(self, csv_path):
        """Runs the captured script on csv_path; its Axes."""
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        with open(self.script) as f:
            code = f.read()
        ns, argv = {"__name__": "__main__"}, sys.argv
        sys.argv = ["-", csv_path, os.path.join(self.tmp, "again")]
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # its "wrote ..." line
                exec(compile(code, "plot_script", "exec"), ns)
        finally:
            sys.argv = argv
        self.addCleanup(plt.close, ns["fig"])
        ns["fig"].canvas.draw()
        return ns["ax"]

    def test_png_written(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        with open(os.path.join(self.tmp, "plot.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(os.path.join(self.tmp, "plot.svg")), 0)

    def test_ticks_at_batches(self):
        ax = self.draw(self.csv)
        self.assertEqual(list(ax.get_xticks()), list(BATCHES))
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], [str(b) for b in BATCHES])
        self.assertEqual(list(ax.xaxis.get_minorticklocs()), [])  # no unlabelled log ticks between them

    def test_style_per_dtype(self):
        ax = self.draw(self.csv)
        styles = {}  # dtype -> {(linestyle, marker)} of its lines
        for line in ax.get_lines():
            dtype = line.get_label().split()[-1]  # every CPU label ends in its dtype
            styles.setdefault(dtype, set()).add((str(line.get_linestyle()), line.get_marker()))
        self.assertEqual(set(styles), {"u8", "i8", "f16", "f32", "bf16"})
        for dtype, s in styles.items():
            self.assertEqual(len(s), 1, f"{dtype} lines drawn in several styles: {s}")
        self.assertEqual(len({next(iter(s)) for s in styles.values()}), len(styles), f"dtypes share a style: {styles}")
        self.assertEqual(len({m for s in styles.values() for _, m in s}), len(styles), "dtypes share a marker")

    def test_cpu_labels_say_host_copy(self):
        ax = self.draw(self.csv)
        labels = [line.get_label() for line in ax.get_lines()] + [ax.get_ylabel(), ax.get_title()]
        for text in labels[:-2]:
            self.assertIn("host copy", text)
        self.assertIn("host copy", ax.get_ylabel())
        for text in labels:
            for word in ("H2D", "PCIe", "host to device", "GPU normalize", "pinned"):
                self.assertNotIn(word, text)

    def test_gpu_csv_keeps_device_labels(self):
        # The same measurements as a CUDA run would write them (pinned rows too): host-to-device wording,
        # filled markers for pinned memory and hollow for pageable, the style still by dtype.
        gpu = os.path.join(self.tmp, "gpu.csv")
        with open(self.csv) as f, open(gpu, "w", newline="") as g:
            rd = csv.DictReader(f)
            wr = csv.DictWriter(g, rd.fieldnames)
            wr.writeheader()
            for r in rd:
                for mem in ("pageable", "pinned"):
                    label = r["method_label"].replace("pageable", mem)
                    wr.writerow(dict(r, device="cuda:0 NVIDIA H200", memory=mem, method_label=label, copies_on_host="0"))
        ax = self.draw(gpu)
        self.assertEqual(ax.get_ylabel(), "host to device, median (us)")
        labels = [line.get_label() for line in ax.get_lines()]
        self.assertIn("copy u8 pinned", labels)
        self.assertFalse(any("host copy" in t for t in labels))
        for line in ax.get_lines():
            filled = line.get_markerfacecolor() != "none"
            self.assertEqual(filled, "pinned" in line.get_label(), line.get_label())
        self.assertEqual(list(ax.get_xticks()), list(BATCHES))


if __name__ == "__main__":
    unittest.main()
