"""Communicators: the only place fdahpc talks to MPI (or torch.distributed).

``make_communicator("auto")`` picks MPI when the process was started by an MPI launcher
(``mpirun``/``mpiexec``/``srun``) and the size-1 local backend otherwise, so
``python -m fdahpc.train`` works with and without MPI installed.
"""

from __future__ import annotations

import os

from .base import ANY, PURPOSES, Communicator, Outbox, Request, Status, as_numpy
from .local import LocalCommunicator

__all__ = ["ANY", "BACKENDS", "PURPOSES", "Communicator", "Outbox", "Request", "Status", "LocalCommunicator", "as_numpy", "make_communicator"]

BACKENDS = ("auto", "mpi", "local")

# Variables the common launchers (MPICH/Hydra, Open MPI, PMIx/srun, Intel MPI) export.
_LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def launched_by_mpi() -> bool:
    return any(v in os.environ for v in _LAUNCHER_VARS)


def make_communicator(backend: str = "auto") -> Communicator:
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: unknown; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = "mpi" if launched_by_mpi() else "local"
    if backend == "local":
        return LocalCommunicator()
    try:
        from .mpi import MPICommunicator
    except ImportError as exc:
        raise ValueError(
            f"backend 'mpi': mpi4py cannot be imported ({exc}); pip install 'fdahpc[mpich]' or build mpi4py against your MPI"
        ) from None
    return MPICommunicator()
