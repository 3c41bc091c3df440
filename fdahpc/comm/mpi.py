"""mpi4py backend: upper-case (buffer) collectives on zero-copy views of CPU tensors."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .base import ANY, Communicator, Request, Status, as_numpy

__all__ = ["MPICommunicator"]


class _MPIRequest(Request):
    def __init__(self, req) -> None:
        self._req = req

    def test(self) -> bool:
        return bool(self._req.Test())

    def wait(self) -> None:
        self._req.Wait()


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

    def _any(self, source: int, tag: int) -> tuple[int, int]:
        return (self._MPI.ANY_SOURCE if source == ANY else source), (self._MPI.ANY_TAG if tag == ANY else tag)

    def _status(self, st) -> Status:
        return Status(st.Get_source(), st.Get_tag(), st.Get_count(self._MPI.BYTE))

    def _send(self, buf, dest: int, tag: int) -> None:
        self.comm.Send(as_numpy(buf), dest=dest, tag=tag)

    def _isend(self, buf, dest: int, tag: int) -> Request:
        return _MPIRequest(self.comm.Isend(as_numpy(buf), dest=dest, tag=tag))

    def _recv(self, buf, source: int, tag: int) -> Status:
        source, tag = self._any(source, tag)
        st = self._MPI.Status()
        self.comm.Recv(as_numpy(buf), source=source, tag=tag, status=st)
        return self._status(st)

    def _probe(self, source: int, tag: int, block: bool) -> Status | None:
        source, tag = self._any(source, tag)
        st = self._MPI.Status()
        delay = 0.0
        while not self.comm.Iprobe(source=source, tag=tag, status=st):
            if not block:
                return None
            # MPI's blocking Probe busy-polls a whole core; a coordinator waiting on slow
            # clients would take it from the ranks that compute. Back off to 1 ms sleeps.
            time.sleep(delay)
            delay = min(max(2 * delay, 1e-5), 1e-3)
        return self._status(st)

    def allgather_obj(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)
