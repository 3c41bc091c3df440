"""The Quadratic Synchronization Rule: rounds that lengthen as the learning rate falls.

Gu, Lyu, Arora, Zhang, Huang, "A Quadratic Synchronization Rule for Distributed Deep
Learning" (ICLR 2024, arXiv 2310.14423): with η_t the learning rate of a round's first step,
the round lasts

    H = max(H_base, ⌊(α / η_t)²⌋)

local steps, and H_base during the learning-rate warm-up. The authors' code (their
``LocalOptimizer.adjust_h``) takes η from the optimizer right after an average, i.e. the
rate the next round starts with, as here; it also caps H at the steps left in the run,
which fdahpc leaves out: the run's end synchronizes anyway (the held model,
:meth:`~.base.Synchronizer.settle`), so a round cut by the end costs the same one sync.

The constants, when not given, are the paper's ImageNet settings for the local optimizer's
family: Local AdamW on ViT-B, H_base = 4, α = 0.0175 at a peak of 8e-3 (the authors' released
``example-run-vit-localadamw-resume.sh``: ``--init-h 4 --min-h 4 --alpha 0.0175 --max-lr 0.008``);
Local SGD with momentum on ResNet (peak 0.8), H_base = 2, α = 0.2, as read from the paper's
text (no released script states them; their ResNet recipes leave α at 0, a fixed H).
α is an absolute learning rate, so ⌊(α/η)²⌋ at the peak depends on the peak the user
gives (fdahpc's Adam default 1e-3: H = 306 at the peak); tune α with the peak.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..options import QSROptions
from .base import BuildContext, Trigger, trigger

__all__ = ["QSRTrigger", "paper_constants"]

#: A round that outlasts any run (the learning rate reached 0).
NEVER = 2 ** 62


def paper_constants(optimizer: str | None) -> tuple[int, float]:
    """(H_base, α) of the QSR paper for a local optimizer family: SGD (sgd, momentum,
    nesterov) or Adam (adam, adamw; also when unknown)."""
    return (2, 0.2) if optimizer in ("sgd", "momentum", "nesterov") else (4, 0.0175)


@trigger("qsr")
class QSRTrigger(Trigger):
    """Synchronize when the round of H steps (fixed at its start from the learning rate) ends."""

    Options = QSROptions
    reads_lr = True

    def __init__(self, h_base: int, alpha: float, lr_at: Callable[[int], float], lr_warmup_end: int = 0) -> None:
        if h_base < 1 or not alpha > 0:
            raise ValueError(f"QSR: H_base {h_base} must be >= 1 and alpha {alpha} > 0")
        self.h_base, self.alpha, self.lr_at, self.lr_warmup_end = int(h_base), float(alpha), lr_at, int(lr_warmup_end)
        self.h = self.period(1)
        self.next_at = self.h

    @classmethod
    def build(cls, ctx: BuildContext, options: QSROptions) -> "QSRTrigger":
        if ctx.lr_at is None:
            raise ValueError("--trigger qsr: reads the learning rate of each round's first step; pass optimizer= "
                             "(ModelAverager) so that it can")
        h_base, alpha = paper_constants(ctx.optimizer)
        h_base = options.qsr_h_base if options.qsr_h_base is not None else h_base
        alpha = options.qsr_alpha if options.qsr_alpha is not None else alpha
        return cls(h_base, alpha, ctx.lr_at, ctx.lr_warmup_end)

    def period(self, step: int) -> int:
        """H of a round whose first step is ``step`` (the trigger's count, from 1)."""
        if step <= self.lr_warmup_end:
            return self.h_base
        lr = self.lr_at(step)
        if lr <= 0:  # a schedule decayed to 0 (past the run's last step): the round never ends
            return NEVER
        return max(self.h_base, min(NEVER, math.floor((self.alpha / lr) ** 2)))

    def should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor | None, loss: float | None = None) -> bool:
        if step < self.next_at:
            return False
        self.h = self.period(step + 1)
        self.next_at = step + self.h
        self.record("qsr", h=self.h)
        return True

    _state = ("h", "next_at")
