#!/usr/bin/env bash
# test_ranks_gpu.sh — `lamina train` over 2 GPU ranks (NCCL) against 1 process on one GPU, at the same
# global batch, started every way: --gpus 2, mpirun -np 2 (where MPI is built in), a torchrun-style
# environment (two processes given RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and torchrun
# itself (where installed: its agent holds MASTER_PORT, and rank 0 serves on the port above).
# Skips (77) without a CUDA device. On a machine of one GPU the two ranks share it (LAMINA_SHARE_GPU=1:
# NCCL then sees two hosts and sums over sockets), which tests everything but the speed.
#
# The set is ranks_data.sh's (600 + 200 learnable 12x12 images); 3 epochs of SGD with a conv (cuDNN,
# NHWC) and the step in a CUDA graph. Claims:
#   - the epochs' training losses agree with one process within a relative 1e-4 (each rank's gradient is
#     the mean over its share, weighted by share / batch in NCCL's pre-multiplied sum, in float32; one
#     process sums the whole batch inside its kernels: the order of the sums differs, nothing else), the
#     test accuracy within 1 point, at batch 64 and at 301 (shares 151/150, then 150/149: unequal weights);
#   - the same with the gradients summed in buckets of 1 KB that start during backward (--bucket-mb 0.001);
#   - the ranks' step is replayed from a CUDA graph (the JSON's "graph");
#   - every epoch the trainer compares the replicas' parameters (a checksum over the ranks) and fails if
#     they differ: a run that ends 0 had identical replicas after every epoch;
#   - with --sync-bn a net with BatchNorm trains over 2 ranks as in 1 process (fp32 1e-4, bf16 3e-2), and
#     without it does not (each rank's own statistics);
#   - rank 0's checkpoint (no temporary file left) resumes in 1 process to the uninterrupted losses.
# Usage: test_ranks_gpu.sh path/to/lamina [path/to/mpiexec].
set -u
LAMINA=$1
MPIEXEC=${2:-}
"$LAMINA" hidden --device cuda --n 10 --repeat 1 >/dev/null 2>&1 || { echo "skip: no CUDA device"; exit 77; }
unset LAMINA_DEVICE LAMINA_CUDA_DEVICE WORLD_SIZE RANK LOCAL_RANK MASTER_ADDR MASTER_PORT LAMINA_PORT
export LAMINA_DEVICE=cuda
if command -v timeout >/dev/null 2>&1; then LIMIT=(timeout 300); else LIMIT=(); fi
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${GPUS:-0}" -ge 2 ] || export LAMINA_SHARE_GPU=1
SPEC="conv 4 3, relu, maxpool 2, flatten, dense 10"
# Its four parts, as a C test's tests: LAMINA_TEST_LIST prints their names, LAMINA_TEST_FILTER (a glob) runs
# the matching ones (scripts/gpu-sanitize runs them apart, at once).
PARTS=(test_ranks_launchers test_ranks_sync_bn_fp32 test_ranks_sync_bn_bf16 test_ranks_resume)
if [ -n "${LAMINA_TEST_LIST:-}" ]; then printf '%s\n' "${PARTS[@]}"; exit 0; fi
part() { [ -z "${LAMINA_TEST_FILTER:-}" ] || [[ "$1" == ${LAMINA_TEST_FILTER} ]]; }
. "$(dirname "$0")/ranks_data.sh" # TMP, ok / not_ok, PY, the set in $TMP/d, resume_check

# same ONE.json TWO.json: losses within a relative 1e-4, accuracy within 0.01, TWO's step in a graph
same() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
la = [e["train_loss"] for e in a["epochs"]]
lb = [e["train_loss"] for e in b["epochs"]]
if len(la) != len(lb) or len(la) < 2:
    sys.exit(f"{len(lb)} epochs against {len(la)}")
for i, (x, y) in enumerate(zip(la, lb)):
    if not abs(x - y) <= 1e-4 * abs(x):
        sys.exit(f"epoch {i + 1}: loss {y!r}, one process {x!r}")
if not abs(a["test_acc"] - b["test_acc"]) <= 0.01:
    sys.exit(f"test accuracy {b['test_acc']}, one process {a['test_acc']}")
if not b.get("graph"):
    sys.exit("the ranks' step was not replayed from a graph")
print("losses " + ", ".join(f"{y:.7g}" for y in lb) + " (one process: " + ", ".join(f"{x:.7g}" for x in la) + ")")
EOF
}

