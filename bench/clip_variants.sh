#!/usr/bin/env bash
# bench/clip_variants.sh — lamina alone, five per-frame nets with a pool over time on one clips set (20k/2k, 16
# frames), bf16, 10 epochs: train/test accuracy per epoch. Run on the GPU machine after scripts/gpu-clips builds
# build-gpu (TESTS=0 BENCH=0 scripts/gpu-clips && bash bench/clip_variants.sh).
export LAMINA_DATA_DIR=$PWD/.data
L=build-gpu/lamina
$L data clips --out /tmp/c16 --n 20000 --test 2000 --frames 16 --seed 1 >/dev/null
run() { # name lr spec
  echo "== $1 (lr $2): $3"
  $L train --data /tmp/c16 --model "$3" --epochs 10 --batch 100 --opt adam --lr $2 --seed 1 --precision bf16 --no-progress --json 2>&1 |
    python3 -c "import json,sys; r=json.loads([l for l in sys.stdin if l.startswith('{')][-1]); print(' '.join('%.1f/%.1f'%(100*e['train_acc'],100*e['test_acc']) for e in r['epochs']), 'epoch %.3f s'%r['epochs'][-1]['seconds'])"
}
B="conv 32 3 pad 1 nobias, bn, relu, maxpool 2, conv 64 3 pad 1 nobias, bn, relu, maxpool 2"
A="conv 64 3 pad 1 nobias, bn, relu, maxpool 2, conv 128 3 pad 1 nobias, bn, relu, gap, dense 10"
run clip-lr5e-4 5e-4 "$B, tpool mean, $A"
run nobn 1e-3 "conv 32 3 pad 1, relu, maxpool 2, conv 64 3 pad 1, relu, maxpool 2, tpool mean, conv 64 3 pad 1, relu, maxpool 2, conv 128 3 pad 1, relu, gap, dense 10"
run tmax 1e-3 "$B, tpool max, $A"
run early-mean 1e-3 "tpool mean, $B, $A"
run late-max 1e-3 "$B, conv 64 3 pad 1 nobias, bn, relu, maxpool 2, conv 128 3 pad 1 nobias, bn, relu, tpool max, gap, dense 10"
