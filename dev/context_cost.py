"""What a CUDA context costs a fresh process, and whether the process's memory makes it dearer (issue #15:
the first call's floor). Each case is a new interpreter that first holds MB megabytes of NumPy memory
(written, as an application's arrays are), then times cudaFree(0) through the runtime that lamina loads.
With strace on the machine, also counts the system calls the context makes (a fork or clone there would
copy the page tables of everything the process holds).
Run: python3 dev/context_cost.py [--libcudart PATH]"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys

CHILD = r"""
import ctypes, sys, time
import numpy as np
mb, lib = int(sys.argv[1]), sys.argv[2]
held = np.ones(mb * 262144, dtype=np.float32) if mb else None  # 4 bytes each, every page written
rt = ctypes.CDLL(lib)
t0 = time.perf_counter()
rc = rt.cudaFree(ctypes.c_void_p(0))
t1 = time.perf_counter()
print('{"ms": %.1f, "rc": %d}' % ((t1 - t0) * 1e3, rc))
"""


def find_cudart():
    for pat in ("/usr/local/cuda/lib64/libcudart.so*", "/usr/local/cuda/targets/*/lib/libcudart.so*",
                "/usr/lib/x86_64-linux-gnu/libcudart.so*"):
        got = sorted(glob.glob(pat))
        if got:
            return got[0]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--libcudart", default=find_cudart())
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    if not a.libcudart:
        print("context_cost: no libcudart found")
        return 1
    print(f"runtime: {a.libcudart}")
    for mb in (0, 1200, 4800):
        ms = []
        for _ in range(a.repeat):
            out = subprocess.run([sys.executable, "-c", CHILD, str(mb), a.libcudart], capture_output=True, text=True)
            if out.returncode:
                print(out.stderr[-400:])
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            ms.append(r["ms"])
        print(f"holding {mb:5d} MB: cudaFree(0) median {statistics.median(ms):7.1f} ms  (runs {', '.join(f'{m:.0f}' for m in ms)})")
    st = shutil.which("strace")
    if st:
        for mb in (0, 1200):
            out = subprocess.run([st, "-f", "-c", "-o", "/dev/stderr", sys.executable, "-c", CHILD, str(mb), a.libcudart],
                                 capture_output=True, text=True)
            lines = [l for l in out.stderr.splitlines() if l.strip()][:16]
            print(f"strace -c, holding {mb} MB (top system calls by time):")
            print("\n".join("  " + l for l in lines))
    else:
        print("no strace on this machine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
