"""Fixed schedules and the plain mean: Synchronous and FedAvg / Local-SGD.

Synchronous model averaging after every local step is the FDA paper's baseline
(FDA with Θ = 0). FedAvg / Local-SGD (McMahan et al., "Communication-Efficient Learning
of Deep Networks from Decentralized Data", AISTATS 2017, arXiv 1602.05629) averages
every τ local steps or every E local epochs.
"""

from __future__ import annotations

import torch

from ..comm import Communicator
from .base import BuildContext, Rule, Trigger, rule, trigger
from .participation import Participation, participant_mean_

__all__ = ["PeriodicTrigger", "EveryStepTrigger", "MeanRule", "periodic_tau"]


def periodic_tau(cfg, steps_per_epoch: int | None) -> int:
    """τ in local steps: ``--tau`` if given, else ``--local-epochs`` worth of steps."""
    if cfg.tau is not None:
        return cfg.tau
    if steps_per_epoch is None:  # a loop of the user's own (fdahpc.ModelAverager) that gave neither
        raise ValueError("local_epochs: the round length in steps needs the epoch length; give tau=STEPS "
                         "(the round length) or steps_per_epoch=")
    return max(1, round(cfg.local_epochs * steps_per_epoch))


@trigger("periodic")
class PeriodicTrigger(Trigger):
    """Synchronize every ``tau`` local steps; no monitoring traffic."""

    def __init__(self, tau: int) -> None:
        if tau < 1:
            raise ValueError(f"tau {tau}: must be >= 1 local steps")
        self.tau = int(tau)

    @classmethod
    def build(cls, ctx: BuildContext) -> "PeriodicTrigger":
        return cls(periodic_tau(ctx.cfg, ctx.steps_per_epoch))

    def should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor | None) -> bool:
        return step % self.tau == 0

    _state = ("tau",)


@trigger("every")
class EveryStepTrigger(PeriodicTrigger):
    """Synchronize after every local step (Synchronous, FDA's Θ = 0 limit)."""

    @classmethod
    def build(cls, ctx: BuildContext) -> "EveryStepTrigger":
        return cls(1)


@rule("mean")
class MeanRule(Rule):
    """The new global model is the plain average of the (participating) workers' models."""

    def __init__(self, comm: Communicator, participation: Participation, samples: int | None = None) -> None:
        self.comm = comm
        self.participation = participation
        self.samples = samples  # this rank's n_i for a sample-weighted mean (None: uniform)
        self.needs_anchor = participation.sampling

    @classmethod
    def build(cls, ctx: BuildContext) -> "MeanRule":
        return cls(ctx.comm, ctx.participation, ctx.weighting_samples)

    def aggregate(self, w: torch.Tensor, anchor: torch.Tensor | None) -> None:
        participant_mean_(self.comm, self.participation, w, anchor, self.samples)
