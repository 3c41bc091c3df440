"""A size-1 communicator: the same code path as MPI with one worker and no MPI at all."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .base import Communicator

__all__ = ["LocalCommunicator"]


class LocalCommunicator(Communicator):
    """One rank; every collective is the identity (bytes are still counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.rank = 0
        self.world_size = 1

    def _allreduce_sum(self, buf) -> None:
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
