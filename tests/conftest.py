"""Shared fixtures: a communicator that is the local backend in a plain pytest run and
MPI.COMM_WORLD under ``mpiexec -n N python -m pytest --with-mpi`` (torch.distributed over
gloo instead when ``FDAHPC_TEST_BACKEND=torch``)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

torch.set_num_threads(1)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _with_mpi(config) -> bool:
    return bool(getattr(config.option, "with_mpi", False))


def pytest_configure(config):
    if _with_mpi(config):  # several ranks share the cores: no extra Numba threads
        import numba

        numba.set_num_threads(1)


@pytest.fixture(scope="session")
def comm(request):
    from fdahpc.comm import LocalCommunicator

    if _with_mpi(request.config):
        from fdahpc.comm import make_communicator

        comm = make_communicator(os.environ.get("FDAHPC_TEST_BACKEND", "mpi"), "cpu")
        yield comm
        comm.close()
    else:
        yield LocalCommunicator()


#: A small, fast run: the bundled MNIST-5k, LeNet-5, batch 16, no progress lines.
SMALL = dict(dataset="mnist5k", model="lenet5", batch_size=16, log_every=10**6)


def train_inprocess(comm, out, **options):
    """One run of ``fdahpc.run`` on ``comm`` (every rank calls it), :data:`SMALL` unless
    ``options`` say otherwise; (the built run, its result). Rank 0's ``out`` is used (None:
    the default, or a resumed run's own file)."""
    from fdahpc.config import TrainConfig
    from fdahpc.run import build, resolve, run

    out = comm.bcast_obj(None if out is None else str(out))  # None: a resumed run's own file
    cfg = TrainConfig(**{**SMALL, "out": out, **options})
    setup = build(resolve(cfg), comm)
    return setup, run(setup)


def train_cli(out, *args, ranks: int = 1, torchrun: bool = False, env=None, timeout: float = 180):
    """``python -m fdahpc.train ARGS --out OUT`` under mpiexec (``ranks``) or torchrun (2
    processes); the finished process."""
    cmd = ["-m", "fdahpc.train", *args, "--out", str(out)]
    if torchrun:
        return run_python(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *cmd],
                          timeout=timeout, env_extra=env)
    return run_python(cmd, ranks=ranks, timeout=timeout, env_extra=env)


def run_python(args, *, ranks: int = 1, timeout: float = 180, cwd=None, env_extra=None):
    """Run ``python ARGS`` (under ``mpiexec -n ranks`` when ranks > 1) with a hard timeout."""
    import subprocess

    # One thread per rank: idle OpenMP/Numba threads spinning beside oversubscribed ranks
    # slow an MPI job on a 2-core machine by an order of magnitude.
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    cmd = [sys.executable, *args]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or REPO, env=env)
