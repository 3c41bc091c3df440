"""Communicators: the only place fdahpc talks to MPI or torch.distributed.

``make_communicator("auto")`` picks torch.distributed under torchrun (or under ``srun``
without an MPI plugin), MPI when an MPI launcher (``mpirun``/``mpiexec``,
``srun --mpi=pmi2``) started the process, and the size-1 local backend otherwise, so
``python -m fdahpc.train`` works with and without MPI installed. The communicator also
owns the device the model lives on (``comm.device``): one GPU per local rank with NCCL.
"""

from __future__ import annotations

import torch

from ..choices import unknown
from .base import ANY, PURPOSES, Communicator, Outbox, Request, Status, as_numpy
from .launch import LaunchError, detect, env_rank, launched_by_mpi, launched_by_torchrun, slurm_step
from .local import LocalCommunicator

__all__ = ["ANY", "BACKENDS", "DEVICES", "PURPOSES", "Communicator", "LaunchError", "LocalCommunicator", "Outbox",
           "Request", "Status", "as_numpy", "env_rank", "launched_by_mpi", "make_communicator", "resolve_backend"]

#: torch: NCCL for a CUDA model, gloo for a CPU one; nccl/gloo force one of them.
BACKENDS = ("auto", "mpi", "torch", "nccl", "gloo", "local")
TORCH_BACKENDS = ("torch", "nccl", "gloo")
DEVICES = ("auto", "cpu", "cuda")


def resolve_backend(backend: str) -> str:
    """``auto`` → the backend of the launcher that started this process."""
    if backend not in BACKENDS:
        raise unknown("backend", backend, BACKENDS)
    if backend != "auto":
        return backend
    if launched_by_torchrun():
        return "torch"
    if launched_by_mpi():
        return "mpi"
    return "torch" if slurm_step() else "local"


def _gpu_for(local_rank: int, local_size: int | None, backend: str) -> torch.device:
    """This rank's GPU: number ``local_rank`` among the visible ones. NCCL needs a GPU per
    rank; gloo may share them (local rank modulo the GPU count)."""
    why = f"--device cuda (backend {backend})"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise LaunchError(f"{why}: no CUDA GPU visible to this process (CUDA_VISIBLE_DEVICES, driver); use --device cpu")
    ranks = max(local_size or 0, local_rank + 1)
    if ranks > count and backend != "gloo":
        raise LaunchError(f"{why}: {ranks} ranks on this node but {count} GPU(s) visible; NCCL needs one GPU per rank: "
                          "start at most that many ranks per node (torchrun --nproc-per-node, srun --ntasks-per-node), "
                          "or share GPUs with --backend gloo")
    return torch.device("cuda", local_rank % count)


def make_communicator(backend: str = "auto", device: str = "cpu", timeout_s: float = 600.0) -> Communicator:
    """The communicator for this launch, with ``comm.device`` set (``device``: auto, cpu or cuda)."""
    if device not in DEVICES:
        raise unknown("device", device, DEVICES)
    backend = resolve_backend(backend)
    if backend == "mpi":
        if device == "cuda":
            raise LaunchError("--device cuda: --backend mpi reduces CPU buffers; use --backend torch (NCCL) for GPUs")
        try:
            from .mpi import MPICommunicator
        except ImportError as exc:
            raise ValueError(
                f"backend 'mpi': mpi4py cannot be imported ({exc}); pip install 'fdahpc[mpich]' or build mpi4py against your MPI"
            ) from None
        return MPICommunicator()
    if backend == "gloo" and device == "auto":
        device = "cpu"
    if backend == "nccl" and device == "cpu":
        raise LaunchError("--backend nccl reduces GPU tensors: use --device cuda, or --backend gloo for a CPU model")
    if backend == "nccl":
        device = "cuda"
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    launch = detect() if backend != "local" else None
    on = torch.device("cpu")
    if device == "cuda":
        where = (launch.local_rank, launch.local_size) if launch else (0, 1)
        on = _gpu_for(*where, backend)
        torch.cuda.set_device(on)
    if launch is None:
        comm = LocalCommunicator()
        comm.device = on
        return comm
    from .torch_dist import TorchCommunicator

    dist_backend = "nccl" if on.type == "cuda" and backend != "gloo" else "gloo"  # gloo also reduces CUDA tensors
    return TorchCommunicator(launch, on, dist_backend, timeout_s)