free_port() { "$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }

# env_ranks ARGS...: two processes in a torchrun-style environment; rank 0's stdout in $TMP/two.json
env_ranks() {
  local port pids=() r rc=0
  port=$(free_port)
  for r in 0 1; do
    WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "${LIMIT[@]}" "$LAMINA" "$@" >"$TMP/env$r.out" 2>"$TMP/env$r.err" &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || rc=$?; done
  cat "$TMP/env0.out" >"$TMP/two.json"
  cat "$TMP/env0.err" "$TMP/env1.err" >"$TMP/err"
  return $rc
}

MPI=()
if [ -n "$MPIEXEC" ]; then
  MPI=("$MPIEXEC" --oversubscribe -np 2) # the ranks here inherit this environment (LAMINA_*, NCCL_*)
  [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
fi

# LAMINA_RANKS_BATCHES and LAMINA_RANKS_HOW narrow the runs (scripts/gpu-sanitize: the launchers differ on the
# host only, so under compute-sanitizer one launcher and one batch cover the device code).
for B in ${LAMINA_RANKS_BATCHES:-64 301}; do
  part test_ranks_launchers || break
  args=(train --data "$TMP/d" --model "$SPEC" --epochs 3 --batch "$B" --opt sgd --lr 0.05 --json --no-progress)
  if ! "${LIMIT[@]}" "$LAMINA" "${args[@]}" >"$TMP/one.json" 2>"$TMP/err"; then
    not_ok "batch $B: one process" "it failed"
    continue
  fi
  for how in ${LAMINA_RANKS_HOW:-gpus mpirun env torchrun buckets}; do
    why=
    case $how in
      gpus) "${LIMIT[@]}" "$LAMINA" "${args[@]}" --gpus 2 >"$TMP/two.json" 2>"$TMP/err" ;;
      mpirun)
        [ ${#MPI[@]} -gt 0 ] || { echo "# mpirun: lamina was built without MPI here; not run"; continue; }
        "${LIMIT[@]}" "${MPI[@]}" "$LAMINA" "${args[@]}" >"$TMP/two.json" 2>"$TMP/err" ;;
      env) env_ranks "${args[@]}" ;;
      buckets) "${LIMIT[@]}" "$LAMINA" "${args[@]}" --gpus 2 --bucket-mb 0.001 >"$TMP/two.json" 2>"$TMP/err" ;;
      torchrun)
        command -v torchrun >/dev/null || { echo "# torchrun: not installed here; not run"; continue; }
        "${LIMIT[@]}" torchrun --nproc-per-node 2 --no-python "$LAMINA" "${args[@]}" >"$TMP/two.json" 2>"$TMP/err" ;;
    esac
    rc=$?
    if [ "$rc" -eq 0 ] && why=$(same "$TMP/one.json" "$TMP/two.json" 2>&1); then
      ok "batch $B, 2 GPU ranks by $how: train as 1 process, replicas identical every epoch: $why"
    else
      not_ok "batch $B, 2 GPU ranks by $how" "${why:-exit $rc}"
    fi
  done
done

# BatchNorm at batch 8 (4 images a rank): with --sync-bn the 2 ranks train as one process (fp32 within
# 1e-4; bf16, whose activations are rounded after statistics computed another way, within 3e-2); in fp32,
# with each rank's own statistics they do not (more than 1e-3 apart somewhere: the check can tell).
BN="conv 8 3, bn, relu, maxpool 2, flatten, dense 10"
for P in fp32 bf16; do
  part "test_ranks_sync_bn_$P" || continue
  tol=1e-4; [ "$P" = bf16 ] && tol=3e-2
  args=(train --data "$TMP/d" --model "$BN" --epochs 3 --batch 8 --opt sgd --lr 0.05 --precision "$P" --json --no-progress)
  if "${LIMIT[@]}" "$LAMINA" "${args[@]}" >"$TMP/one.json" 2>"$TMP/err" &&
     "${LIMIT[@]}" "$LAMINA" "${args[@]}" --gpus 2 --sync-bn >"$TMP/sync.json" 2>>"$TMP/err" &&
     "${LIMIT[@]}" "$LAMINA" "${args[@]}" --gpus 2 >"$TMP/local.json" 2>>"$TMP/err" &&
     why=$("$PY" - "$TMP/one.json" "$TMP/sync.json" "$TMP/local.json" "$tol" "$P" 2>&1 <<'EOF'
import json, sys
one, sync, local = ([e["train_loss"] for e in json.load(open(f))["epochs"]] for f in sys.argv[1:4])
tol = float(sys.argv[4])
ds = max(abs(a - b) / a for a, b in zip(one, sync))
dl = max(abs(a - b) / a for a, b in zip(one, local))
if not ds <= tol:
    sys.exit(f"--sync-bn {sync} against one process {one} (relative {ds:.2g})")
if sys.argv[5] == "fp32" and not dl > 1e-3:
    sys.exit(f"each rank's own statistics came within {dl:.2g} of one process: the check cannot tell")
print(f"sync BN within {ds:.2g} of one process, each rank's own statistics {dl:.2g} off")
EOF
); then
    ok "$P: --sync-bn over 2 GPU ranks trains as 1 process: $why"
  else
    not_ok "$P: --sync-bn over 2 GPU ranks" "${why:-a run failed}"
  fi
  why=
done

# Rank 0's checkpoint after 1 epoch, resumed in one process for epochs 2 and 3.
if part test_ranks_resume; then
  launch=("${LIMIT[@]}" "$LAMINA" train --data "$TMP/d" --model "$SPEC" --epochs 1 --batch 64 --opt sgd --lr 0.05 --gpus 2)
  resume_check "GPU ranks'" 1e-4
fi

[ $((passed + failed)) -gt 0 ] || { : >"$TMP/err"; not_ok "no part ran" "LAMINA_TEST_FILTER='${LAMINA_TEST_FILTER:-}' matches none of ${PARTS[*]}"; }
echo "# $passed passed, $failed failed"
[ "$failed" -eq 0 ]
