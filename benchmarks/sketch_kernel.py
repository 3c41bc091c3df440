"""Cost of one AMS sketch (the per-step price of SketchFDA) against two yardsticks.

For each d: median over repeats of (a) ``AmsSketch.sketch_into`` (Numba), (b)
``np.dot(v, v)`` on the same float32 vector, the memory-bandwidth floor of any
one-pass kernel, and (c) a straightforward torch version with precomputed indices,
``table[r].index_add_(0, bucket[r], v * sign[r])`` per row, on as many threads as
Numba. Prints numba/dot (goal <= 10 at d = 11.2 M) and torch/numba (goal >= 5).
Default sizes: LeNet-5, VGG16*, ResNet-18. Needs fdahpc importable (``pip install -e .``
or ``PYTHONPATH=.``).

    python benchmarks/sketch_kernel.py [--dims 62000,2600000] [--repeats 15] [--clock cpu]

``--clock wall`` (default) times with all Numba threads. ``--clock cpu`` runs Numba and
torch on one thread and reports process CPU time (BLAS threads of the dot included):
core-seconds per call, which time-slicing by other processes on shared cores does not
inflate the way it inflates wall time. Best times are shown next to medians.
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


def _times(fn, repeats, clock):
    fn()  # warm-up: compilation, page faults, allocator
    out = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        out.append(clock() - t0)
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


def bench(dim, repeats, rows, cols, clock):
    v = np.random.default_rng(0).standard_normal(dim).astype(np.float32)
    t0 = time.perf_counter()
    sk = AmsSketch(dim, rows, cols, seed=0)
    build = time.perf_counter() - t0
    out = np.empty((rows, cols), dtype=np.float64)
    t_numba = _times(lambda: sk.sketch_into(v, out), repeats, clock)
    t_dot = _times(lambda: np.dot(v, v), repeats, clock)
    tv = torch.from_numpy(v)
    run = _torch_baseline(sk)
    t_torch = _times(lambda: run(tv), max(3, repeats // 3), clock)
    agree = np.abs(run(tv).numpy() - out).max() / max(1.0, np.abs(out).max())
    rel = estimate_sq_norm(out) / float(np.dot(v.astype(np.float64), v)) - 1.0
    return build, t_numba, t_dot, t_torch, agree, rel


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="62000,2600000,11200000",
                    help="comma-separated vector sizes (default: LeNet-5, VGG16*, ResNet-18)")
    ap.add_argument("--repeats", type=int, default=15, help="timed repeats per measurement")
    ap.add_argument("--rows", type=int, default=5)
    ap.add_argument("--cols", type=int, default=250)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: all threads, wall time; cpu: one thread, process CPU time")
    args = ap.parse_args()
    dims = [int(d) for d in args.dims.split(",")]
    if args.clock == "cpu":
        numba.set_num_threads(1)
        clock = time.process_time
    else:
        clock = time.perf_counter
    torch.set_num_threads(numba.get_num_threads())

    print(f"clock {args.clock}; numba threads {numba.get_num_threads()}, torch threads "
          f"{torch.get_num_threads()}, cpus {os.cpu_count()}, load avg {os.getloadavg()[0]:.2f}; "
          f"rows={args.rows} cols={args.cols}; ms per call, median (best)")
    print(f"{'d':>10} {'build':>7} {'numba':>16} {'dot':>14} {'torch':>18} "
          f"{'numba/dot':>10} {'torch/numba':>12} {'M2/|v|^2-1':>11} {'agree':>8}")
    for dim in dims:
        build, tn, td, tt, agree, rel = bench(dim, args.repeats, args.rows, args.cols, clock)
        ms = lambda t: f"{1e3 * t[0]:.3f} ({1e3 * t[1]:.3f})"  # noqa: E731
        print(f"{dim:>10} {1e3 * build:>7.0f} {ms(tn):>16} {ms(td):>14} {ms(tt):>18} "
              f"{tn[0] / td[0]:>10.2f} {tt[0] / tn[0]:>12.1f} {rel:>+11.3f} {agree:>8.1e}", flush=True)
    layer = numba.threading_layer() if args.clock == "wall" else "unused"
    print(f"numba threading layer {layer}; load avg after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
