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


def _fail_setup(comm, errors: list) -> int:
    first = next(e for e in errors if e is not None)
    if comm is None or comm.is_root:
        print(f"fdahpc.train: error: {first}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    from .comm import make_communicator
    from .config import parse_args

    try:
        cfg = parse_args(argv)
    except _SETUP_ERRORS as exc:
        # Every rank parsed the same flags and failed the same way; let only rank 0 say so.
        try:
            comm = make_communicator("auto")
        except Exception:
            comm = None
        return _fail_setup(comm, [str(exc)])
    from .control import Diverged, StopRequest

    _limit_threads(cfg.threads)
    stop = StopRequest().install()  # before setup: a signal during it stops at the first check
    comm = make_communicator(cfg.backend)
    logging.basicConfig(level=logging.INFO if comm.is_root else logging.WARNING, format="%(message)s", stream=sys.stdout)
    try:
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
        result = run(setup, stop)
    except Diverged as exc:  # every rank raises it at the same step
        if comm.is_root:
            print(f"fdahpc.train: {exc}", file=sys.stderr, flush=True)
        return Diverged.exit_code
    except BaseException:
        if comm.world_size == 1:
            raise
        print(f"[rank {comm.rank}] fdahpc.train failed; aborting the job\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        comm.abort(1)
    return result.get("exit_code", 0)


if __name__ == "__main__":
    sys.exit(main())
