"""The floor under FDA's per-step monitoring: one 8-byte AllReduce per step, with no framework.

    python benchmarks/monitor_floor.py [--ranks 2,4] [--steps 600] [--repeats 5]

``fda_overhead.py`` measures LinearFDA's step against an unmonitored one through
``fdahpc.train`` (drift, two dot products, an 8-byte AllReduce, the decision). This script
takes fdahpc out: K MPI processes run the same LeNet-5 local steps (FashionMNIST, batch 32,
Adam 1e-3, one thread each) in a bare loop, as they are ("plain") and with a reduction of
two float32 after every step, waited for two ways (``VARIANTS``), in rotated order,
``--repeats`` times each, per rank count. A step's time is the slowest rank's wall time over the steps
after a Barrier; the table gives medians and the median of the per-repeat ratios.

If LinearFDA's ratio in ``fda_overhead.py`` is near this one, its monitoring costs what the
collective costs and no more: the floor is the per-step meeting of the ranks, which FedAvg
never has. With more ranks than cores (4 on 2) the ranks take turns on the cores, so every
meeting waits for the rank that was descheduled last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import launched_by_mpi, mpiexec, print_report

#: "allreduce": MPI's blocking Allreduce (MPICH spins until it completes); "iallreduce+yield":
#: a nonblocking one tested in a loop that yields the core after 16 polls, as fdahpc's
#: MPICommunicator waits on a request.
VARIANTS = ("plain", "allreduce", "iallreduce+yield")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="2,4", help="comma-separated rank counts (default 2,4)")
    p.add_argument("--steps", type=int, default=600, help="local steps per run (default 600)")
    p.add_argument("--repeats", type=int, default=5, help="runs of each variant per rank count (default 5)")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args) -> None:
    """One MPI process: every variant ``--repeats`` times, in rotated order; rank 0 prints each."""
    import time

    import numpy as np
    import torch
    from mpi4py import MPI

    from fdahpc.data import load_dataset, partition
    from fdahpc.models import build_model
    from fdahpc.worker import BatchStream

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    data = load_dataset("fashion-mnist", train_indices=lambda y: partition(y, comm.size, "iid", 0)[comm.rank])
    batches = BatchStream(data.x_train, data.y_train, 32, seed=0, stream=comm.rank)
    state = np.zeros(2, dtype=np.float32)
    for rep in range(args.repeats):
        for variant in VARIANTS[rep % len(VARIANTS):] + VARIANTS[: rep % len(VARIANTS)]:  # rotated
            torch.manual_seed(0)
            model = build_model("lenet5", 1, 28, 10)
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                xb, yb = batches.next()
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
                loss.backward()
                opt.step()
                state[0] = loss.item()  # both read the loss back, as fdahpc's local loop does
                if variant == "allreduce":
                    comm.Allreduce(MPI.IN_PLACE, state, op=MPI.SUM)
                elif variant == "iallreduce+yield":
                    req, polls = comm.Iallreduce(MPI.IN_PLACE, state, op=MPI.SUM), 0
                    while not req.Test():
                        polls += 1
                        if polls > 16:
                            os.sched_yield()
            took = comm.reduce(time.perf_counter() - t0, op=MPI.MAX, root=0)
            if comm.rank == 0:
                print(f"{rep} {variant} {took / args.steps * 1e3:.4f}", flush=True)


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker or launched_by_mpi():
        worker(args)
        return 0
    rows = []
    for k in [int(r) for r in args.ranks.split(",")]:
        proc = mpiexec(k, [sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(args.steps),
                           "--repeats", str(args.repeats)], args.timeout)
        if proc.returncode != 0:
            print(proc.stdout[-3000:], file=sys.stderr)
            return 1
        ms: dict[tuple[int, str], float] = {}
        for line in proc.stdout.splitlines():
            rep, variant, value = line.split()
            ms[int(rep), variant] = float(value)
        plain = [ms[r, "plain"] for r in range(args.repeats)]
        for variant in VARIANTS[1:]:
            ar = [ms[r, variant] for r in range(args.repeats)]
            ratio = statistics.median(a / b for a, b in zip(ar, plain))
            rows.append([k, variant, f"{statistics.median(plain):.3f}", f"{statistics.median(ar):.3f}",
                         f"{statistics.median(ar) / statistics.median(plain):.3f}", f"{ratio:.3f}",
                         f"{(statistics.median(ar) - statistics.median(plain)) * 1e3:.0f}"])
    print_report(f"Bare LeNet-5 steps with and without one 8-byte AllReduce each (FashionMNIST, batch 32, Adam, "
                 f"{args.steps} steps, {args.repeats} rotated repeats)",
                 ["ranks", "variant", "plain ms/step", "variant ms/step", "ratio of medians", "median ratio", "extra us/step"],
                 rows, "ms/step: the slowest rank's wall time over the steps; median over repeats.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
