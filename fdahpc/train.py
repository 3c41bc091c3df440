"""``python -m fdahpc.train``: the entry point; the flags are :mod:`fdahpc.cli`'s, the run :mod:`fdahpc.run`'s.

    mpirun -n 4 python -m fdahpc.train                  # SketchFDA, LeNet-5, MNIST-5k
    mpirun -n 4 python -m fdahpc.train --strategy fedavg --local-epochs 1
    mpirun -n 4 python -m fdahpc.train --mode semiasync --clients 100 --buffer 10 --strategy fedqs-avg

``--mode sync`` runs the SPMD loop of :mod:`fdahpc.sync_loop` (every rank a worker);
``--mode semiasync`` the rank-0 coordinator of :mod:`fdahpc.semiasync` (modes: :data:`fdahpc.run.MODES`).

Setup errors (bad flags, missing data, an unwritable ``--out``, a checkpoint of another
run) are agreed on by all ranks and reported as one line with exit code 2; an exception
during training on any rank prints its traceback and aborts the whole job, so no rank
waits forever. SIGTERM/SIGUSR1 stop every rank at the same step after a checkpoint
(exit 0); a NaN or Inf on any rank ends the run on all of them (exit 3).
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import sys
import termios
import time
import traceback

import torch

from .cli import parse_args
from .comm import LaunchError, make_communicator
from .control import StopRequest
from .heap import keep_freed_memory
from .run import SETUP_ERRORS, execute, fail_setup
from .threads import keep_torch_threads

__all__ = ["main"]

log = logging.getLogger("fdahpc")


def _limit_threads(n: int) -> None:
    """One thread per rank by default: ranks already fill the cores, and idle OpenMP
    threads spinning beside other ranks' work cost more than they give. Numba takes its
    count from the environment when first imported: only runs with Numba kernels import it
    (sketches, large semi-async models), and the others start faster without."""
    torch.set_num_threads(n)
    numba = sys.modules.get("numba")
    if numba is not None:  # imported already (an own-loop caller, a test): its pool is sized
        keep_torch_threads(numba.set_num_threads, min(n, numba.config.NUMBA_NUM_THREADS))
    else:  # Numba reads it when first imported, and again at every compilation: set it once, before
        cap = os.environ.get("NUMBA_NUM_THREADS")  # Numba's own default: the cores
        limit = int(cap) if cap and cap.isdigit() else (os.cpu_count() or 1)
        os.environ["NUMBA_NUM_THREADS"] = str(max(1, min(n, limit)))


#: The longest a failing rank waits for the launcher to take its error message.
RELAY_TIMEOUT_SECONDS = 10.0


def _wait_relayed(timeout_s: float = RELAY_TIMEOUT_SECONDS) -> None:
    """Return once the launcher has read everything this rank wrote to its stdout and stderr
    pipes (or after ``timeout_s``). The launcher relays a rank's output through its own
    process, and MPICH's kills on Abort drop what it has not read yet; a fixed sleep lost the
    message on a loaded machine, so this asks the pipe itself how many bytes are unread
    (``FIONREAD``). A terminal or a file has no reader to wait for."""
    deadline = time.monotonic() + timeout_s
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
            fd = stream.fileno()
        except (OSError, ValueError, AttributeError):
            continue
        while time.monotonic() < deadline:
            try:
                unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
            except OSError:  # not a pipe or socket
                break
            if unread == 0:
                break
            time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    try:
        plan = parse_args(argv)
    except SETUP_ERRORS as exc:  # every rank parsed the same flags and failed the same way
        return fail_setup(None, [str(exc)])
    cfg = plan.cfg
    _limit_threads(cfg.threads)
    keep_freed_memory()  # each step reuses the last one's memory instead of faulting it in again
    stop = StopRequest().install()  # before setup: a signal during it stops at the first check
    try:
        comm = make_communicator(cfg.backend, plan.mode.device(cfg), cfg.comm_timeout)
    except SETUP_ERRORS as exc:
        return fail_setup(None, [str(exc)], per_node=isinstance(exc, LaunchError))
    try:
        code = execute(plan, comm, stop)
    except BaseException:
        if comm.world_size == 1:
            raise
        print(f"[rank {comm.rank}] fdahpc.train failed; aborting the job\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        _wait_relayed()  # else MPICH's kills on Abort can drop this very message
        comm.abort(1)
    comm.close()  # every rank gets here after the same last collective
    return code


if __name__ == "__main__":
    sys.exit(main())
