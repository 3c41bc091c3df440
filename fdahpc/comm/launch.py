"""Who started this process: its rank, the job's size, its place on the node, and where
the ranks meet (the rendezvous address of torch.distributed).

Three launchers are understood, checked in this order:

- **torchrun** (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``):
  the rendezvous store is torchrun's own.
- **an MPI launcher** (``mpirun``/``mpiexec``, ``srun --mpi=pmi2``): rank and size come
  from mpi4py, the node-local rank from a shared-memory split of ``COMM_WORLD``, and
  rank 0 broadcasts its host name and a free port.
- **a SLURM job step** (``srun`` without an MPI plugin): ``SLURM_PROCID``,
  ``SLURM_STEP_NUM_TASKS``/``SLURM_NTASKS``, ``SLURM_LOCALID``, the first host of the
  step's node list, and a port derived from the job and step ids (``MASTER_ADDR`` and
  ``MASTER_PORT`` win when set).

A launcher whose variables are only partly there is an error naming what is missing.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping

__all__ = ["Launch", "LaunchError", "detect", "env_rank", "first_host", "launched_by_mpi", "launched_by_torchrun", "slurm_step"]

# Variables the common MPI launchers (MPICH/Hydra, Open MPI, PMIx/srun, Intel MPI) export.
_MPI_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")
_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
_SLURM_VARS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_JOB_ID")


class LaunchError(ValueError):
    """The launcher's environment cannot start a torch.distributed job."""


@dataclass(frozen=True)
class Launch:
    launcher: str  # "torchrun", "mpi", "slurm" or "single"
    rank: int
    world_size: int
    local_rank: int
    local_size: int | None  # ranks on this node, when the launcher says
    master_addr: str
    master_port: int
    env_store: bool = False  # torchrun: join its rendezvous store through init_method env://


def launched_by_mpi(env: Mapping[str, str] = os.environ) -> bool:
    return any(v in env for v in _MPI_VARS)


def launched_by_torchrun(env: Mapping[str, str] = os.environ) -> bool:
    return "TORCHELASTIC_RUN_ID" in env or "RANK" in env or "WORLD_SIZE" in env


def slurm_step(env: Mapping[str, str] = os.environ) -> bool:
    """Inside a task that ``srun`` started (the batch script itself is not one)."""
    return "SLURM_STEP_ID" in env and env.get("SLURM_STEP_ID") not in ("batch", "extern") and "SLURM_PROCID" in env


def env_rank(env: Mapping[str, str] = os.environ) -> tuple[int | None, int | None]:
    """(rank, node-local rank) as the launcher exported them, before any communicator
    exists (None where it did not): who should print a start-up error."""
    def first(*names):
        value = next((env[n] for n in names if n in env), None)
        return int(value) if value is not None and value.isdigit() else None

    return (first("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"),
            first("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"))


def _require(env: Mapping[str, str], names, launcher: str) -> None:
    missing = [n for n in names if n not in env]
    if missing:
        present = [n for n in names if n in env]
        raise LaunchError(
            f"{launcher} environment incomplete: {', '.join(present) or 'some variables'} set but {', '.join(missing)} "
            f"missing; start the job with torchrun, srun or mpirun, or export all of {', '.join(names)}")


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise LaunchError(f"{name}={env[name]!r}: not an integer; check the launcher's environment") from None


def first_host(nodelist: str) -> str:
    """The first host of a SLURM host list: ``gpu[03-04,07],login1`` → ``gpu03``."""
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            end = i
            break
    first = nodelist[:end].strip()
    # Every bracket group contributes its first value (keeping zero padding).
    host = re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[-,]", m.group(1))[0], first)
    if not host:
        raise LaunchError(f"SLURM node list {nodelist!r}: empty; set MASTER_ADDR to the first node's address")
    return host


def _tasks_on_node(spec: str, node: int) -> int | None:
    """``SLURM_STEP_TASKS_PER_NODE`` such as ``4(x2),3``: the count on node ``node``."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[node] if node < len(counts) else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _from_torchrun(env: Mapping[str, str]) -> Launch:
    _require(env, _TORCHRUN_VARS, "torchrun")
    local_size = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else None
    return Launch("torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK"), local_size,
                  env["MASTER_ADDR"], _int(env, "MASTER_PORT"), env_store=True)


def _from_mpi(env: Mapping[str, str]) -> Launch:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise LaunchError(f"started by an MPI launcher but mpi4py cannot be imported ({exc}); pip install 'fdahpc[mpich]'") from None
    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = node.Get_rank(), node.Get_size()
    node.Free()
    where = None
    if world.Get_rank() == 0:
        where = (env.get("MASTER_ADDR") or socket.gethostname(), int(env.get("MASTER_PORT") or _free_port()))
    addr, port = world.bcast(where, root=0)
    return Launch("mpi", world.Get_rank(), world.Get_size(), local_rank, local_size, addr, port)


def _from_slurm(env: Mapping[str, str]) -> Launch:
    size_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
    nodes_var = "SLURM_STEP_NODELIST" if "SLURM_STEP_NODELIST" in env else "SLURM_JOB_NODELIST"
    _require(env, (*_SLURM_VARS, size_var, nodes_var), "SLURM")
    local_size = None
    if "SLURM_STEP_TASKS_PER_NODE" in env and "SLURM_NODEID" in env:
        local_size = _tasks_on_node(env["SLURM_STEP_TASKS_PER_NODE"], _int(env, "SLURM_NODEID"))
    addr = env.get("MASTER_ADDR") or first_host(env[nodes_var])
    if "MASTER_PORT" in env:
        port = _int(env, "MASTER_PORT")
    else:  # the same on every task of the step, different for concurrent jobs and steps
        step = int(env["SLURM_STEP_ID"]) if env.get("SLURM_STEP_ID", "").isdigit() else 0
        port = 20000 + (_int(env, "SLURM_JOB_ID") * 16 + step) % 40000
    return Launch("slurm", _int(env, "SLURM_PROCID"), _int(env, size_var), _int(env, "SLURM_LOCALID"), local_size, addr, port)


def detect(env: Mapping[str, str] = os.environ) -> Launch:
    """The launch this process belongs to (a one-rank job when no launcher is found)."""
    if launched_by_torchrun(env):
        return _from_torchrun(env)
    if launched_by_mpi(env):
        return _from_mpi(env)
    if slurm_step(env):
        return _from_slurm(env)
    return Launch("single", 0, 1, 0, 1, "127.0.0.1", int(env.get("MASTER_PORT") or _free_port()))
