"""The HDF5 run file, written by rank 0 only.

Schema (readers such as ``fdahpc.plot`` rely on it):
- root attributes: ``mode strategy model dataset partition world_size params steps
  syncs comm_bytes comm_bytes_rank0 final_accuracy target_accuracy steps_to_target
  comm_bytes_to_target wall_seconds config`` (JSON of the full TrainConfig), ``provenance``
  (JSON: one record per segment, the run and each resume; :mod:`fdahpc.provenance`), plus more;
- 1-D datasets grouped by what they record: ``eval/step eval/accuracy eval/loss
  eval/comm_bytes``, ``sync/step``, and whatever a strategy adds (``fda/h`` ...);
- ``final/model``: the flat float32 model at the end (rank 0's in the synchronous mode).

Every run file says its ``mode`` (``sync`` or ``semiasync``). Semi-asynchronous runs write one row per
aggregation instead: ``round/version round/virtual_time round/wall_seconds
round/accuracy round/loss round/staleness_mean round/staleness_max round/bytes``,
``round/types`` (rows of FSBC, FWBC, SWBC, SSBC counts), ``round/clients`` (rows of the
aggregated ids, -1 padded), ``round/weights`` (the rule's weight of each, NaN padded),
``round/lr_mean round/momentum_mean`` (of the jobs aggregated), and per aggregated update
``round/update_staleness round/n_samples round/feedback round/G`` (-1 or NaN padded); root attributes ``convergence_accuracy rounds_to_95pct
oscillations virtual_time`` among others.

Status: the root attribute ``status`` is ``running`` while the job writes the file, then
``finished``, ``stopped`` (a signal; a checkpoint was written), ``diverged`` or ``failed``.

Crash-consistent and readable while the job runs: rank 0 keeps every row in memory and,
at each ``flush()`` (each evaluation), writes the whole file under a temporary name,
fsyncs it and renames it over the old one. Readers (h5py, ``fdahpc.plot``,
``fdahpc.summary``) open the file at any time with plain ``h5py.File(path, "r")`` and see
the last complete flush; a job killed mid-write leaves the previous one. The writer never
holds the file open, so HDF5's file lock never refuses a reader.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from typing import Any

import h5py
import numpy as np

__all__ = ["RunFile", "NullRunFile", "open_run_file", "check_writable", "read_run_file", "convergence_metrics"]


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
    def __init__(self, path: str, attrs: dict[str, Any], rows: dict[str, list] | None = None) -> None:
        self.path = path
        self._attrs: dict[str, Any] = {}
        self._series: dict[str, list] = defaultdict(list)
        self._arrays: dict[str, np.ndarray] = {}
        for name, values in (rows or {}).items():
            self._series[name] = list(values)
        self.set_attrs(**{**attrs, "status": "running"})
        self.flush()  # a reader sees the run from its first moment

    @classmethod
    def resume(cls, path: str, attrs: dict[str, Any], rows: dict[str, int], source: str | None = None) -> "RunFile":
        """Continue the run file ``source`` (default ``path``) into ``path`` from a checkpoint:
        its series cut back to ``rows`` (the counts the checkpoint recorded), so no row is
        duplicated or missing."""
        source = source or path
        kept: dict[str, list] = {}
        old_attrs: dict[str, Any] = {}
        try:
            with h5py.File(source, "r") as h5:
                old_attrs = dict(h5.attrs)
                for name, n in rows.items():
                    if name not in h5 or h5[name].shape[0] < n:
                        have = h5[name].shape[0] if name in h5 else 0
                        raise ValueError(f"--resume: run file {source} holds {have} rows of {name}, the checkpoint "
                                         f"recorded {n}; restore the run file or start without --resume")
                    kept[name] = list(h5[name][:n])
        except OSError as exc:
            raise ValueError(f"--resume: run file {source} cannot be read ({exc}); restore it or start without --resume") from None
        return cls(path, {**old_attrs, **attrs}, kept)

    def set_attrs(self, **attrs: Any) -> None:
        for key, value in attrs.items():
            self._attrs[key] = "" if value is None else value

    def append(self, name: str, value) -> None:
        """Add one value to the 1-D dataset ``name`` (e.g. ``"eval/accuracy"``)."""
        self._series[name].append(value)

    def write_array(self, name: str, arr: np.ndarray) -> None:
        """Store a whole array at once (e.g. ``final/model``, the final flat model)."""
        self._arrays[name] = np.array(arr)

    def rows(self) -> dict[str, int]:
        """Rows of each series so far (what a checkpoint records)."""
        return {name: len(values) for name, values in self._series.items()}

    def flush(self) -> None:
        folder, base = os.path.split(os.path.abspath(self.path))
        tmp = os.path.join(folder, f".{base}.tmp-{os.getpid()}")
        try:
            with h5py.File(tmp, "w") as h5:
                for key, value in self._attrs.items():
                    h5.attrs[key] = value
                for name, values in self._series.items():
                    arr = np.asarray(values)  # scalars -> 1-D series; equal-length vectors -> rows of a 2-D one
                    dtype = np.int64 if np.issubdtype(arr.dtype, np.integer) else np.float64
                    h5.create_dataset(name, data=arr.astype(dtype))
                for name, arr in self._arrays.items():
                    h5.create_dataset(name, data=arr)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def close(self, status: str = "finished") -> None:
        self.set_attrs(status=status)
        self.flush()


class NullRunFile:
    """What non-root ranks hold: the same calls, nothing written."""

    path = None

    def set_attrs(self, **attrs: Any) -> None:
        pass

    def append(self, name: str, value) -> None:
        pass

    def write_array(self, name: str, arr: np.ndarray) -> None:
        pass

    def rows(self) -> dict[str, int]:
        return {}

    def flush(self) -> None:
        pass

    def close(self, status: str = "finished") -> None:
        pass


def open_run_file(path: str, is_root: bool, attrs: dict[str, Any], resumed=None) -> RunFile | NullRunFile:
    """Rank 0's run file (a new one, or with ``resumed`` — a :class:`fdahpc.checkpoint.Resumed`
    — the one its checkpoint names, continued); the other ranks get a NullRunFile."""
    if not is_root:
        return NullRunFile()
    if resumed is None:
        return RunFile(path, attrs)
    manifest = resumed.manifest
    return RunFile.resume(path, attrs, manifest["run_rows"], source=manifest["run_file"])


def read_run_file(path: str, names) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Root attributes and the series ``names`` of a run file (finished or still being
    written; a series not written yet is empty). ``ValueError`` with one line when the file
    is missing, damaged or not an fdahpc run file. Reads data only: no pickles anywhere."""
    if not os.path.isfile(path):
        raise ValueError(f"run file {path}: not found; give the --out file of a python -m fdahpc.train run")
    if not h5py.is_hdf5(path):
        raise ValueError(f"run file {path}: not an HDF5 file; give the --out file of a python -m fdahpc.train run")
    try:
        with h5py.File(path, "r") as h5:
            attrs = dict(h5.attrs)
            if "strategy" not in attrs:
                raise ValueError(f"run file {path}: not an fdahpc run file (lacks the 'strategy' attribute); "
                                 "give a file written by python -m fdahpc.train")
            series = {name: np.asarray(h5[name][()]) if name in h5 else np.zeros(0) for name in names}
    except (OSError, KeyError, TypeError) as exc:
        raise ValueError(f"run file {path}: damaged or truncated ({type(exc).__name__}: {exc}); "
                         "use the last complete copy or re-run") from None
    return attrs, series


def convergence_metrics(accuracy: np.ndarray, window: int = 20, drop: float = 0.15) -> dict[str, float]:
    """The FedQS paper's three measures over the evaluated rounds (NaN rows skipped):
    convergence accuracy (mean of the last ``window``), the first round (1-based) that
    reaches 95 % of it, and oscillations (rounds more than ``drop`` below the running best)."""
    rounds = np.flatnonzero(~np.isnan(accuracy))
    acc = accuracy[rounds]
    if len(acc) == 0:
        return dict(convergence_accuracy=float("nan"), rounds_to_95pct=-1, oscillations=0)
    conv = float(acc[-window:].mean())
    reached = np.flatnonzero(acc >= 0.95 * conv)
    best = np.maximum.accumulate(acc)
    return dict(convergence_accuracy=conv, rounds_to_95pct=int(rounds[reached[0]] + 1) if len(reached) else -1,
                oscillations=int(np.sum(acc < best - drop)))
