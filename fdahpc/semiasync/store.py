"""Models a rank must keep for later: in memory up to a budget, the rest on local disk.

Both roles of the semi-asynchronous mode hold models whose number grows with the clients:

- a host, the global versions its clients' pending jobs start from (every client always
  has one pending job, started from the version the server last sent it);
- the server, the updates that arrived before their turn (hosts compute ahead, in
  virtual-time order, while the server consumes updates one aggregation at a time).

Measured with 1,000 clients of LeNet-5 on 3 ranks (2-step jobs, K = 10, 100 rounds): the
server stashed up to 145 updates and each host held up to 53 versions; both grow with N
(benchmarks/semiasync_memory.py). No representation makes them smaller without changing
the result, so :class:`ModelStore` keeps the models needed soonest in memory and writes
the others to files in a folder on local disk (``--spill-dir``, by default the system's
temporary folder: on a cluster node its local scratch), reading one back when its turn
comes. A spilled vector comes back bit for bit, so spilling changes no result.

Which models stay: the budget (``--model-cache-gb`` per rank) holds ``capacity`` models;
when another one must enter and the budget is full, the one needed furthest in virtual
time goes to disk (Belady's rule, exact here because every model's next use is known: the
completion time of the job that needs it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

import numpy as np
import torch

__all__ = ["ModelStore", "capacity"]


def capacity(gb: float | None, floats: int) -> int | None:
    """How many float32 vectors of ``floats`` entries fit in ``gb`` GB (at least one; None: no limit)."""
    return None if gb is None else max(1, int(gb * 2**30 // (4 * floats)))


class ModelStore:
    """``store[k]`` is the float32 vector kept under key ``k`` (a version, a client),
    loaded from disk when it was spilled.

    ``capacity``: models kept in memory (None: no limit, nothing is written).
    ``next_use()``: a mapping key → virtual time it is needed next, asked when a model must
    leave memory; keys it lacks go first.
    """

    def __init__(self, capacity: int | None, spill_dir: str | None, next_use: Callable[[], dict[int, float]],
                 tag: str = "") -> None:
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
            raise ValueError(f"capacity {capacity!r}: must be a positive number of versions (or None)")
        self.capacity, self.spill_dir, self.next_use, self.tag = capacity, spill_dir, next_use, tag
        self.memory: dict[int, torch.Tensor] = {}
        self.disk: dict[int, tuple[str, int]] = {}  # key -> (file, length)
        self.folder: str | None = None
        self.peak = 0  # the most models held in memory at once
        self.spilled = self.loaded = 0  # writes and reads, for the run's record

    def __contains__(self, v: int) -> bool:
        return v in self.memory or v in self.disk

    def __len__(self) -> int:
        return len(self.memory) + len(self.disk)

    def keys(self) -> list[int]:
        return [*self.memory, *self.disk]

    def put(self, v: int, w: torch.Tensor) -> None:
        """Keep ``w`` under key ``v`` (taken, not copied), in place of any earlier one."""
        self._unspill(v)
        self._make_room(keep=v)
        self.memory[v] = w
        self.peak = max(self.peak, len(self.memory))

    def __getitem__(self, v: int) -> torch.Tensor:
        if v not in self.memory:
            self.put(v, self._load(v))
        return self.memory[v]

    def pop(self, v: int) -> torch.Tensor:
        """The model under ``v``, no longer kept (read from disk without taking a place in memory)."""
        return self.memory.pop(v) if v in self.memory else self._load(v)

    def _load(self, v: int) -> torch.Tensor:
        path, length = self.disk.pop(v)
        w = torch.from_numpy(np.fromfile(path, dtype=np.float32, count=length))
        os.remove(path)
        self.loaded += 1
        return w

    def discard(self, v: int) -> None:
        self.memory.pop(v, None)
        self._unspill(v)

    def _unspill(self, v: int) -> None:
        """Forget ``v``'s copy on disk, if it has one."""
        spilled = self.disk.pop(v, None)
        if spilled is not None:
            os.remove(spilled[0])

    def _make_room(self, keep: int) -> None:
        if self.capacity is None or len(self.memory) < self.capacity:
            return
        later = self.next_use()
        # Needed furthest first; one no pending job needs (about to be discarded) first of all.
        victims = sorted((v for v in self.memory if v != keep), key=lambda v: (-later.get(v, np.inf), -v))
        for v in victims[: len(self.memory) - self.capacity + 1]:
            self._spill(v)

    def _spill(self, v: int) -> None:
        if self.folder is None:
            base = self.spill_dir or tempfile.gettempdir()
            try:
                os.makedirs(base, exist_ok=True)
                self.folder = tempfile.mkdtemp(prefix=f"fdahpc-{self.tag}", dir=base)
            except OSError as exc:
                raise OSError(f"--spill-dir {base}: cannot write there ({exc.strerror}); give a writable local "
                              "folder or a larger --model-cache-gb") from exc
        w = self.memory.pop(v)
        path = os.path.join(self.folder, f"{v}.f32")
        w.numpy().tofile(path)
        self.disk[v] = (path, w.numel())
        self.spilled += 1

    def close(self) -> None:
        """Delete the spill folder (also when the run failed)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        self.disk.clear()
