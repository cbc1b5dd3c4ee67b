#!/usr/bin/env bash
# test_ranks.sh — `lamina train` over 2 CPU ranks (mpirun -np 2) against 1 process at the same global batch.
#
# A learnable synthetic set (600 training and 200 test images of 12x12, the class written as a bright
# column) is trained for 3 epochs with SGD (whose step, unlike Adam's, scales with the gradient: a wrong
# weighting of the ranks' shares shows) by one process (--threads 1) and by 2 ranks; the claims checked:
#   - the epochs' training losses agree within a relative 1e-5 (the ranks sum their batch shares' gradients
#     in float64, one process sums them in float32 inside its kernels: the order of the sums differs,
#     nothing else) and the test accuracies (each rank evaluates its share of the test set) within 1 point, at batch 64 and at batch 299 (whose last
#     global batch has 1 image: one rank steps with none of its own);
#   - the 2-rank run's checkpoint (written by rank 0 alone, no temporary file left) resumes in 1 process
#     to the uninterrupted run's losses (the same tolerance);
#   - with --sync-bn a net with BatchNorm trains over 2 ranks as in 1 process (same tolerances);
#   - a batch too small to share and --stream with ranks are errors that stop every rank (exit 1).
# Usage: test_ranks.sh path/to/lamina path/to/mpiexec.
set -u
LAMINA=$1
MPIEXEC=$2
# Under scripts/sanitize's leak checking, the ranks' runs leave it out: OpenMPI keeps memory from
# MPI_Init to exit (in libmpi and the plugins it unloads), which is not lamina's; the single-process runs
# here, without MPI, keep it.
MPI=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$MPIEXEC" --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
unset LAMINA_DEVICE LAMINA_THREADS OMP_NUM_THREADS
export LAMINA_DEVICE=cpu # the CPU backend, here as on CI
SPEC="conv 4 3, relu, maxpool 2, flatten, dense 10"
. "$(dirname "$0")/ranks_data.sh" # TMP, ok / not_ok, PY, the set in $TMP/d, resume_check

# losses FILE: the epochs' training losses and the last test accuracy, one per line
losses() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); [print(e['train_loss']) for e in j['epochs']]; print(j['test_acc'])" "$1"; }
# same A B: every loss within a relative 1e-5, the accuracy within 0.01
same() {
  "$PY" - "$1" "$2" <<'EOF'
import sys
a = [float(v) for v in open(sys.argv[1])]
b = [float(v) for v in open(sys.argv[2])]
if len(a) != len(b) or len(a) < 2:
    sys.exit(f"{len(a)} against {len(b)} numbers")
for i, (x, y) in enumerate(zip(a[:-1], b[:-1])):
    if not abs(x - y) <= 1e-5 * abs(x):
        sys.exit(f"epoch {i + 1}: loss {y!r}, one process {x!r}")
if not abs(a[-1] - b[-1]) <= 0.01:
    sys.exit(f"test accuracy {b[-1]}, one process {a[-1]}")
print("losses " + ", ".join(f"{y:.9g}" for y in b[:-1]) + f" (one process: " + ", ".join(f"{x:.9g}" for x in a[:-1]) + ")")
EOF
}

for B in 64 299; do
  args=(train --data "$TMP/d" --model "$SPEC" --epochs 3 --batch "$B" --opt sgd --lr 0.05 --json)
  if "$LAMINA" "${args[@]}" --threads 1 >"$TMP/one.json" 2>"$TMP/err" && losses "$TMP/one.json" >"$TMP/one" &&
     "${MPI[@]}" "$LAMINA" "${args[@]}" --save "$TMP/two.ckpt" >"$TMP/two.json" 2>"$TMP/err" &&
     losses "$TMP/two.json" >"$TMP/two" && why=$(same "$TMP/one" "$TMP/two" 2>&1); then
    ok "batch $B: 2 ranks train as 1 process: $why"
  else
    not_ok "batch $B: 2 ranks against 1 process" "${why:-a run failed}"
  fi
  why=
done

# BatchNorm with --sync-bn: the 2 ranks' statistics are the global batch's, so they train as one process.
BN="conv 4 3, bn, relu, maxpool 2, flatten, dense 10"
args=(train --data "$TMP/d" --model "$BN" --epochs 3 --batch 64 --opt sgd --lr 0.05 --json)
if "$LAMINA" "${args[@]}" --threads 1 >"$TMP/one.json" 2>"$TMP/err" && losses "$TMP/one.json" >"$TMP/one" &&
   "${MPI[@]}" "$LAMINA" "${args[@]}" --sync-bn >"$TMP/two.json" 2>"$TMP/err" && losses "$TMP/two.json" >"$TMP/two" &&
   why=$(same "$TMP/one" "$TMP/two" 2>&1); then
  ok "--sync-bn: 2 CPU ranks with BatchNorm train as 1 process: $why"
else
  not_ok "--sync-bn over 2 CPU ranks" "${why:-a run failed}"
fi
why=

# One epoch over 2 ranks, saved; resumed in one process for epochs 2 and 3.
launch=("${MPI[@]}" "$LAMINA" train --data "$TMP/d" --model "$SPEC" --epochs 1 --batch 64 --opt sgd --lr 0.05)
resume_check "2 ranks'" 1e-5 --threads 1

"${MPI[@]}" "$LAMINA" train --data "$TMP/d" --model "$SPEC" --epochs 1 --batch 1 >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "2 ranks share a batch of 1" "$TMP/err"; then ok "a batch of 1 over 2 ranks: exit 1, says why"
else not_ok "a batch of 1 over 2 ranks" "want exit 1 and 'share a batch of 1', got exit $rc"; fi

"${MPI[@]}" "$LAMINA" train --data "$TMP/d" --model "$SPEC" --epochs 1 --stream >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "do not stream" "$TMP/err"; then ok "--stream over 2 ranks: exit 1, says why"
else not_ok "--stream over 2 ranks" "want exit 1 and 'do not stream', got exit $rc"; fi

echo "# $passed passed, $failed failed"
[ "$failed" -eq 0 ]
