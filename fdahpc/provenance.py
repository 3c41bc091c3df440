"""What decided a run's bits: versions, kernels, threads, hosts, job and commit.

Bit-exact reproducibility holds only for the same wheels on the same kind of CPU with the
same thread counts: torch picks its float32 kernels by CPU (``ATEN_CPU_CAPABILITY``:
AVX-512, AVX2 or the portable ones; oneDNN by ``ONEDNN_MAX_CPU_ISA``), and a kernel that
sums in another order changes the last bits. Every run file (root attribute
``provenance``, JSON) and every checkpoint manifest (``provenance``) records:

- versions: fdahpc, Python, torch, NumPy, Numba, h5py, mpi4py and the MPI library;
- per rank, grouped: host name, CPU model, torch's CPU capability, torch and Numba
  threads, the kernel-selecting environment variables, and on GPUs the device model with
  the CUDA and NCCL versions;
- the topology: per host its ranks, their node-local ranks and the local size;
- the SLURM job id when present and the git commit when fdahpc is a checkout (``+dirty``
  when tracked files differ from it).

:func:`kernels` is the part that decides bits; a resume whose kernels differ from the
checkpoint's says so in one line (the run continues; it no longer equals an uninterrupted
run bit for bit). ``python -m fdahpc.summary --provenance RUN.h5`` prints the record.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import subprocess
import sys
from typing import Any

from . import __version__
from .comm.launch import env_rank
from .threads import keep_torch_threads

__all__ = ["this_rank", "gather", "kernels", "kernel_differences", "start", "segments_of", "format_lines"]

log = logging.getLogger("fdahpc")

# Environment variables that change which kernels run, or how many threads sum.
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "NUMBA_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG",
              # MPICH's Allreduce order across nodes (docs/multinode.md) and UCX's transports
              "MPIR_CVAR_ALLREDUCE_COMPOSITION", "UCX_TLS")


def _version(module: str) -> str | None:
    """The module's version; from its package metadata when the run has not imported it
    (importing Numba only to ask would cost every rank its start-up)."""
    try:
        if module in sys.modules:
            return sys.modules[module].__version__
        from importlib.metadata import version

        return version(module)
    except Exception:  # not installed, or a broken install: the record says so
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    """The checkout's commit (``+dirty`` when tracked files changed), None outside a checkout."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def this_rank(device: Any = "cpu") -> dict[str, Any]:
    """This process's kernel-deciding facts (no communication)."""
    import torch

    torch_threads = torch.get_num_threads()
    if "numba" in sys.modules:  # this rank runs Numba kernels (asking starts Numba's threading layer)
        numba_threads = keep_torch_threads(sys.modules["numba"].get_num_threads)
    else:  # what Numba would start with; importing it only to ask costs every run its start-up
        numba_threads = int(os.environ["NUMBA_NUM_THREADS"]) if os.environ.get("NUMBA_NUM_THREADS", "").isdigit() else None
    rank = dict(host=socket.gethostname(), cpu_model=_cpu_model(),
                torch_cpu_capability=torch.backends.cpu.get_cpu_capability(),
                torch_threads=torch_threads, numba_threads=numba_threads,
                env={k: os.environ[k] for k in KERNEL_ENV if k in os.environ})
    if str(device).startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or torch.cuda.current_device()
        nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
        rank.update(gpu=torch.cuda.get_device_name(index), cuda=torch.version.cuda,
                    nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl)
    return rank


def _mpi_library() -> str | None:
    mpi = sys.modules.get("mpi4py.MPI")  # only when the run uses MPI: importing it would start MPI
    if mpi is None:
        return None
    return " ".join(mpi.Get_library_version().strip().splitlines()[0].split())


def topology(places: list[tuple[str, int | None]]) -> list[dict[str, Any]]:
    """Where each rank ran, from each rank's (host, node-local rank as its launcher exported it):
    per host its ranks, their local ranks (by position among the host's ranks where the
    launcher exported none) and the local size."""
    hosts: dict[str, dict[str, Any]] = {}
    for rank, (host, local) in enumerate(places):
        entry = hosts.setdefault(host, dict(host=host, ranks=[], local_ranks=[]))
        entry["local_ranks"].append(len(entry["ranks"]) if local is None else local)
        entry["ranks"].append(rank)
    return [dict(entry, local_size=len(entry["ranks"])) for entry in hosts.values()]


