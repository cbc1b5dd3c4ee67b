#!/usr/bin/env bash
# bench/clip_variants.sh — lamina alone, variants of the clip nets on one clips set (20k/2k, 16 frames), bf16:
# train/test accuracy per epoch. SET=late (default): five per-frame nets with a pool over time, 10 epochs;
# SET=early: the frames as channels (tcat, bench/nets/clip_early.txt) with other learning rates, BatchNorm
# momenta, without BatchNorm, a per-frame layer first, and on 40k clips, EPOCHS (default 20); SET=augment: the
# early and the best late net (tpool max after the last block) with --augment, EPOCHS (default 20); SET=cosine:
# both with --augment crop:4,flip and a cosine schedule (1 epoch of warm-up), on 20k and 40k clips, EPOCHS
# (default 30). Run on the GPU
# machine after scripts/gpu-clips builds build-gpu (TESTS=0 BENCH=0 scripts/gpu-clips && bash bench/clip_variants.sh).
export LAMINA_DATA_DIR=$PWD/.data
L=build-gpu/lamina
$L data clips --out /tmp/c16 --n 20000 --test 2000 --frames 16 --seed 1 >/dev/null
EP=${EPOCHS:-10}
DATA=/tmp/c16
run() { # name lr spec [train options]
  echo "== $1 (lr $2${4:+, $4}): $3"
  $L train --data $DATA --model "$3" ${4:-} --epochs $EP --batch 100 --opt adam --lr $2 --seed 1 --precision bf16 --no-progress --json 2>&1 |
    python3 -c "import json,sys; r=json.loads([l for l in sys.stdin if l.startswith('{')][-1]); print(' '.join('%.1f/%.1f'%(100*e['train_acc'],100*e['test_acc']) for e in r['epochs']), 'epoch %.3f s'%r['epochs'][-1]['seconds'])"
}
blk() { echo "conv $1 3 pad 1 nobias, bn${2:+ momentum $2}, relu"; }
E="$(blk 32), maxpool 2, $(blk 64), maxpool 2, $(blk 128), maxpool 2, $(blk 128), gap, dense 10"
LM="$(blk 32), maxpool 2, $(blk 64), maxpool 2, $(blk 64), maxpool 2, $(blk 128), tpool max, gap, dense 10"
if [ "${SET:-late}" = cosine ]; then
  EP=${EPOCHS:-30}
  S="--augment crop:4,flip --lr-schedule cosine --warmup 1"
  run early-aug-cosine 2e-3 "tcat, $E" "$S"
  run late-max-aug-cosine 2e-3 "$LM" "$S"
  $L data clips --out /tmp/c16b --n 40000 --test 2000 --frames 16 --seed 1 >/dev/null
  DATA=/tmp/c16b run early-aug-cosine-40k 2e-3 "tcat, $E" "$S"
  DATA=/tmp/c16b run late-max-aug-cosine-40k 2e-3 "$LM" "$S"
  exit 0
fi
if [ "${SET:-late}" = augment ]; then
  EP=${EPOCHS:-20}
  run early-crop4-flip 2e-3 "tcat, $E" "--augment crop:4,flip"
  run early-crop8-flip 2e-3 "tcat, $E" "--augment crop:8,flip"
  run early-flip 2e-3 "tcat, $E" "--augment flip"
  run late-max-crop4-flip 1e-3 "$LM" "--augment crop:4,flip"
  exit 0
fi
if [ "${SET:-late}" = early ]; then
  EP=${EPOCHS:-20}
  run early 2e-3 "tcat, $E"
  run early-lr1e-3 1e-3 "tcat, $E"
  run early-lr5e-4 5e-4 "tcat, $E"
  run early-bn-momentum0.01 2e-3 "tcat, $(blk 32 0.01), maxpool 2, $(blk 64 0.01), maxpool 2, $(blk 128 0.01), maxpool 2, $(blk 128 0.01), gap, dense 10"
  run early-nobn 2e-3 "tcat, conv 32 3 pad 1, relu, maxpool 2, conv 64 3 pad 1, relu, maxpool 2, conv 128 3 pad 1, relu, maxpool 2, conv 128 3 pad 1, relu, gap, dense 10"
  run early-frame-conv-first 1e-3 "$(blk 8), tcat, conv 64 3 pad 1 nobias, bn, relu, maxpool 2, $(blk 64), maxpool 2, $(blk 128), maxpool 2, $(blk 128), gap, dense 10"
  run early-dropout 2e-3 "tcat, $(blk 32), maxpool 2, $(blk 64), maxpool 2, $(blk 128), maxpool 2, $(blk 128), gap, dropout 0.3, dense 10"
  $L data clips --out /tmp/c16b --n 40000 --test 2000 --frames 16 --seed 1 >/dev/null
  DATA=/tmp/c16b run early-40k 2e-3 "tcat, $E"
  exit 0
fi
B="conv 32 3 pad 1 nobias, bn, relu, maxpool 2, conv 64 3 pad 1 nobias, bn, relu, maxpool 2"
A="conv 64 3 pad 1 nobias, bn, relu, maxpool 2, conv 128 3 pad 1 nobias, bn, relu, gap, dense 10"
run clip-lr5e-4 5e-4 "$B, tpool mean, $A"
run nobn 1e-3 "conv 32 3 pad 1, relu, maxpool 2, conv 64 3 pad 1, relu, maxpool 2, tpool mean, conv 64 3 pad 1, relu, maxpool 2, conv 128 3 pad 1, relu, gap, dense 10"
run tmax 1e-3 "$B, tpool max, $A"
run early-mean 1e-3 "tpool mean, $B, $A"
run late-max 1e-3 "$B, conv 64 3 pad 1 nobias, bn, relu, maxpool 2, conv 128 3 pad 1 nobias, bn, relu, tpool max, gap, dense 10"
