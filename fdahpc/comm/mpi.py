"""mpi4py backend: upper-case (buffer) collectives on zero-copy views of CPU tensors."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Communicator, as_numpy

__all__ = ["MPICommunicator"]


class MPICommunicator(Communicator):
    """Wraps an mpi4py intracommunicator (``MPI.COMM_WORLD`` by default)."""

    def __init__(self, comm=None) -> None:
        super().__init__()
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.world_size = self.comm.Get_size()

    def _allreduce_sum(self, buf) -> None:
        self.comm.Allreduce(self._MPI.IN_PLACE, as_numpy(buf), op=self._MPI.SUM)

    def _bcast(self, buf, root: int) -> None:
        self.comm.Bcast(as_numpy(buf), root=root)

    def _allgather(self, arr: np.ndarray) -> np.ndarray:
        out = np.empty((self.world_size, *arr.shape), dtype=arr.dtype)
        self.comm.Allgather(arr, out)
        return out

    def allgather_obj(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)
