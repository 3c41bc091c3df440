"""Scoring a model: :func:`score` (pure, one process) and the collective :class:`Evaluator`.

The semi-asynchronous server scores its global model alone with :func:`score`. The
synchronous mode scores the model a user would hold if training stopped at that step,
without touching the workers' local models:

The model is built in a separate evaluation replica by a collective ``held(out)``: the
strategy's :meth:`~fdahpc.strategies.Synchronizer.held_model` (its rule applied to a
synchronization forced at that step: the mean, a server or outer step, FedAdp's weights),
or :func:`plain_mean` for a loop without a rule. The workers' float buffers (BatchNorm
statistics, which no rule combines) are averaged into it. All of it counts as ``eval``
traffic, never as training traffic. Each rank then scores its own slice of the test set
and one tiny AllReduce adds up the counts, so evaluation costs 1/K of the test set per rank.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch
from torch import nn

from .comm import Communicator
from .data.text import TokenWindows, as_tensor
from .models import flat_outputs
from .params import FlatParams

__all__ = ["Evaluator", "Score", "plain_mean", "score", "score_batch"]

#: Samples scored per forward pass on the CPU: small enough that a batch's activations stay
#: near the core's cache (``benchmarks/scoring.py`` prints the times of other sizes; a
#: sample's logits do not depend on the batch it is in, so the accuracy is the same).
CPU_SCORE_BATCH = 128
#: ... and on an accelerator, where larger batches fill the device.
DEVICE_SCORE_BATCH = 1000


def score_batch(device: torch.device | str) -> int:
    """The default scoring batch on ``device``."""
    return CPU_SCORE_BATCH if torch.device(device).type == "cpu" else DEVICE_SCORE_BATCH


class Score(NamedTuple):
    """Sums over the scored samples; add them across ranks, then divide."""

    loss_sum: float
    correct: int
    count: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.count

    @property
    def loss(self) -> float:
        return self.loss_sum / self.count


@torch.no_grad()
def score(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int | None = None,
          per_label: int = 0) -> Score | tuple[Score, np.ndarray]:
    """Cross-entropy sum and correct predictions of ``model`` on ``(x, y)``, in eval mode.

    With ``per_label=C`` also returns the accuracy on each of the C labels (NaN for a
    label absent from ``y``): FedQS's label test on a client's validation split.
    ``x`` and ``y`` may be character windows (gathered one batch at a time); a sequence
    model's every predicted character counts as one sample. ``batch_size``: samples per
    forward pass, by default :func:`score_batch` of ``y``'s device.
    """
    batch_size = batch_size or score_batch(y.device)
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    hits = torch.zeros(max(per_label, 1), dtype=torch.long, device=y.device)
    for i in range(0, len(y), batch_size):
        xb, yb = (b.all() if isinstance(b, TokenWindows) else b for b in (x[i : i + batch_size], y[i : i + batch_size]))
        logits, yb = flat_outputs(model(xb), yb)
        count += len(yb)
        loss_sum += nn.functional.cross_entropy(logits, yb, reduction="sum").item()
        ok = logits.argmax(1) == yb
        correct += int(ok.sum().item())
        if per_label:
            hits += torch.bincount(yb[ok], minlength=per_label)
    model.train(was_training)
    result = Score(loss_sum, correct, count)
    if not per_label:
        return result
    seen = torch.bincount(y, minlength=per_label).double()
    with np.errstate(invalid="ignore", divide="ignore"):
        return result, (hits.double() / seen).cpu().numpy()


class Evaluator:
    def __init__(self, comm: Communicator, replica: nn.Module, x_test: np.ndarray, y_test: np.ndarray,
                 batch_size: int | None = None) -> None:
        self.comm = comm
        self.replica = replica
        self.flat = FlatParams(replica)
        # This rank's slice of the test set, on the replica's device once.
        device = self.flat.w.device
        self.x = as_tensor(x_test[comm.rank :: comm.world_size]).to(device)
        self.y = as_tensor(y_test[comm.rank :: comm.world_size]).to(device)
        self.batch_size = batch_size

    def held_model(self, model: nn.Module, held: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
        """Load the model to score into the replica: ``held(out)`` writes its parameters into
        ``out`` (collective), and the ranks' float buffers of ``model`` are averaged beside them."""
        held(self.flat.w)
        for mine, theirs in zip(self.replica.buffers(), model.buffers()):
            mine.copy_(theirs)
            if mine.is_floating_point():
                self.comm.allreduce_mean_(mine, "eval")
        return self.replica

    def evaluate(self, model: nn.Module, held: Callable[[torch.Tensor], torch.Tensor]) -> tuple[float, float]:
        """(accuracy, mean cross-entropy) of the held model (:meth:`held_model`) on the whole test set."""
        mine = score(self.held_model(model, held), self.x, self.y, self.batch_size)
        totals = np.array([mine.loss_sum, mine.correct, mine.count], dtype=np.float64)
        self.comm.allreduce_sum_(totals, "eval")
        return totals[1] / totals[2], totals[0] / totals[2]


def plain_mean(comm: Communicator, w: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``held`` for :meth:`Evaluator.evaluate` in a loop without an aggregation rule: the
    ranks' mean of ``w``, counted as ``eval``."""
    return lambda out: comm.allreduce_mean_(out.copy_(w), "eval")