def gather(comm) -> dict[str, Any]:
    """Collective: the whole record, identical on every rank. Ranks with the same facts are
    grouped (``ranks``: their rank numbers), so 44 ranks on one kind of node are one entry;
    ``topology`` says which host each rank ran on, with its local rank and the local size."""
    groups: dict[str, dict[str, Any]] = {}
    gathered = comm.allgather_obj((this_rank(comm.device), (socket.gethostname(), env_rank()[1])))
    for rank, (facts, _) in enumerate(gathered):
        key = json.dumps(facts, sort_keys=True)
        groups.setdefault(key, dict(facts, ranks=[]))["ranks"].append(rank)
    commit = comm.bcast_obj(_git_commit() if comm.is_root else None)  # one git call, not one per rank
    return dict(fdahpc=__version__, python=platform.python_version(), torch=_version("torch"), numpy=_version("numpy"),
                numba=_version("numba"), h5py=_version("h5py"), mpi4py=_version("mpi4py"), mpi_library=_mpi_library(),
                world_size=comm.world_size, device=str(comm.device), slurm_job_id=os.environ.get("SLURM_JOB_ID"),
                git_commit=commit, ranks=list(groups.values()), topology=topology([where for _, where in gathered]))


def kernels(record: dict[str, Any]) -> dict[str, Any]:
    """The part of a record that decides the bits (host names and the job id do not)."""
    per_rank = [{k: v for k, v in group.items() if k != "host"} for group in record.get("ranks", [])]
    return dict({k: record.get(k) for k in ("torch", "numpy", "numba", "world_size", "device")}, ranks=per_rank)


def kernel_differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs in :func:`kernels` between two records, as short phrases."""
    a, b = kernels(before), kernels(now)
    diffs = [f"{k} {a[k]} -> {b[k]}" for k in a if k != "ranks" and a[k] != b[k]]
    if a["ranks"] != b["ranks"]:
        fields = sorted({k for group in a["ranks"] + b["ranks"] for k in group if k != "ranks"})
        per_field = []
        for field in fields:
            old = sorted({json.dumps(g.get(field), sort_keys=True) for g in a["ranks"]})
            new = sorted({json.dumps(g.get(field), sort_keys=True) for g in b["ranks"]})
            if old != new:
                per_field.append(f"{field} {'/'.join(old)} -> {'/'.join(new)}")
        diffs += per_field or ["which ranks run on which kind of CPU"]
    return diffs


def start(comm, resumed=None, changed: dict | None = None) -> list[dict[str, Any]]:
    """Collective, at the start of a run or of a resumed segment: the records of every
    segment so far (the checkpoint's, then this one, which starts at the checkpoint's step
    or round, with the options it changed, ``{name: [old, new]}``). When the checkpoint's
    last segment ran on other kernels, rank 0 says so in one line."""
    record = dict(gather(comm), started_at=resumed.manifest.get("position", 0) if resumed is not None else 0)
    if changed:
        record["options_changed"] = {k: list(v) for k, v in changed.items()}
    history = list(resumed.manifest.get("provenance", [])) if resumed is not None else []
    if comm.is_root and history:
        diffs = kernel_differences(history[-1], record)
        if diffs:
            log.warning("fdahpc.train: note: resuming %s on other kernels than it was written with (%s); the run "
                        "continues, but it will not equal an uninterrupted run bit for bit",
                        resumed.folder, "; ".join(diffs))
    return history + [record]


def segments_of(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """The records a run file's root attributes hold ([] for files written before them)."""
    text = attrs.get("provenance", "")
    text = text.decode() if isinstance(text, bytes) else str(text)
    return json.loads(text) if text else []


def format_lines(record: dict[str, Any]) -> list[str]:
    """A record as ``key: value`` lines for a terminal."""
    lines = [f"{k}: {record[k]}" for k in record if k not in ("ranks", "topology") and record[k] not in (None, "")]
    for node in record.get("topology", []):
        lines.append(f"host {node['host']}: ranks {','.join(map(str, node['ranks']))}, local ranks "
                     f"{','.join(map(str, node['local_ranks']))} of {node['local_size']}")
    for group in record.get("ranks", []):
        ranks = group["ranks"]
        span = f"{ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 1 else ",".join(map(str, ranks))
        facts = ", ".join(f"{k} {v}" for k, v in group.items() if k != "ranks" and v not in ({}, None, ""))
        lines.append(f"ranks {span}: {facts}")
    return lines
