"""What a checkpoint costs: time and size per rank, against one training step and a plain torch.save.

At 4 ranks (``mpiexec -n 4``, started by the script itself), for LeNet-5 (MNIST-5k) and
ResNet-18 (synthetic 28x28 images; 11.2 M parameters), with FedAvg's Adam workers (model,
two Adam moments, data order, RNG states: what ``--checkpoint-dir`` saves in the
synchronous mode), every rank measures, in one run:

- one training step (median of ``--steps`` after one warm-up step);
- ``torch.save`` of the same state to a file, plain (the baseline), and followed by fsync;
- ``fdahpc.checkpoint.save``: serialize, write, fsync, rename, agree, manifest, prune.

Each figure is the slowest rank's time, median over ``--repeats``; ratios are of medians
within this one run; every timed write starts after ``os.sync()``, and the
order of the three rotates between repeats. Goal: checkpoint <= 1.5x torch.save.

    python benchmarks/checkpoint_cost.py [--repeats 5] [--dir /scratch/...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import launched_by_mpi, median, mpiexec, print_report

MODELS = {"lenet5": "mnist5k", "resnet18": "synthetic"}
RANKS = 4


def _slowest(comm, seconds: float) -> float:
    return max(comm.allgather_obj(seconds))


def _settle(comm) -> None:
    """Start every timed write from a clean page cache: earlier writes still being flushed
    to disk would otherwise land on whichever measurement comes next."""
    os.sync()
    comm.barrier()


def _measure(model: str, dataset: str, args, comm) -> list:
    import torch

    from fdahpc import checkpoint
    from fdahpc.config import TrainConfig
    from fdahpc.run import build, resolve
    from fdahpc.worker import local_steps

    cfg = TrainConfig(strategy="fedavg", model=model, dataset=dataset, out=os.path.join(args.dir, f"{model}.h5"))
    s = build(resolve(cfg), comm)
    step_times = []
    for i in range(args.steps + 1):
        t = time.perf_counter()
        local_steps(s.job.model, s.job.batches, 1, s.job.optimizer.step, s.job.optimizer.zero_grad)
        if i:
            step_times.append(time.perf_counter() - t)
    step = _slowest(comm, median(step_times))
    s.job.fresh()
    state = s.job.state_dict()
    root = os.path.join(args.dir, f"ck-{model}")
    plain, synced, ckpt = [], [], []
    meta = checkpoint.identity(cfg, comm.world_size, s.job.flat.dim)

    def plain_save(path: str) -> None:
        torch.save(state, path)

    def synced_save(path: str) -> None:
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())

    for r in range(args.repeats):
        # Like the checkpoints, each plain save writes a new file and the one two saves
        # back is removed (untimed here, timed inside checkpoint.save). The order of the
        # three rotates every repeat, so none always follows the same disk state.
        jobs = [(plain, lambda: plain_save(os.path.join(args.dir, f"plain-{model}-{r}-{comm.rank}.pt"))),
                (synced, lambda: synced_save(os.path.join(args.dir, f"synced-{model}-{r}-{comm.rank}.pt"))),
                (ckpt, lambda: checkpoint.save(comm, root, r, state, meta))]
        for times, job in jobs[r % 3:] + jobs[: r % 3]:
            _settle(comm)
            t = time.perf_counter()
            job()
            times.append(_slowest(comm, time.perf_counter() - t))
        for kind in ("plain", "synced"):
            old = os.path.join(args.dir, f"{kind}-{model}-{r - 2}-{comm.rank}.pt")
            if os.path.exists(old):
                os.unlink(old)
    folder = checkpoint.latest(root)
    size = os.path.getsize(os.path.join(folder, f"rank-{comm.rank:05d}.pt"))
    p, y, c = median(plain), median(synced), median(ckpt)
    return [model, f"{s.job.flat.dim / 1e6:.2f}", f"{size / 1e6:.1f}", f"{step * 1e3:.1f}", f"{p * 1e3:.1f}",
            f"{y * 1e3:.1f}", f"{c * 1e3:.1f}", f"{c / step:.1f}", f"{c / p:.2f}", f"{c / y:.2f}"]


def _child(args) -> None:
    from fdahpc.comm import make_communicator

    comm = make_communicator("mpi")
    rows = [_measure(m, d, args, comm) for m, d in MODELS.items()]
    if comm.is_root:
        print_report(
            f"Checkpoint cost at {comm.world_size} ranks (slowest rank, median of {args.repeats}; folder {args.dir})",
            ["model", "M params", "MB/rank", "step ms", "torch.save ms", "+fsync ms", "checkpoint ms",
             "ckpt/step", "ckpt/torch.save", "ckpt/(save+fsync)"],
            rows,
            "checkpoint = fdahpc.checkpoint.save (serialize, write, fsync, rename, agree, manifest, prune); "
            "goal ckpt/torch.save <= 1.5",
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = p.parse_args()
    if launched_by_mpi():
        _child(args)
        return 0
    folder = args.dir or tempfile.mkdtemp(prefix="fdahpc-ckpt-bench-")
    try:
        proc = mpiexec(RANKS, [sys.executable, os.path.abspath(__file__), "--repeats", str(args.repeats),
                               "--steps", str(args.steps), "--dir", folder], timeout=1800, capture=False)
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
