#!/usr/bin/env python3
"""Per-round view of the controller benchmark's notice → StartInstances latency.

Reads the round lines hack/bench-controller.sh keeps (.lifeboat/bench/controller-rounds.txt):
each round's slowest node, by burst size; prints p50/p90/p95/p99/max, their 10/1 ratios, the
rounds split over SQS receives, and a bootstrap interval of the p99 ratio (how much of it one
slow round decides). Usage: hack/bench-rounds.py [rounds-file]
"""
import random
import re
import sys

path = sys.argv[1] if len(sys.argv) > 1 else ".lifeboat/bench/controller-rounds.txt"
UNIT = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
worst, split, two_batches = {}, {}, {}
for line in open(path):
    m = re.search(r": (\d+) at once, worst ([0-9.]+)(ns|µs|us|ms|s) .*?, (\d+) receives, (\d+) batches", line)
    if not m:
        continue
    n = int(m.group(1))
    worst.setdefault(n, []).append(float(m.group(2)) * UNIT[m.group(3)])
    split[n] = split.get(n, 0) + (int(m.group(4)) > 1)
    two_batches[n] = two_batches.get(n, 0) + (int(m.group(5)) > 1)


def pct(values, p):
    s = sorted(values)
    return s[int(p * (len(s) - 1) + 0.5)]


PS = (0.5, 0.9, 0.95, 0.99)
for n in sorted(worst):
    v = worst[n]
    print(f"{n:>2} at once: {len(v)} rounds  " + "  ".join(f"p{int(p * 100)} {pct(v, p):.2f} ms" for p in PS)
          + f"  max {max(v):.2f} ms  split {split[n]} (two batches {two_batches[n]})")
if 1 in worst and 10 in worst:
    one, ten = worst[1], worst[10]
    print("ratio 10/1: " + "  ".join(f"p{int(p * 100)} {pct(ten, p) / pct(one, p):.2f}" for p in PS))
    rng = random.Random(1)
    boot = sorted(pct([rng.choice(ten) for _ in ten], 0.99) / pct([rng.choice(one) for _ in one], 0.99) for _ in range(2000))
    print(f"p99 ratio, bootstrap over the rounds: median {boot[1000]:.2f}, 90% interval {boot[100]:.2f}–{boot[1900]:.2f}")
