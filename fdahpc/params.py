"""One contiguous float32 buffer per model, with the parameters as views into it.

Averaging a model is then a single AllReduce of one buffer (no packing, no per-tensor
calls), and the strategies do their math on a flat vector ``w``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["FlatParams", "flat_buffer"]


def flat_buffer(dim: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """An uninitialized float32 vector for parameters that MPI will reduce.

    On the CPU it is allocated through NumPy, which asks Linux for transparent huge pages
    on large arrays (``torch.empty`` does not): MPI's reductions then run about 1.3x
    faster on a multi-million-parameter buffer (benchmarks/allreduce_overhead.py).
    """
    if torch.device(device).type == "cpu":
        return torch.from_numpy(np.empty(dim, dtype=np.float32))
    return torch.empty(dim, dtype=torch.float32, device=device)


class FlatParams:
    """Moves ``model``'s trainable parameters into one flat buffer, in place.

    Build it *before* the optimizer: the parameters stay the same ``nn.Parameter``
    objects, only their storage moves. ``flat.w`` is the live buffer: writing into it
    changes the model.

    With ``buffers=True`` the model's floating-point buffers (BatchNorm running
    statistics) follow the parameters in the same storage: ``flat.state`` is then the
    whole model as one vector (what a semi-asynchronous client uploads), and ``flat.w``
    its first ``dim`` entries. Without it ``flat.state`` is ``flat.w``.
    """

    def __init__(self, model: nn.Module, buffers: bool = False) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("model has no trainable parameters: nothing to synchronize")
        device = params[0].device
        owned = [(mod, name, b) for mod in model.modules() for name, b in mod._buffers.items()
                 if buffers and b is not None and b.is_floating_point()]
        self.dim = sum(p.numel() for p in params)
        self.state = flat_buffer(self.dim + sum(b.numel() for _, _, b in owned), device)
        self.w = self.state[: self.dim]
        offset = 0
        for p in params:
            n = p.numel()
            view = self.state[offset : offset + n].view_as(p)
            view.copy_(p.data)
            p.data = view
            offset += n
        for mod, name, b in owned:
            view = self.state[offset : offset + b.numel()].view_as(b)
            view.copy_(b)
            mod._buffers[name] = view
            offset += b.numel()
        self._params = params

    def is_flat(self) -> bool:
        """True while every parameter still lives in the buffer (an optimizer or ``.to()`` can break that)."""
        base = self.w.untyped_storage().data_ptr()
        return all(p.data.untyped_storage().data_ptr() == base for p in self._params)
