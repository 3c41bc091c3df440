"""``python -m fdahpc.train``: flags, setup, and dispatch on ``--mode``.

    mpirun -n 4 python -m fdahpc.train                  # SketchFDA, LeNet-5, MNIST-5k
    mpirun -n 4 python -m fdahpc.train --strategy fedavg --local-epochs 1
    mpirun -n 4 python -m fdahpc.train --mode semiasync --clients 100 --buffer 10 --strategy fedqs-avg

``--mode sync`` runs the SPMD loop of :mod:`fdahpc.sync_loop` (every rank a worker);
``--mode semiasync`` the rank-0 coordinator of :mod:`fdahpc.semiasync`.

Setup errors (bad flags, missing data, an unwritable ``--out``, a checkpoint of another
run) are agreed on by all ranks and reported as one line with exit code 2; an exception
during training on any rank prints its traceback and aborts the whole job, so no rank
waits forever. SIGTERM/SIGUSR1 stop every rank at the same step after a checkpoint
(exit 0); a NaN or Inf on any rank ends the run on all of them (exit 3).
"""

from __future__ import annotations

import logging
import sys
import traceback

__all__ = ["main"]

log = logging.getLogger("fdahpc")
_SETUP_ERRORS = (ValueError, FileNotFoundError, PermissionError, NotADirectoryError)


def _limit_threads(n: int) -> None:
    """One thread per rank by default: ranks already fill the cores, and idle OpenMP
    threads spinning beside other ranks' work cost more than they give."""
    import numba
    import torch

    torch.set_num_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def _compile_once(cfg, comm) -> None:
    """Rank 0 compiles the Numba sketch kernels (or loads them from the cache) while the
    others wait, so that 44 ranks do not all compile and race on the cache at once."""
    from .strategies import uses_sketch

    if cfg.mode != "sync" or not uses_sketch(cfg):
        return
    if comm.is_root:
        from .sketch import compile_kernels

        compile_kernels()
    comm.barrier()


def _fail_setup(comm, errors: list, per_node: bool = False) -> int:
    """One line from rank 0 (every rank failed the same way), exit code 2. Before the
    communicator exists the launcher's rank decides; ``per_node``: a node's own problem
    (its GPUs), said by local rank 0 of each node."""
    from .comm import env_rank

    first = next(e for e in errors if e is not None)
    if comm is not None:
        show = comm.is_root
    else:
        rank, local_rank = env_rank()
        show = rank in (None, 0) or (per_node and local_rank in (None, 0))
    if show:
        print(f"fdahpc.train: error: {first}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    from .comm import LaunchError, make_communicator
    from .config import parse_args

    try:
        cfg = parse_args(argv)
    except _SETUP_ERRORS as exc:  # every rank parsed the same flags and failed the same way
        return _fail_setup(None, [str(exc)])
    from .control import StopRequest

    _limit_threads(cfg.threads)
    stop = StopRequest().install()  # before setup: a signal during it stops at the first check
    try:
        comm = make_communicator(cfg.backend, cfg.device if cfg.mode == "sync" else "cpu", cfg.comm_timeout)
    except _SETUP_ERRORS as exc:
        return _fail_setup(None, [str(exc)], per_node=isinstance(exc, LaunchError))
    try:
        code = _run(cfg, comm, stop)
    except BaseException:
        if comm.world_size == 1:
            raise
        print(f"[rank {comm.rank}] fdahpc.train failed; aborting the job\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        comm.abort(1)
    comm.close()  # every rank gets here after the same last collective
    return code


def _run(cfg, comm, stop) -> int:
    """Set up (the ranks agree on success) and train; the exit code."""
    from .control import Diverged

    if cfg.mode == "semiasync" and not comm.point_to_point:
        return _fail_setup(comm, ["--mode semiasync: the coordinator needs MPI's probe, which torch.distributed lacks; "
                                  "start it under mpirun or srun --mpi=pmi2 with --backend mpi"])
    logging.basicConfig(level=logging.INFO if comm.is_root else logging.WARNING, format="%(message)s", stream=sys.stdout)
    if cfg.mode == "semiasync":
        from .semiasync import build, run
    else:
        from .sync_loop import build
        from .sync_loop import train as run
    _compile_once(cfg, comm)
    try:
        setup, error = build(cfg, comm), None
    except _SETUP_ERRORS as exc:
        setup, error = None, str(exc)
    errors = comm.allgather_obj(error)  # all ranks agree before anyone trains
    if any(e is not None for e in errors):
        return _fail_setup(comm, errors)
    try:
        return run(setup, stop).get("exit_code", 0)
    except Diverged as exc:  # every rank raises it at the same step
        if comm.is_root:
            print(f"fdahpc.train: {exc}", file=sys.stderr, flush=True)
        return Diverged.exit_code

if __name__ == "__main__":
    sys.exit(main())
