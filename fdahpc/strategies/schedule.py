"""Fixed schedules and the plain mean: Synchronous and FedAvg / Local-SGD.

Synchronous model averaging after every local step is the FDA paper's baseline
(FDA with Θ = 0). FedAvg / Local-SGD (McMahan et al., "Communication-Efficient Learning
of Deep Networks from Decentralized Data", AISTATS 2017, arXiv 1602.05629) averages
every τ local steps or every E local epochs.
"""

from __future__ import annotations

from typing import Any

import torch

from ..comm import Communicator
from .participation import Participation, participant_mean_

__all__ = ["PeriodicTrigger", "MeanRule"]


class PeriodicTrigger:
    """Synchronize every ``tau`` local steps; no monitoring traffic."""

    state_bytes = 0
    needs_anchor = False

    def __init__(self, tau: int) -> None:
        if tau < 1:
            raise ValueError(f"tau {tau}: must be >= 1 local steps")
        self.tau = int(tau)

    def should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor | None) -> bool:
        return step % self.tau == 0

    def on_sync(self, old_anchor, new_anchor) -> None:
        pass

    def records(self) -> list[tuple[str, float]]:
        return []

    def state_dict(self) -> dict[str, Any]:
        return {"tau": self.tau}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tau = state["tau"]


class MeanRule:
    """The new global model is the plain average of the (participating) workers' models."""

    model_reductions = 1
    round_state_bytes = 0

    def __init__(self, comm: Communicator, participation: Participation) -> None:
        self.comm = comm
        self.participation = participation
        self.needs_anchor = participation.sampling

    def aggregate(self, w: torch.Tensor, anchor: torch.Tensor | None) -> None:
        participant_mean_(self.comm, self.participation, w, anchor)

    def records(self) -> list[tuple[str, Any]]:
        return []

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
