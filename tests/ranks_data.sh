# ranks_data.sh — sourced by test_ranks.sh and test_ranks_gpu.sh: TMP (removed at exit), ok / not_ok (they
# count into passed / failed; not_ok shows the head of "$TMP/err"), PY, a Python with NumPy (Debian's on CI,
# else the first on PATH: the H200 machine's /usr/bin/python3 has none), and in "$TMP/d" the set both train
# on: 600 training and 200 test images of 12x12, the class written as a bright column (learnable in a few
# epochs), IDX files. Exits the test (not ok) when either cannot be had. And resume_check, the checkpoint test
# both make.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() { echo "not ok - $1: $2"; echo "#   stderr: $(head -c 1500 "$TMP/err" | tr '\n' ' ')"; failed=$((failed + 1)); }

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

# resume_check WHO TOL [ARG...]: "${launch[@]}" (the caller's: ranks training 1 epoch of $SPEC, SGD at batch 64)
# saves rank 0's checkpoint; resumed in one process for epochs 2 and 3 (with ARGs), its losses must equal an
# uninterrupted one-process run's within a relative TOL, and no temporary file may be left. Reports through the
# caller's ok / not_ok.
resume_check() {
  local who=$1 tol=$2 rc left
  shift 2
  "${launch[@]}" --save "$TMP/e1.ckpt" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  left=$(find "$TMP" -name '*.tmp*' | wc -l)
  if [ "$rc" -eq 0 ] && [ "$left" -eq 0 ] &&
     "$LAMINA" train --data "$TMP/d" --resume "$TMP/e1.ckpt" --epochs 3 "$@" --json >"$TMP/res.json" 2>"$TMP/err" &&
     "$LAMINA" train --data "$TMP/d" --model "$SPEC" --epochs 3 --batch 64 --opt sgd --lr 0.05 "$@" --json \
       >"$TMP/one.json" 2>>"$TMP/err" &&
     "$PY" -c "
import json, sys
r = [e['train_loss'] for e in json.load(open(sys.argv[1]))['epochs']]
o = [e['train_loss'] for e in json.load(open(sys.argv[2]))['epochs']][1:]
tol = float(sys.argv[3])
sys.exit(0 if len(r) == 2 and all(abs(x - y) <= tol * abs(y) for x, y in zip(r, o)) else f'resumed {r}, uninterrupted {o}')
" "$TMP/res.json" "$TMP/one.json" "$tol" 2>"$TMP/why"; then
    ok "the $who checkpoint resumes in 1 process to the uninterrupted losses; no temporary file left"
  else
    not_ok "the $who checkpoint resumed in 1 process" "$(cat "$TMP/why" 2>/dev/null) (exit $rc, temporary files: $left)"
  fi
}
