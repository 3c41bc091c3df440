"""Checkpoints: every rank's state on disk, written so that a crash never costs the last good one.

Layout of ``--checkpoint-dir DIR``::

    DIR/ckpt-000000200/rank-00000.pt ... rank-00003.pt   one file per rank
    DIR/ckpt-000000200/manifest.json                       written last, by rank 0

A checkpoint is complete when its manifest exists: every rank writes its file under a
temporary name, fsyncs and renames it; the ranks then agree that all of them succeeded,
and only then does rank 0 write the manifest (again temporary name, fsync, rename). The
manifest names each file with its size and CRC-32, the run's identity (world size, model
size and every option that may not change on ``--resume``), its whole configuration, the
run's provenance (:mod:`fdahpc.provenance`: versions, kernels, hosts; one record per
segment) and the run file's row counts. Rank 0 keeps the newest ``keep`` complete
checkpoints and removes older ones and any incomplete leftovers.

Files are data, never code: rank files are ``torch.save`` archives of tensors and plain
Python values, read back with ``torch.load(weights_only=True)``, which refuses any other
object, after their size and checksum matched the manifest, so a truncated, damaged or
foreign file is refused with one line. The checksum guards against damage, not against
someone who also rewrites the manifest; what keeps a crafted file from running code is
``weights_only``.
NumPy arrays round-trip (stored as tensors, tagged).
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import time
import zlib
from typing import Any, NamedTuple

import numpy as np
import torch

from . import faults
from .config import RESUMABLE
from .metrics import check_writable
from .renamed import current_options

__all__ = ["MANIFEST", "CheckpointError", "Resumed", "identity", "check_folder", "save", "latest", "resolve",
           "read_manifest", "check_identity", "changed_options", "load_rank", "find", "open_for_resume", "save_or_warn"]

MANIFEST = "manifest.json"
FORMAT = "fdahpc-checkpoint"
VERSION = 2  # 2: the identity holds every option that is not resumable, and the manifest the whole config
_NAME = re.compile(r"^ckpt-(\d{9})$")
_NDARRAY = "__ndarray__"
log = logging.getLogger("fdahpc")


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or read; the message is one line with the fix."""


def _rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def _folder(root: str, position: int) -> str:
    return os.path.join(root, f"ckpt-{position:09d}")


def _options(cfg) -> dict[str, Any]:
    """Every option of ``cfg`` as the manifest stores it (JSON values)."""
    return json.loads(cfg.to_json())


def identity(cfg, world_size: int, params: int) -> dict[str, Any]:
    """What must match between a checkpoint and the run resuming it: the world size, the
    model's size and every option not marked resumable in :mod:`fdahpc.config` (the
    strategy's Θ, τ, learning rates, ... as well as the model, data and partition)."""
    return dict(world_size=world_size, params=params,
                **{name: value for name, value in _options(cfg).items() if name not in RESUMABLE})


def changed_options(cfg, resumed: "Resumed | None") -> dict[str, tuple[Any, Any]]:
    """The resumable options this run changes against its checkpoint, ``{name: (old, new)}``
    (``--resume`` itself aside); they take effect, and the run file records them."""
    if resumed is None:
        return {}
    old, new = current_options(resumed.manifest.get("config", {})), _options(cfg)
    return {k: (old.get(k), new[k]) for k in sorted(RESUMABLE - {"resume"}) if old.get(k) != new[k]}


