"""Client sampling: which workers take part in the current round.

Every rank draws the same ``C`` of ``K`` workers from ``(seed, round)``, so no message
is needed to agree. Non-participants skip the round's training; their model stays the
global one, so their drift is zero and the rules can average over the participants by
rescaling the drift of the all-rank mean (see :func:`participant_mean_`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..comm import Communicator
from ..streams import PARTICIPATION, stream

__all__ = ["Participation", "participant_mean_"]


class Participation:
    def __init__(self, rank: int, world_size: int, per_round: int | None, seed: int) -> None:
        per_round = world_size if per_round is None else per_round
        if not 1 <= per_round <= world_size:
            raise ValueError(f"--clients-per-round {per_round}: must be in [1, {world_size}] (the number of ranks)")
        self.rank, self.world_size, self.count, self.seed = rank, world_size, per_round, seed
        self.round = 0
        self._draw()

    @property
    def sampling(self) -> bool:
        return self.count < self.world_size

    def _draw(self) -> None:
        if self.sampling:
            rng = stream(self.seed, PARTICIPATION, self.round)
            self.ranks = np.sort(rng.choice(self.world_size, self.count, replace=False))
        else:
            self.ranks = np.arange(self.world_size)
        self.active = bool(np.isin(self.rank, self.ranks))

    def next_round(self) -> None:
        self.round += 1
        self._draw()

    def state_dict(self) -> dict[str, Any]:
        return {"round": self.round}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round = state["round"]
        self._draw()


def participant_mean_(comm: Communicator, part: Participation, w: torch.Tensor, anchor: torch.Tensor | None,
                      samples: int | None = None) -> None:
    """``w`` ← mean of the participants' models, on every rank, with one AllReduce.

    Non-participants hold ``anchor`` (they did not train), so the all-rank mean is
    ``anchor + (C/K)·mean_C(u)``; rescaling its drift by ``K/C`` recovers the
    participants' mean without a sub-communicator.

    With ``samples`` (this rank's sample count n_i) the mean is McMahan's
    ``Σ n_i w_i / Σ n_i`` over the participants: an 8-byte AllReduce of the counts, then
    each rank scales its model by ``n_i / n`` (0 when left out) and the models are summed.
    """
    if samples is not None:
        mine = float(samples) if part.active else 0.0
        total = comm.allreduce_sum_(np.array([mine]), "model")[0]
        w.mul_(mine / total)
        comm.allreduce_sum_(w, "model")
        return
    comm.allreduce_mean_(w, "model")
    if part.sampling:
        w.sub_(anchor).mul_(part.world_size / part.count).add_(anchor)
