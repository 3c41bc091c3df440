"""Overhead of fdahpc's model average over a raw mpi4py AllReduce of the same buffer.

Measures, for flat float32 buffers of d = 62 K, 2.6 M and 11.2 M values (LeNet-5, VGG16*,
ResNet-18) on K ranks (default 4):

- ``raw``:  ``comm.Allreduce(MPI.IN_PLACE, numpy_buf, op=MPI.SUM)`` on a NumPy array, the floor;
- ``mean``: ``MPICommunicator.allreduce_mean_(w, "model")`` on ``fdahpc.params.flat_buffer(d)``,
  exactly how ``FlatParams.w`` is allocated (what ``MeanRule`` does at every model sync);
  mean/raw is the headline ratio. Below ``MPICommunicator.split_mean_min`` values it is a
  1/K pass then the Allreduce; from there on a Reduce_scatter_block, 1/K over this rank's
  slice, an Allgather (and one small Allreduce of the last d mod K values);
- ``sum+scale``: ``allreduce_sum_(w)`` then ``w *= 1/K``, how fdahpc averaged before;
- ``scale``: the 1/K pass over the whole buffer alone, no communication.

Every repeat runs each variant once, in a rotated order (so no variant always follows the
same one), each after a Barrier and after restoring the buffer's contents (untimed, so
sums never overflow). A call's time is the slowest rank's; the table gives the median over
repeats, and mean/raw both as a ratio of medians and as the median of per-repeat ratios
(neighbouring calls share the machine's load, so the paired figure is less noisy).

Goal: mean/raw <= 1.10.

Run (the script relaunches itself under ``mpiexec -n RANKS`` when started without it):

    python benchmarks/allreduce_overhead.py [--ranks 4] [--dims 62000,2600000,11200000] [--repeats 60]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import CpuMeter, launched_by_mpi, median, mpiexec, print_report, wait_for_quiet

VARIANTS = ("raw", "mean", "sum+scale", "scale")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=4, help="MPI ranks when relaunching under mpiexec (default 4)")
    p.add_argument("--dims", default="62000,2600000,11200000", help="comma-separated buffer sizes d (float32 values)")
    p.add_argument("--repeats", type=int, default=60, help="timed repeats of every variant per d, 5x that for d < 1M (default 60)")
    p.add_argument("--warmup", type=int, default=5, help="untimed repeats first (default 5)")
    p.add_argument("--wait-idle", type=float, default=60, help="wait up to this many seconds for other processes to go idle first")
    p.add_argument("--timeout", type=float, default=900, help="seconds before the relaunched job is killed")
    args = p.parse_args(argv)
    args.dims = [int(float(x)) for x in args.dims.split(",") if x.strip()]
    if args.ranks < 2 or args.repeats < 1 or not args.dims or min(args.dims) < 1:
        p.error("need --ranks >= 2, --repeats >= 1 and positive --dims")
    return args


def bench_one(mpi_comm, comm, dim: int, repeats: int, warmup: int):
    """Per-variant lists of per-repeat times on this rank (seconds)."""
    import numpy as np
    from mpi4py import MPI

    k, rank = mpi_comm.Get_size(), mpi_comm.Get_rank()
    src = np.random.default_rng(rank).standard_normal(dim).astype(np.float32)
    raw = np.empty_like(src)
    from fdahpc.params import flat_buffer

    w = flat_buffer(dim)  # exactly how FlatParams.w is allocated
    w_np = w.numpy()
    inv_k = 1.0 / k

    def scale():
        w.mul_(inv_k)

    def sum_scale():
        comm.allreduce_sum_(w, "model")
        w.mul_(inv_k)

    calls = {
        "raw": (raw, lambda: mpi_comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM)),
        "mean": (w_np, lambda: comm.allreduce_mean_(w, "model")),
        "sum+scale": (w_np, sum_scale),
        "scale": (w_np, scale),
    }
    # The variants must compute the same thing before their times mean anything.
    np.copyto(raw, src)
    calls["raw"][1]()
    expected = raw / np.float32(k)
    for name in ("mean", "sum+scale"):
        buf, fn = calls[name]
        np.copyto(buf, src)
        fn()
        if not np.allclose(buf, expected, rtol=1e-5, atol=1e-6):
            raise AssertionError(f"d={dim}: variant {name!r} does not compute the mean")
    times = {v: [] for v in VARIANTS}
    for rep in range(warmup + repeats):
        shift = rep % len(VARIANTS)
        for name in VARIANTS[shift:] + VARIANTS[:shift]:
            buf, fn = calls[name]
            np.copyto(buf, src)
            mpi_comm.Barrier()
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            if rep >= warmup:
                times[name].append(dt)
    return times


def worker(args) -> None:
    import numpy as np
    import torch
    from mpi4py import MPI

    from fdahpc.comm.mpi import MPICommunicator

    torch.set_num_threads(1)  # as fdahpc.train does under MPI
    mpi_comm = MPI.COMM_WORLD
    comm = MPICommunicator(mpi_comm)
    rows = []
    for dim in args.dims:
        # Small buffers take microseconds but are at the mercy of the scheduler: more samples.
        repeats = args.repeats * (5 if dim < 1_000_000 else 1)
        meter = CpuMeter(include_children=False)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        mine = bench_one(mpi_comm, comm, dim, repeats, args.warmup)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        own = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        others_ranks = mpi_comm.allreduce(own) - own  # the other ranks' CPU is ours too
        foreign = meter.foreign_share(own_extra=others_ranks)
        arr = np.array([mine[v] for v in VARIANTS])  # (variants, repeats)
        slowest = np.empty_like(arr)
        mpi_comm.Allreduce(arr, slowest, op=MPI.MAX)  # a collective ends with its slowest rank
        if comm.is_root:
            t = {v: slowest[i] for i, v in enumerate(VARIANTS)}
            med = {v: median(t[v]) * 1e3 for v in VARIANTS}
            paired = median(t["mean"] / t["raw"])
            rows.append([
                f"{dim:,}", "split" if dim >= comm.split_mean_min else "scale first", f"{med['raw']:.3f}",
                f"{med['mean']:.3f}", f"{med['mean'] / med['raw']:.3f}", f"{paired:.3f}",
                f"{np.percentile(t['raw'], 25) * 1e3:.2f}-{np.percentile(t['raw'], 75) * 1e3:.2f}",
                f"{med['sum+scale'] / med['raw']:.3f}", f"{med['scale']:.3f}", f"{foreign:.0%}",
            ])
    if comm.is_root:
        print_report(
            f"allreduce overhead: {comm.world_size} ranks, {args.repeats} repeats (5x for d < 1M; after {args.warmup} "
            f"warm-up), median of the slowest rank's time; mpi4py {__import__('mpi4py').__version__}, "
            f"{MPI.Get_library_version().splitlines()[0].strip()}",
            ["d", "fdahpc mean", "raw ms", "fdahpc ms", "ratio", "paired", "raw IQR ms", "sum+scale/raw", "scale ms",
             "others' CPU"], rows,
            "ratio = median fdahpc mean / median raw Allreduce (goal <= 1.10); paired = median of per-repeat ratios.\n"
            "fdahpc mean: how allreduce_mean_ averaged this size (1/K pass then Allreduce, or the split:\n"
            "Reduce_scatter_block, 1/K over the own slice, Allgather). sum+scale/raw: the former way (Allreduce,\n"
            "then 1/K over the whole buffer) / raw; scale ms: that 1/K pass alone.\n"
            "others' CPU: share of the machine that other processes used meanwhile (noise indicator).")


def main(argv=None) -> int:
    args = parse(argv)
    if launched_by_mpi():
        try:
            worker(args)
        except BaseException:
            import traceback

            from mpi4py import MPI

            traceback.print_exc()
            MPI.COMM_WORLD.Abort(1)  # never leave the other ranks inside a collective
        return 0
    argv = sys.argv[1:] if argv is None else argv
    waited = wait_for_quiet(args.wait_idle)
    if waited >= args.wait_idle:
        print(f"allreduce_overhead: the machine did not go idle within {args.wait_idle:.0f} s; measuring anyway", flush=True)
    proc = mpiexec(args.ranks, [sys.executable, __file__, *argv], args.timeout, capture=False)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
