"""Fixed schedules and the plain mean: Synchronous and FedAvg / Local-SGD.

Synchronous model averaging after every local step is the FDA paper's baseline
(FDA with Θ = 0). FedAvg / Local-SGD (McMahan et al., "Communication-Efficient Learning
of Deep Networks from Decentralized Data", AISTATS 2017, arXiv 1602.05629) averages
every τ local steps or every E local epochs.
"""

from __future__ import annotations

import torch

from ..comm import Communicator
from ..options import MeanOptions, NoOptions, PeriodicOptions
from .base import BuildContext, Rule, Trigger, rule, trigger
from .participation import Participation, participant_mean_

__all__ = ["PeriodicTrigger", "EveryStepTrigger", "MeanRule"]


@trigger("periodic")
class PeriodicTrigger(Trigger):
    """Synchronize every ``tau`` local steps; no monitoring traffic."""

    Options = PeriodicOptions

    def __init__(self, tau: int) -> None:
        if tau < 1:
            raise ValueError(f"tau {tau}: must be >= 1 local steps")
        self.tau = int(tau)

    @classmethod
    def build(cls, ctx: BuildContext, options: PeriodicOptions) -> "PeriodicTrigger":
        return cls(options.steps(ctx.steps_per_epoch))

    def should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor | None, loss: float | None = None) -> bool:
        return step % self.tau == 0

    _state = ("tau",)


@trigger("every")
class EveryStepTrigger(PeriodicTrigger):
    """Synchronize after every local step (Synchronous, FDA's Θ = 0 limit)."""

    Options = NoOptions

    @classmethod
    def build(cls, ctx: BuildContext, options: NoOptions) -> "EveryStepTrigger":
        return cls(1)


@rule("mean")
class MeanRule(Rule):
    """The new global model is the plain average of the (participating) workers' models."""

    Options = MeanOptions

    def __init__(self, comm: Communicator, participation: Participation, samples: int | None = None) -> None:
        self.comm = comm
        self.participation = participation
        self.samples = samples  # this rank's n_i for a sample-weighted mean (None: uniform)
        self.needs_anchor = participation.sampling

    @classmethod
    def build(cls, ctx: BuildContext, options: MeanOptions) -> "MeanRule":
        return cls(ctx.comm, ctx.participation, ctx.samples_if(options.weighting))

    def aggregate(self, w: torch.Tensor, anchor: torch.Tensor | None) -> None:
        participant_mean_(self.comm, self.participation, w, anchor, self.samples)
