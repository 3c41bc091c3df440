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

from ..aggregate import ServerOptimizer
from ..comm import Communicator
from .participation import Participation, participant_mean_

__all__ = ["ServerOptRule"]


class ServerOptRule:
    model_reductions = 1
    needs_anchor = True
    round_state_bytes = 0

    def __init__(self, comm: Communicator, participation: Participation, optimizer: ServerOptimizer) -> None:
        self.comm = comm
        self.participation = participation
        self.optimizer = optimizer
        self._server: torch.Tensor | None = None

    def aggregate(self, w: torch.Tensor, anchor: torch.Tensor) -> None:
        participant_mean_(self.comm, self.participation, w, anchor)
        if self._server is None:
            self._server = torch.empty_like(anchor)
        # The step updates the server model in place; anchor stays read-only for the trigger.
        self._server.copy_(anchor)
        self.optimizer.step(self._server, w)
        w.copy_(self._server)

    def records(self) -> list[tuple[str, Any]]:
        return []

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
