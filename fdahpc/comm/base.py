"""The communicator interface every backend implements, and its byte counters.

Strategies receive a :class:`Communicator` and never see MPI directly. Collectives serve
the synchronous mode; point-to-point messages of contiguous buffers (``send_``,
``isend``, ``recv_``, ``probe``/``iprobe``) serve the semi-asynchronous coordinator.
Every call that sends takes a ``purpose`` so that the bytes each rank hands to the network are counted once,
here, split the way the papers report them: model exchange, monitoring state
(FDA's tiny per-step AllReduce), evaluation, and control messages.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Iterator, NamedTuple

import numpy as np
import torch

from ..renamed import current_purposes

__all__ = ["ANY", "Communicator", "Outbox", "PURPOSES", "Request", "Status", "as_numpy"]

#: What a message is for; the counters are keyed by these names.
#: ``model``: training's model exchange in either mode (averages, pseudo-gradients, client
#: updates and the models sent back, and what a rule reduces beside them); ``monitor``:
#: FDA's per-step state; ``eval``: measuring only (averaging to score, ``--log-variance``);
#: ``control``: the initial model, headers and agreements. ``model`` was named ``sync``
#: until the mode took that name alone (:data:`fdahpc.renamed.RENAMED_PURPOSES`).
PURPOSES = ("model", "monitor", "eval", "control")

#: Wildcard for ``source`` or ``tag`` in ``recv_``/``probe``/``iprobe``.
ANY = -1


class Status(NamedTuple):
    """Where a message came from, its tag and its length in bytes."""

    source: int
    tag: int
    nbytes: int


class Request(ABC):
    """A pending non-blocking operation; its buffer must stay untouched until it completes."""

    @abstractmethod
    def test(self) -> bool: ...

    @abstractmethod
    def wait(self) -> None: ...


class Done(Request):
    """An operation that completed when it was started."""

    def test(self) -> bool:
        return True

    def wait(self) -> None:
        pass


def as_numpy(buf: np.ndarray | torch.Tensor) -> np.ndarray:
    """A zero-copy NumPy view of a contiguous CPU buffer (tensor or array)."""
    if isinstance(buf, torch.Tensor):
        if buf.device.type != "cpu":
            raise ValueError(
                f"buffer on {buf.device}: this backend reduces CPU buffers; use --backend torch for GPU tensors"
            )
        buf = buf.detach().numpy()
    if not buf.flags.c_contiguous:
        raise ValueError("buffer is not contiguous: reduce a flat parameter buffer (fdahpc.params.FlatParams)")
    return buf


def _nbytes(buf) -> int:
    return buf.nbytes if isinstance(buf, np.ndarray) else buf.numel() * buf.element_size()


class Communicator(ABC):
    """Rank, size and the few collectives fdahpc needs.

    ``bytes_sent[purpose]`` is the payload this rank handed to collectives (the buffer
    size per call, whatever algorithm the library uses underneath), so summing it over
    ranks gives the upload volume the papers count.
    """

    rank: int
    world_size: int
    #: Where the model and the buffers handed to the collectives live.
    device: torch.device = torch.device("cpu")
    #: Whether ``send_``/``recv_``/``probe`` work (the semi-asynchronous mode needs them).
    point_to_point: bool = True

    def __init__(self) -> None:
        self.bytes_sent = {p: 0 for p in PURPOSES}
        self._counted_as: str | None = None

    @contextmanager
    def counting_as(self, purpose: str) -> Iterator[None]:
        """Count every byte sent inside the block as ``purpose``, whatever its calls say: code
        that trains (a rule's aggregation) run only to measure counts as ``eval``."""
        self._count(purpose, 0)  # an unknown purpose fails here, before the block runs
        before, self._counted_as = self._counted_as, purpose
        try:
            yield
        finally:
            self._counted_as = before

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def _count(self, purpose: str, nbytes: int) -> None:
        if purpose not in self.bytes_sent:
            raise ValueError(f"purpose {purpose!r}: unknown; use one of {', '.join(PURPOSES)}")
        self.bytes_sent[self._counted_as or purpose] += int(nbytes)

    def allreduce_sum_(self, buf, purpose: str):
        """Sum ``buf`` over ranks, in place; returns ``buf``."""
        self._count(purpose, _nbytes(buf))
        self._allreduce_sum(buf)
        return buf

    def allreduce_mean_(self, buf, purpose: str):
        """Average ``buf`` over ranks, in place; returns ``buf``."""
        self._count(purpose, _nbytes(buf))
        self._allreduce_mean(buf)
        return buf

    def iallreduce_mean_(self, buf, purpose: str) -> Request:
        """Start averaging ``buf`` over ranks, in place; ``buf`` holds the mean once the
        returned request's ``wait()`` returns. Every rank must start the same sequence.
        Backends without non-blocking collectives complete it before returning."""
        self._count(purpose, _nbytes(buf))
        return self._iallreduce_mean(buf)

    def reduce_sum_(self, buf, purpose: str, root: int = 0):
        """Sum ``buf`` over ranks into root's ``buf`` (the others' are left as they were);
        returns ``buf``. Integer buffers sum exactly, whatever the backend's order."""
        self._count(purpose, _nbytes(buf) if self.rank != root else 0)
        self._reduce_sum(buf, root)
        return buf

    def bcast_(self, buf, purpose: str, root: int = 0):
        """Overwrite ``buf`` on every rank with root's copy, in place; returns ``buf``."""
        self._count(purpose, _nbytes(buf) if self.rank == root else 0)
        self._bcast(buf, root)
        return buf

    def allgather(self, arr: np.ndarray, purpose: str) -> np.ndarray:
        """Gather a small array of identical shape from every rank: result ``(world_size, *shape)``."""
        arr = np.ascontiguousarray(arr)
        self._count(purpose, arr.nbytes)
        return self._allgather(arr)

    # Point to point -----------------------------------------------------------
    def send_(self, buf, dest: int, tag: int, purpose: str) -> None:
        """Send a contiguous buffer to ``dest`` (blocking: returns when ``buf`` may be reused)."""
        self._count(purpose, _nbytes(buf))
        self._send(buf, dest, tag)

    def isend(self, buf, dest: int, tag: int, purpose: str) -> Request:
        """Start sending ``buf`` to ``dest``; keep ``buf`` alive and unchanged until the
        returned request completes. A server must never block on one slow peer."""
        self._count(purpose, _nbytes(buf))
        return self._isend(buf, dest, tag)

    def recv_(self, buf, source: int = ANY, tag: int = ANY) -> Status:
        """Receive into ``buf`` (which may be longer than the message); returns its status."""
        return self._recv(buf, source, tag)

    def probe(self, source: int = ANY, tag: int = ANY) -> Status:
        """Wait until a matching message is there, without receiving it."""
        status = self._probe(source, tag, block=True)
        assert status is not None
        return status

    def iprobe(self, source: int = ANY, tag: int = ANY) -> Status | None:
        """The status of a matching message that is there now, else None."""
        return self._probe(source, tag, block=False)

    def state_dict(self) -> dict[str, Any]:
        return {"bytes_sent": dict(self.bytes_sent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.bytes_sent.update(current_purposes(state["bytes_sent"]))  # older checkpoints: old names

    # Backend hooks -------------------------------------------------------------
    @abstractmethod
    def _allreduce_sum(self, buf) -> None: ...

    def _allreduce_mean(self, buf) -> None:
        self._allreduce_sum(buf)
        if self.world_size > 1:
            buf *= 1.0 / self.world_size

    def _iallreduce_mean(self, buf) -> Request:
        self._allreduce_mean(buf)
        return Done()

    @abstractmethod
    def _reduce_sum(self, buf, root: int) -> None: ...

    @abstractmethod
    def _bcast(self, buf, root: int) -> None: ...

    @abstractmethod
    def _allgather(self, arr: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def _send(self, buf, dest: int, tag: int) -> None: ...

    @abstractmethod
    def _isend(self, buf, dest: int, tag: int) -> Request: ...

    @abstractmethod
    def _recv(self, buf, source: int, tag: int) -> Status: ...

    @abstractmethod
    def _probe(self, source: int, tag: int, block: bool) -> Status | None: ...

    @abstractmethod
    def allgather_obj(self, obj: Any) -> list[Any]:
        """Pickled gather of a small Python object (control messages, errors); not counted."""

    @abstractmethod
    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        """Pickled broadcast of a small Python object from ``root``; not counted."""

    @abstractmethod
    def barrier(self) -> None: ...

    def close(self) -> None:
        """Collective: leave the job (every rank calls it once, after its last collective)."""

    @abstractmethod
    def abort(self, code: int = 1) -> None:
        """End every rank of the job now (used when one rank fails)."""


class Outbox:
    """Non-blocking sends whose buffers it keeps alive until they complete, so a caller
    can post and move on without tracking requests itself."""

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm
        self._pending: list[tuple[Request, Any]] = []

    def post(self, buf, dest: int, tag: int, purpose: str) -> None:
        self._pending.append((self.comm.isend(buf, dest, tag, purpose), buf))
        self._pending = [(req, b) for req, b in self._pending if not req.test()]

    def drain(self) -> None:
        """Wait until every posted send has completed."""
        for req, _ in self._pending:
            req.wait()
        self._pending.clear()
