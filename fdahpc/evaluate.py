"""Test accuracy of the averaged model, without touching the workers' local models.

The workers' parameters (and float buffers such as BatchNorm statistics) are copied into
a separate evaluation replica and averaged there (counted as ``eval`` traffic, never as
training traffic). Each rank then scores its own slice of the test set and one tiny
AllReduce adds up the counts, so evaluation costs 1/K of the test set per rank.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .comm import Communicator
from .params import FlatParams

__all__ = ["Evaluator"]


class Evaluator:
    def __init__(self, comm: Communicator, replica: nn.Module, x_test: np.ndarray, y_test: np.ndarray, batch_size: int = 1000) -> None:
        self.comm = comm
        self.replica = replica
        self.flat = FlatParams(replica)
        self.x = torch.from_numpy(x_test[comm.rank :: comm.world_size])
        self.y = torch.from_numpy(y_test[comm.rank :: comm.world_size])
        self.batch_size = batch_size

    def averaged_model(self, w: torch.Tensor, model: nn.Module) -> nn.Module:
        """Load the average over ranks of (``w``, ``model``'s float buffers) into the replica."""
        self.flat.w.copy_(w)
        self.comm.allreduce_mean_(self.flat.w, "eval")
        for mine, theirs in zip(self.replica.buffers(), model.buffers()):
            mine.copy_(theirs)
            if mine.is_floating_point():
                self.comm.allreduce_mean_(mine, "eval")
        return self.replica

    @torch.no_grad()
    def evaluate(self, w: torch.Tensor, model: nn.Module) -> tuple[float, float]:
        """(accuracy, mean cross-entropy) of the averaged model on the whole test set."""
        replica = self.averaged_model(w, model)
        replica.eval()
        totals = np.zeros(3)  # loss sum, correct, count
        for i in range(0, len(self.y), self.batch_size):
            xb, yb = self.x[i : i + self.batch_size], self.y[i : i + self.batch_size]
            logits = replica(xb)
            totals[0] += nn.functional.cross_entropy(logits, yb, reduction="sum").item()
            totals[1] += (logits.argmax(1) == yb).sum().item()
            totals[2] += len(yb)
        self.comm.allreduce_sum_(totals, "eval")
        return totals[1] / totals[2], totals[0] / totals[2]
