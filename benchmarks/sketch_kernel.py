"""Cost of one AMS sketch (the per-step price of SketchFDA) against two yardsticks.

For each d: median wall time over repeats of (a) ``AmsSketch.sketch_into`` (Numba),
(b) ``np.dot(v, v)`` on the same float32 vector, the memory-bandwidth floor of any
one-pass kernel, and (c) a straightforward torch version with precomputed indices,
``table[r].index_add_(0, bucket[r], v * sign[r])`` per row. Prints numba/dot (goal
<= 10 at d = 11.2 M) and torch/numba (goal >= 5). Default sizes: LeNet-5, VGG16*,
ResNet-18. Run: ``python benchmarks/sketch_kernel.py [--dims 62000,2600000] [--repeats 15]``.
The table also shows the best time, since other processes may share the cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numba
import numpy as np
import torch

from fdahpc.sketch import AmsSketch, estimate_sq_norm


def _times(fn, repeats):
    fn()  # warm-up: compilation, page faults, allocator
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out), min(out)


def _torch_baseline(sk):
    """Per-row int64 bucket indices and float32 signs, as one would write it in torch."""
    codes = np.ascontiguousarray(sk.codes.T).astype(np.int64)
    bucket = torch.from_numpy(codes >> 1)
    sign = torch.from_numpy(1.0 - 2.0 * (codes & 1).astype(np.float32))
    table = torch.zeros((sk.rows, sk.cols), dtype=torch.float32)

    def run(v):
        table.zero_()
        for r in range(sk.rows):
            table[r].index_add_(0, bucket[r], v * sign[r])
        return table

    return run


def bench(dim, repeats, rows, cols):
    v = np.random.default_rng(0).standard_normal(dim).astype(np.float32)
    t0 = time.perf_counter()
    sk = AmsSketch(dim, rows, cols, seed=0)
    build = time.perf_counter() - t0
    out = np.empty((rows, cols), dtype=np.float64)
    t_numba = _times(lambda: sk.sketch_into(v, out), repeats)
    t_dot = _times(lambda: np.dot(v, v), repeats)
    tv = torch.from_numpy(v)
    run = _torch_baseline(sk)
    t_torch = _times(lambda: run(tv), max(3, repeats // 3))
    ref = run(tv).numpy()
    agree = np.abs(ref - out).max() / max(1.0, np.abs(out).max())
    rel = estimate_sq_norm(out) / float(np.dot(v.astype(np.float64), v)) - 1.0
    return build, t_numba, t_dot, t_torch, agree, rel


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="62000,2600000,11200000",
                    help="comma-separated vector sizes (default: LeNet-5, VGG16*, ResNet-18)")
    ap.add_argument("--repeats", type=int, default=15, help="timed repeats per measurement")
    ap.add_argument("--rows", type=int, default=5)
    ap.add_argument("--cols", type=int, default=250)
    args = ap.parse_args()
    dims = [int(d) for d in args.dims.split(",")]

    print(f"numba threads {numba.get_num_threads()}, torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}, "
          f"load avg {os.getloadavg()[0]:.2f}; rows={args.rows} cols={args.cols}; times in ms, median (best)")
    print(f"{'d':>10} {'build':>8} {'numba':>16} {'dot':>14} {'torch':>18} "
          f"{'numba/dot':>10} {'torch/numba':>12} {'M2/|v|^2-1':>11} {'agree':>8}")
    for dim in dims:
        build, tn, td, tt, agree, rel = bench(dim, args.repeats, args.rows, args.cols)
        ms = lambda t: f"{1e3 * t[0]:.3f} ({1e3 * t[1]:.3f})"
        print(f"{dim:>10} {1e3 * build:>8.0f} {ms(tn):>16} {ms(td):>14} {ms(tt):>18} "
              f"{tn[0] / td[0]:>10.2f} {tt[0] / tn[0]:>12.1f} {rel:>+11.3f} {agree:>8.1e}")
    print(f"numba threading layer {numba.threading_layer()}; load avg after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
