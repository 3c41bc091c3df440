"""torch.distributed backend: NCCL when the model lives on a GPU, gloo on the CPU.

The collectives take the buffers where they are: a tensor on the communicator's device
is reduced in place (the flat model, FDA's monitoring state); a NumPy array or a tensor
elsewhere (evaluation counts, the stop agreement) goes through a device copy. Messages
between two ranks (the semi-asynchronous coordinator) need MPI's probe, which
torch.distributed lacks, so that mode asks for ``--backend mpi``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch

from .base import Communicator, Request, Status
from .launch import Launch

__all__ = ["TorchCommunicator"]

_P2P = "point-to-point messages (the semi-asynchronous mode) need --backend mpi: torch.distributed cannot probe for them"


class _Work(Request):
    """A torch.distributed async work handle."""

    def __init__(self, work) -> None:
        self._work = work

    def test(self) -> bool:
        return bool(self._work.is_completed())

    def wait(self) -> None:
        self._work.wait()


class TorchCommunicator(Communicator):
    """One process group over every rank of ``launch``; ``backend`` is nccl or gloo."""

    point_to_point = False

    def __init__(self, launch: Launch, device: torch.device, backend: str, timeout_s: float = 600.0) -> None:
        super().__init__()
        import torch.distributed as dist

        self._dist = dist
        self.launch = launch
        self.rank, self.world_size = launch.rank, launch.world_size
        self.device = device
        self.backend = backend
        # Before the group exists: torch.distributed.nn.functional gives its collectives the
        # default argument ``group=group.WORLD``, evaluated when the module is first imported.
        # It is imported lazily with torch._dynamo, i.e. by the first optimizer a run builds;
        # imported after init_process_group, those defaults keep the world group alive, so
        # destroy_process_group() in close() frees nothing and gloo's three threads
        # (pt_gloo_runloop x2, gloo_tcp_loop) run on into interpreter teardown, where the
        # group's destructor runs in no fixed order while the peers are already gone: the
        # "terminate called without an active exception" of a finished job under load
        # (tests/test_torch_backend.py checks that close() leaves no gloo thread behind).
        import torch.distributed.nn.functional  # noqa: F401

        init = "env://" if launch.env_store else f"tcp://{launch.master_addr}:{launch.master_port}"
        extra = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, init_method=init, rank=launch.rank, world_size=launch.world_size,
                                timeout=timedelta(seconds=timeout_s), **extra)
        # NCCL reduces device memory only; gloo reduces CPU and CUDA tensors alike.
        self._staged = backend == "nccl"

    def close(self) -> None:
        # Leave together: a rank that tears its sockets down while a peer is still in the
        # last collective makes that peer's gloo threads terminate the process.
        if self._dist.is_initialized():
            self._dist.barrier()
            self._dist.destroy_process_group()

    def _tensor(self, buf) -> tuple[torch.Tensor, Callable[[], None]]:
        """``buf`` as a tensor the backend can reduce, and how to copy the result back."""
        t = torch.from_numpy(buf) if isinstance(buf, np.ndarray) else buf
        if not t.is_contiguous():
            raise ValueError("buffer is not contiguous: reduce a flat parameter buffer (fdahpc.params.FlatParams)")
        if not self._staged or t.device == self.device:
            return t, lambda: None
        on_device = t.to(self.device)
        return on_device, lambda: t.copy_(on_device)

    def _allreduce_sum(self, buf) -> None:
        t, back = self._tensor(buf)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.SUM)
        back()

    def _allreduce_mean(self, buf) -> None:
        if self.backend == "nccl" and isinstance(buf, torch.Tensor) and buf.device == self.device and buf.is_floating_point():
            self._dist.all_reduce(buf, op=self._dist.ReduceOp.AVG)  # NCCL scales inside the reduction: no extra pass
        else:
            super()._allreduce_mean(buf)

    def _iallreduce_mean(self, buf) -> Request:
        if not (isinstance(buf, torch.Tensor) and buf.is_floating_point() and (buf.device == self.device or not self._staged)):
            return super()._iallreduce_mean(buf)  # staged copies: blocking
        if self.backend == "nccl":
            return _Work(self._dist.all_reduce(buf, op=self._dist.ReduceOp.AVG, async_op=True))
        buf *= 1.0 / self.world_size  # as the blocking mean would, but before the sum
        return _Work(self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM, async_op=True))

    def _reduce_sum(self, buf, root: int) -> None:
        t, back = self._tensor(buf)
        self._dist.reduce(t, dst=root, op=self._dist.ReduceOp.SUM)
        if self.rank == root:
            back()

    def _bcast(self, buf, root: int) -> None:
        t, back = self._tensor(buf)
        self._dist.broadcast(t, src=root)
        back()

    def _allgather(self, arr: np.ndarray) -> np.ndarray:
        t, _ = self._tensor(arr.copy())
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        self._dist.all_gather(parts, t)
        return torch.stack(parts).cpu().numpy()

    def allgather_obj(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        box = [obj]
        self._dist.broadcast_object_list(box, src=root)
        return box[0]

    def barrier(self) -> None:
        self._dist.barrier()

    def abort(self, code: int = 1) -> None:
        # Under mpirun, MPI ends every rank. Under torchrun or srun (--kill-on-bad-exit)
        # the launcher ends the others; a peer inside a gloo collective also fails at once
        # when this process's sockets close, and an NCCL one at the collective timeout.
        if self.launch.launcher == "mpi":
            from mpi4py import MPI

            MPI.COMM_WORLD.Abort(code)
        os._exit(code)

    def _send(self, buf, dest: int, tag: int) -> None:
        raise NotImplementedError(_P2P)

    def _isend(self, buf, dest: int, tag: int) -> Request:
        raise NotImplementedError(_P2P)

    def _recv(self, buf, source: int, tag: int) -> Status:
        raise NotImplementedError(_P2P)

    def _probe(self, source: int, tag: int, block: bool) -> Status | None:
        raise NotImplementedError(_P2P)
