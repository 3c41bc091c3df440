"""mpi4py backend: upper-case (buffer) collectives on zero-copy views of CPU tensors."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from .base import ANY, Communicator, Done, Request, Status, as_numpy

__all__ = ["MPICommunicator"]


class _MPIRequest(Request):
    def __init__(self, req) -> None:
        self._req = req

    def test(self) -> bool:
        return bool(self._req.Test())

    def wait(self) -> None:
        """Poll, yielding the core between polls: MPICH's own Wait spins, and with more
        ranks than cores the spinning rank holds the core a rank still computing needs."""
        polls = 0
        while not self._req.Test():
            polls += 1
            if polls > 16:
                os.sched_yield()


class MPICommunicator(Communicator):
    """Wraps an mpi4py intracommunicator (``MPI.COMM_WORLD`` by default)."""

    def __init__(self, comm=None) -> None:
        super().__init__()
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.world_size = self.comm.Get_size()
        self._scratch: np.ndarray | None = None  # this rank's slice in a split mean
        self._views: dict[int, tuple] = {}  # id(tensor) -> (tensor, data_ptr, numel, NumPy view)
        self._inv_k: dict = {}  # dtype -> 1/K in that dtype

    def _array(self, buf) -> np.ndarray:
        """``as_numpy(buf)``, with the views of the tensors it reduces often (the model, the
        FDA state) kept: at LeNet-5's size every microsecond is a percent of the mean."""
        if not isinstance(buf, torch.Tensor):
            return as_numpy(buf)
        hit = self._views.get(id(buf))
        if hit is not None and hit[0] is buf and hit[1] == buf.data_ptr() and hit[2] == buf.numel():
            return hit[3]
        arr = as_numpy(buf)
        if len(self._views) >= 16:
            self._views.clear()
        self._views[id(buf)] = (buf, buf.data_ptr(), buf.numel(), arr)
        return arr

    def _allreduce_sum(self, buf) -> None:
        self.comm.Allreduce(self._MPI.IN_PLACE, self._array(buf), op=self._MPI.SUM)

    #: From this many values on, a mean is a reduce-scatter, a 1/K pass over this rank's
    #: slice and an allgather; below it, a 1/K pass and one Allreduce. Measured crossover
    #: (``benchmarks/allreduce_overhead.py``, MPICH, 2 and 4 ranks): the split loses at 1 M
    #: values (1.2-1.4x the Allreduce) and wins from 2.6 M on (0.6-1.1x).
    split_mean_min = 1 << 21

    def _allreduce_mean(self, buf) -> None:
        arr, k = self._array(buf), self.world_size
        if k == 1:
            return
        inv_k = self._inv_k.get(arr.dtype)
        if inv_k is None:
            if arr.dtype.kind != "f":
                super()._allreduce_mean(buf)
                return
            inv_k = self._inv_k[arr.dtype] = arr.dtype.type(1.0 / k)
        if arr.size < self.split_mean_min:
            # Scaling before the sum costs the same pass as after it, but leaves nothing to
            # do once the collective returns (where, with more ranks than cores, a rank
            # still scaling is one the others wait for). Exact for K a power of two.
            np.multiply(arr, inv_k, out=arr)
            self.comm.Allreduce(self._MPI.IN_PLACE, arr, op=self._MPI.SUM)
            return
        body_len = arr.size - arr.size % k
        body, part = arr[:body_len], self._slice_buffer(body_len // k, arr.dtype)
        self.comm.Reduce_scatter_block(body, part, op=self._MPI.SUM)
        np.multiply(part, inv_k, out=part)  # 1/K over d/K values, not d
        self.comm.Allgather(part, body)
        if body_len < arr.size:  # the last d mod K values
            tail = arr[body_len:]
            self.comm.Allreduce(self._MPI.IN_PLACE, tail, op=self._MPI.SUM)
            np.multiply(tail, inv_k, out=tail)

    def _iallreduce_mean(self, buf) -> Request:
        arr, k = self._array(buf), self.world_size
        if k == 1:
            return Done()
        if arr.dtype.kind != "f":
            raise ValueError(f"iallreduce_mean_: a {arr.dtype} buffer; average floating-point buffers")
        np.multiply(arr, arr.dtype.type(1.0 / k), out=arr)  # as in the blocking mean: nothing left after
        return _MPIRequest(self.comm.Iallreduce(self._MPI.IN_PLACE, arr, op=self._MPI.SUM))

    def _slice_buffer(self, n: int, dtype) -> np.ndarray:
        """This rank's slice of a split mean: one scratch array, reused while the size holds."""
        scratch = self._scratch
        if scratch is None or scratch.size != n or scratch.dtype != dtype:
            scratch = self._scratch = np.empty(n, dtype=dtype)
        return scratch

    def _reduce_sum(self, buf, root: int) -> None:
        arr = as_numpy(buf)
        if self.rank == root:
            self.comm.Reduce(self._MPI.IN_PLACE, arr, op=self._MPI.SUM, root=root)
        else:
            self.comm.Reduce(arr, None, op=self._MPI.SUM, root=root)

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