def check_folder(root: str) -> None:
    """Fail at setup, not hours later, when ``--checkpoint-dir`` cannot be written."""
    try:
        os.makedirs(root, exist_ok=True)
        probe = os.path.join(root, f".probe-{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as exc:
        raise PermissionError(f"--checkpoint-dir {root}: not writable ({exc.strerror}); choose a writable folder") from None


# Plain values only ---------------------------------------------------------------------

def _plain(obj: Any) -> Any:
    """``obj`` with NumPy arrays as tagged tensors and NumPy scalars as Python numbers, so
    that ``torch.load(weights_only=True)`` accepts it."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return {_NDARRAY: torch.from_numpy(np.ascontiguousarray(obj).copy())}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu")
    return obj


def _restore(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {_NDARRAY}:
            return obj[_NDARRAY].numpy()
        return {k: _restore(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_restore(v) for v in obj)
    return obj


# Writing -------------------------------------------------------------------------------

def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Writer:
    """The file torch.save streams into: checksums what passes (CRC-32, 3 GB/s), keeps the OSError a full disk
    raises (torch would report it as a RuntimeError), and can cut the write short for a
    test's kill (FDAHPC_FAULT=kill-checkpoint@...)."""

    def __init__(self, f, kill_at: int | None) -> None:
        self.f, self.crc, self.nbytes, self.kill_at = f, 0, 0, kill_at
        self.error: OSError | None = None

    def write(self, data) -> int:
        if self.kill_at is not None and self.nbytes + len(data) > self.kill_at:
            self.f.write(bytes(data)[: self.kill_at - self.nbytes])
            self.f.flush()
            faults.kill_self()
        try:
            n = self.f.write(data)
        except OSError as exc:
            self.error = exc
            raise
        self.crc = zlib.crc32(data, self.crc)
        self.nbytes += len(data)
        return n

    def flush(self) -> None:
        self.f.flush()


def _write_atomic(path: str, dump, kill_at: int | None = None) -> tuple[int, str]:
    """``dump(fileobj)`` into ``path`` via a temporary name, fsync and rename; (bytes, CRC-32)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            w = _Writer(f, kill_at)
            try:
                dump(w)
                f.flush()
            except Exception:
                if w.error is not None:
                    raise w.error from None
                raise
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return w.nbytes, w.crc


def save(comm, root: str, position: int, state: dict, meta: dict, keep: int = 2) -> str:
    """Collective: write this rank's ``state`` and, once every rank succeeded, the manifest.

    ``meta`` (rank 0's is used) goes into the manifest: the run's identity and the run
    file's rows. Raises :class:`CheckpointError` on every rank when any rank failed (the
    incomplete folder is removed, older checkpoints stay); returns the folder.
    """
    folder = _folder(root, position)
    error = None
    try:
        os.makedirs(folder, exist_ok=True)
        name = _rank_file(comm.rank)
        nbytes, crc = _write_atomic(os.path.join(folder, name), lambda f: torch.save(_plain(state), f),
                                    faults.checkpoint_kill_offset(position, comm.rank))
        mine = (name, nbytes, crc)
    except OSError as exc:
        error, mine = f"rank {comm.rank}: {exc.strerror or exc} ({exc.filename or folder})", None
    reports = comm.allgather_obj((error, mine))
    failed = [e for e, _ in reports if e is not None]
    if not failed and comm.is_root:
        manifest = dict(format=FORMAT, version=VERSION, position=position, written=time.time(), **meta,
                        files={n: {"bytes": b, "crc32": c} for n, b, c in (m for _, m in reports)})
        try:
            _write_atomic(os.path.join(folder, MANIFEST), lambda f: f.write(json.dumps(manifest, indent=1).encode()))
            _fsync_dir(root)
        except OSError as exc:
            failed.append(f"rank 0: {exc.strerror or exc} (manifest)")
    failed = comm.bcast_obj(failed)
    if failed:
        if comm.is_root:
            shutil.rmtree(folder, ignore_errors=True)
        raise CheckpointError(f"checkpoint {folder} not written: {failed[0]}; the previous checkpoint is kept")
    if comm.is_root:
        _prune(root, keep)
    return folder


def save_or_warn(comm, root: str, position: int, state: dict, meta: dict, unit: str = "step") -> str | None:
    """:func:`save`, where a failure (a full disk) is one warning line on rank 0 and None:
    the run goes on and the previous checkpoint stays."""
    try:
        folder = save(comm, root, position, state, meta)
    except CheckpointError as exc:
        if comm.is_root:
            log.warning("fdahpc.train: warning: %s", exc)
        return None
    if comm.is_root:
        log.info("checkpoint %s %d -> %s", unit, position, folder)
    return folder


def _prune(root: str, keep: int) -> None:
    """Keep the newest ``keep`` complete checkpoints; drop older ones and incomplete leftovers."""
    newest = _complete(root)[-keep:]
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if _NAME.match(name) and newest and path not in newest and path < newest[-1]:
            shutil.rmtree(path, ignore_errors=True)


# Reading -------------------------------------------------------------------------------

def _complete(root: str) -> list[str]:
    """Complete checkpoint folders under ``root``, oldest first."""
    if not os.path.isdir(root):
        return []
    names = sorted(n for n in os.listdir(root) if _NAME.match(n) and os.path.isfile(os.path.join(root, n, MANIFEST)))
    return [os.path.join(root, n) for n in names]


def latest(root: str) -> str | None:
    """The newest complete checkpoint under ``root`` (None when there is none)."""
    found = _complete(root)
    return found[-1] if found else None


def resolve(resume: str | None, checkpoint_dir: str | None) -> str | None:
    """The checkpoint folder ``--resume`` means: ``auto`` is the newest complete one in
    ``--checkpoint-dir`` (None: start fresh); a folder holding checkpoints means its newest."""
    if resume is None:
        return None
    if resume == "auto":
        if checkpoint_dir is None:
            raise CheckpointError("--resume auto: needs --checkpoint-dir DIR to look in; add it")
        return latest(checkpoint_dir)
    if os.path.isfile(os.path.join(resume, MANIFEST)):
        return resume
    newest = latest(resume)
    if newest is None:
        raise CheckpointError(f"--resume {resume}: no complete checkpoint there (no {MANIFEST}); "
                              "give a ckpt-* folder, or --resume auto to start fresh when there is none")
    return newest


def read_manifest(folder: str) -> dict:
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        raise CheckpointError(f"--resume {folder}: no {MANIFEST}, so the checkpoint is incomplete; resume from an older one") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"--resume {folder}: {MANIFEST} is unreadable ({exc}); resume from an older checkpoint") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"--resume {folder}: not an fdahpc checkpoint; give a folder written with --checkpoint-dir")
    if manifest.get("version") != VERSION:
        raise CheckpointError(f"--resume {folder}: checkpoint format version {manifest.get('version')}, "
                              f"this fdahpc reads version {VERSION}; resume with the fdahpc that wrote it")
    return manifest


def check_identity(manifest: dict, expected: dict, folder: str) -> None:
    """Refuse a checkpoint of another run: one line naming each difference (options by their flag)."""
    def name(k: str) -> str:
        return k.replace("_", " ") if k in ("world_size", "params") else "--" + k.replace("_", "-")

    diffs = [f"{name(k)} {manifest.get(k)!r} (this run: {v!r})" for k, v in expected.items() if manifest.get(k) != v]
    if diffs:
        raise CheckpointError(f"--resume {folder}: written by a different run: {'; '.join(diffs)}; "
                              "resume with the same settings or start without --resume")


def load_rank(folder: str, manifest: dict, rank: int) -> dict:
    """This rank's state, after checking its size and CRC-32 against the manifest."""
    name = _rank_file(rank)
    entry = manifest.get("files", {}).get(name)
    path = os.path.join(folder, name)
    if entry is None:
        raise CheckpointError(f"--resume {folder}: the manifest lists no {name}; the checkpoint was written by other ranks")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CheckpointError(f"--resume {folder}: cannot read {name} ({exc.strerror}); resume from an older checkpoint") from None
    if len(data) != entry.get("bytes") or zlib.crc32(data) != entry.get("crc32"):
        raise CheckpointError(f"--resume {folder}: {name} does not match its manifest (truncated or modified); "
                              "resume from an older checkpoint")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # the unpickler refuses anything but tensors and plain values
        raise CheckpointError(f"--resume {folder}: {name} is not a plain tensor archive ({type(exc).__name__}); "
                              "refusing to load it") from None
    return _restore(state)


class Resumed(NamedTuple):
    folder: str
    manifest: dict
    state: dict  # this rank's


def find(cfg) -> tuple[str, dict] | None:
    """``--resume``: the checkpoint folder it names and its manifest; None for a fresh start
    (no ``--resume``, or ``auto`` with no complete checkpoint yet)."""
    folder = resolve(cfg.resume, cfg.checkpoint_dir)
    return None if folder is None else (folder, read_manifest(folder))


def prepare(cfg, comm, stem: str) -> tuple[tuple[str, dict] | None, str]:
    """Collective start of a run, both modes: check ``--checkpoint-dir``, find the
    checkpoint to resume, and agree on the run file (the resumed run's, ``--out``, or
    ``runs/STEM-<time>.h5`` with rank 0's timestamp), which rank 0 checks is writable.
    Returns (what :func:`find` found, the run file)."""
    import time

    if cfg.checkpoint_dir:
        check_folder(cfg.checkpoint_dir)
    found = find(cfg)
    default = found[1]["run_file"] if found else os.path.join("runs", f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}.h5")
    out = comm.bcast_obj(cfg.out or default)
    if comm.is_root:
        check_writable(out)
    return found, out


def open_for_resume(cfg, found: tuple[str, dict], rank: int, world_size: int, params: int) -> Resumed:
    """This rank's state from the checkpoint ``find`` returned, checked against this run."""
    folder, manifest = found
    # A checkpoint written before an option was renamed names it the old way.
    check_identity(current_options(manifest), identity(cfg, world_size, params), folder)
    return Resumed(folder, manifest, load_rank(folder, manifest, rank))
