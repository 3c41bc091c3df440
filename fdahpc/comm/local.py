"""A size-1 communicator: the same code path as MPI with one worker and no MPI at all."""

from __future__ import annotations

import os
from collections import deque
from typing import Any

import numpy as np

from .base import ANY, Communicator, Done, Request, Status, as_numpy

__all__ = ["LocalCommunicator"]


class LocalCommunicator(Communicator):
    """One rank; every collective is the identity (bytes are still counted), and a
    message to oneself is queued (a copy) until received, in order per tag."""

    def __init__(self) -> None:
        super().__init__()
        self.rank = 0
        self.world_size = 1
        self._queue: deque[tuple[int, bytes]] = deque()

    def _check_peer(self, peer: int, what: str) -> None:
        if peer not in (0, ANY):
            raise ValueError(f"{what} {peer}: a one-rank job has only rank 0; start the job under mpirun with more ranks")

    def _send(self, buf, dest: int, tag: int) -> None:
        self._check_peer(dest, "dest")
        self._queue.append((tag, as_numpy(buf).tobytes()))

    def _isend(self, buf, dest: int, tag: int) -> Request:
        self._send(buf, dest, tag)
        return Done()

    def _match(self, source: int, tag: int) -> int | None:
        self._check_peer(source, "source")
        return next((i for i, (t, _) in enumerate(self._queue) if tag in (ANY, t)), None)

    def _recv(self, buf, source: int, tag: int) -> Status:
        i = self._match(source, tag)
        if i is None:
            raise RuntimeError("recv_ on a one-rank job with no matching message queued: it would wait forever")
        t, data = self._queue[i]
        del self._queue[i]
        out = as_numpy(buf).view(np.uint8)
        if len(data) > out.nbytes:
            raise ValueError(f"message of {len(data)} bytes does not fit the {out.nbytes}-byte receive buffer")
        out[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        return Status(0, t, len(data))

    def _probe(self, source: int, tag: int, block: bool) -> Status | None:
        i = self._match(source, tag)
        if i is None:
            if block:
                raise RuntimeError("probe on a one-rank job with no matching message queued: it would wait forever")
            return None
        t, data = self._queue[i]
        return Status(0, t, len(data))

    def _allreduce_sum(self, buf) -> None:
        pass

    def _reduce_sum(self, buf, root: int) -> None:
        pass

    def _bcast(self, buf, root: int) -> None:
        pass

    def _allgather(self, arr: np.ndarray) -> np.ndarray:
        return arr[None].copy()

    def allgather_obj(self, obj: Any) -> list[Any]:
        return [obj]

    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        return obj

    def barrier(self) -> None:
        pass

    def abort(self, code: int = 1) -> None:
        os._exit(code)
