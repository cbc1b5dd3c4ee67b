#!/usr/bin/env python3
"""ncu_summary.py CSV [--seq N] — Nsight Compute's --csv output (one metric, gpu__time_duration) summed by
kernel: calls, total and mean microseconds, share of the total, largest first; --seq N also lists the
first N launches in order (to tell which op a cuBLAS kernel belongs to)."""
import csv, sys, collections

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]  # the program's own output is interleaved
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "ns")
    us = v / 1000 if unit in ("ns", "nsecond") else v * 1000 if unit in ("ms", "msecond") else v
    rows.append((r["Kernel Name"].split("(")[0][:60], us))
if not rows:
    sys.exit("no kernel times in %s" % sys.argv[1])
if "--seq" in sys.argv:
    for i, (k, us) in enumerate(rows[: int(sys.argv[sys.argv.index("--seq") + 1])]):
        print("%3d %-60s %9.2f" % (i, k, us))
agg = collections.OrderedDict()
for k, us in rows:
    a = agg.setdefault(k, [0, 0.0])
    a[0] += 1
    a[1] += us
tot = sum(a[1] for a in agg.values())
print("%-60s %5s %10s %9s %6s" % ("kernel", "calls", "total us", "mean us", "%"))
for k, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print("%-60s %5d %10.1f %9.2f %5.1f%%" % (k, n, t, t / n, 100 * t / tot))
print("%d launches, %.1f us of kernel time" % (len(rows), tot))
