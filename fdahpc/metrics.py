"""The HDF5 run file, written by rank 0 only.

Schema (readers such as ``fdahpc.plot`` rely on it):
- root attributes: ``strategy model dataset partition world_size workers params steps
  syncs comm_bytes comm_bytes_rank0 final_accuracy target_accuracy steps_to_target
  comm_bytes_to_target wall_seconds config`` (JSON of the full TrainConfig), plus more;
- 1-D datasets grouped by what they record: ``eval/step eval/accuracy eval/loss
  eval/comm_bytes``, ``sync/step``, and whatever a strategy adds (``fda/h`` ...);
- ``final/model``: the flat float32 model at the end (rank 0's in the synchronous mode).

Semi-asynchronous runs (root attribute ``mode = "semiasync"``) write one row per
aggregation instead: ``round/version round/virtual_time round/wall_seconds
round/accuracy round/loss round/staleness_mean round/staleness_max round/bytes``,
``round/types`` (rows of FSBC, FWBC, SWBC, SSBC counts), ``round/clients`` (rows of the
aggregated ids, -1 padded), ``round/weights`` (the rule's weight of each, NaN padded),
``round/lr_mean round/momentum_mean`` (of the jobs aggregated); root attributes ``convergence_accuracy rounds_to_95pct
oscillations virtual_time`` among others.

Rows are buffered in memory and written at every ``flush()`` (each evaluation), so
per-step series cost no HDF5 call per step, and a killed run still leaves a readable
file holding everything up to its last evaluation.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from typing import Any

import h5py
import numpy as np

__all__ = ["RunFile", "NullRunFile", "open_run_file", "check_writable"]


def check_writable(path: str) -> None:
    """Fail early (before any training) when the run file cannot be created."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise PermissionError(f"--out {path}: cannot create folder {folder} ({exc.strerror}); choose a writable path") from None
    if os.path.isdir(path):
        raise ValueError(f"--out {path}: is a folder; give a file name such as {os.path.join(path, 'run.h5')}")
    # Probe by creating a file: os.access answers "yes" to root on read-only mounts.
    try:
        fd, probe = tempfile.mkstemp(prefix=".fdahpc-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise PermissionError(f"--out {path}: folder {folder} is not writable ({exc.strerror}); choose a writable path") from None
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise PermissionError(f"--out {path}: file exists and is not writable; choose another path")


class RunFile:
    def __init__(self, path: str, attrs: dict[str, Any]) -> None:
        self.path = path
        self._h5 = h5py.File(path, "w")
        self._pending: dict[str, list] = defaultdict(list)
        self.set_attrs(**attrs)

    def set_attrs(self, **attrs: Any) -> None:
        for key, value in attrs.items():
            self._h5.attrs[key] = "" if value is None else value

    def append(self, name: str, value) -> None:
        """Queue one value for the 1-D dataset ``name`` (e.g. ``"eval/accuracy"``)."""
        self._pending[name].append(value)

    def write_array(self, name: str, arr: np.ndarray) -> None:
        """Store a whole array at once (e.g. ``final/model``, the final flat model)."""
        if name in self._h5:
            del self._h5[name]
        self._h5.create_dataset(name, data=arr)

    def flush(self) -> None:
        for name, values in self._pending.items():
            if not values:
                continue
            arr = np.asarray(values)  # scalars -> 1-D series; equal-length vectors -> rows of a 2-D one
            if name not in self._h5:
                dtype = np.int64 if np.issubdtype(arr.dtype, np.integer) else np.float64
                row = arr.shape[1:]
                self._h5.create_dataset(name, shape=(0, *row), maxshape=(None, *row), dtype=dtype, chunks=True)
            ds = self._h5[name]
            n = ds.shape[0]
            ds.resize(n + len(arr), axis=0)
            ds[n:] = arr
            values.clear()
        self._h5.flush()

    def close(self) -> None:
        if self._h5.id.valid:
            self.flush()
            self._h5.close()


class NullRunFile:
    """What non-root ranks hold: the same calls, nothing written."""

    path = None

    def set_attrs(self, **attrs: Any) -> None:
        pass

    def append(self, name: str, value) -> None:
        pass

    def write_array(self, name: str, arr: np.ndarray) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def open_run_file(path: str, is_root: bool, attrs: dict[str, Any]) -> RunFile | NullRunFile:
    return RunFile(path, attrs) if is_root else NullRunFile()
