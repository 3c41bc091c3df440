"""FedOpt without a server: FedAvgM and FedAdam applied to the AllReduced pseudo-gradient.

Reddi, Charles, Zaheer, Garrett, Rush, Konečný, Kumar, McMahan, "Adaptive Federated
Optimization", ICLR 2021, arXiv 2003.00295 (FedAdam); Hsu, Qi, Brown, "Measuring the
Effects of Non-Identical Data Distribution for Federated Visual Classification",
arXiv 1909.06335 (FedAvgM).

There is no server rank: after the model AllReduce every rank holds the same mean and an
identical replica of the server state, and applies the same deterministic step. The
server model is the last synchronized model ``w_t0``, which the synchronizer already
keeps, so any trigger (periodic rounds, LinearFDA, SketchFDA) can drive these rules.
"""

from __future__ import annotations

from typing import Any

import torch

from ..aggregate import FedAdam, FedAvgM, ServerOptimizer
from ..comm import Communicator
from ..options import FedAdamOptions, FedAvgMOptions
from .base import BuildContext, Rule, rule
from .participation import Participation, participant_mean_

__all__ = ["ServerOptRule", "FedAvgMRule", "FedAdamRule"]


class ServerOptRule(Rule):
    """The participants' mean, then a server optimizer's step from the last global model."""

    needs_anchor = True

    def __init__(self, comm: Communicator, participation: Participation, optimizer: ServerOptimizer,
                 samples: int | None = None) -> None:
        self.comm = comm
        self.participation = participation
        self.optimizer = optimizer
        self.samples = samples  # this rank's n_i for a sample-weighted mean (None: uniform)
        self._server: torch.Tensor | None = None
        self._mean_drift_sq = 0.0

    def aggregate(self, w: torch.Tensor, anchor: torch.Tensor) -> None:
        participant_mean_(self.comm, self.participation, w, anchor, self.samples)
        if self._server is None:
            self._server = torch.empty_like(anchor)
        # ||mean - w_t0||^2 while the mean is at hand (the exact variance of FDA's theta auto needs it).
        torch.sub(w, anchor, out=self._server)
        self._mean_drift_sq = float(torch.dot(self._server, self._server))
        # The step updates the server model in place; anchor stays read-only for the trigger.
        self._server.copy_(anchor)
        self.optimizer.step(self._server, w)
        w.copy_(self._server)

    def mean_drift_sq(self, old_anchor: torch.Tensor, new_anchor: torch.Tensor) -> float:
        return self._mean_drift_sq

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


def _given(**values):
    """The options the user set; the others keep the optimizer's own defaults."""
    return {k: v for k, v in values.items() if v is not None}


@rule("fedavgm")
class FedAvgMRule(ServerOptRule):
    Options = FedAvgMOptions

    @classmethod
    def build(cls, ctx: BuildContext, o: FedAvgMOptions) -> "FedAvgMRule":
        return cls(ctx.comm, ctx.participation, FedAvgM(ctx.dim, beta=o.server_momentum, **_given(eta_s=o.server_lr)),
                   ctx.samples_if(o.weighting))


@rule("fedadam")
class FedAdamRule(ServerOptRule):
    Options = FedAdamOptions

    @classmethod
    def build(cls, ctx: BuildContext, o: FedAdamOptions) -> "FedAdamRule":
        beta_1, beta_2 = o.server_betas
        return cls(ctx.comm, ctx.participation,
                   FedAdam(ctx.dim, beta_1=beta_1, beta_2=beta_2, tau=o.server_tau,
                           bias_correction=o.server_bias_correction, **_given(eta_s=o.server_lr)),
                   ctx.samples_if(o.weighting))
