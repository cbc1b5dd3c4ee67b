# ranks_data.sh — sourced by test_ranks.sh and test_ranks_gpu.sh: PY, a Python with NumPy (Debian's on CI,
# else the first on PATH: the H200 machine's /usr/bin/python3 has none), and in "$TMP/d" the set both train
# on: 600 training and 200 test images of 12x12, the class written as a bright column (learnable in a few
# epochs), IDX files. Exits the test (not ok) when either cannot be had.
PY=
for p in /usr/bin/python3 python3; do
  if "$p" -c "import numpy" 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "not ok - no python3 with NumPy here (Debian: apt-get install python3-numpy)"; exit 1; }

"$PY" - "$TMP/d" <<'EOF' || { echo "not ok - making the data set"; exit 1; }
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d)
rng = np.random.default_rng(5)
for part, n in (("train", 600), ("t10k", 200)):
    y = rng.integers(0, 10, n).astype(np.uint8)
    x = rng.integers(0, 90, (n, 12, 12)).astype(np.uint8)
    x[np.arange(n), :, y + 1] += 120
    with open(f"{d}/{part}-images-idx3-ubyte", "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + n.to_bytes(4, "big") + (12).to_bytes(4, "big") * 2 + x.tobytes())
    with open(f"{d}/{part}-labels-idx1-ubyte", "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + n.to_bytes(4, "big") + y.tobytes())
EOF
