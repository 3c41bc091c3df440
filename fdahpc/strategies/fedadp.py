"""FedAdp: weight each node's update by how well it aligns with the global update.

Wu, Wang, "Fast-Convergent Federated Learning with Adaptive Weighting", IEEE TCCN 2021,
arXiv 2012.00661.

In an AllReduce world a round costs, with exact angles, two full AllReduces (the global
update ``g``, then the weighted update ``Σ ψ_i Δ_i``) and an allgather of three scalars
per node. With ``--fedadp-angles sketch`` each node allgathers an AMS sketch of its
update instead; ``⟨Δ_i, g⟩`` and ``||g||²`` are estimated from the sketches (linear, so
``sk(g) = Σ (n_i/n) sk(Δ_i)``), and a round needs a single full AllReduce.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..aggregate import FedAdpWeights, apply_update, sketched_cosines
from ..choices import unknown
from ..comm import Communicator
from ..options import ANGLE_MODES, FedAdpOptions
from .base import BuildContext, Rule, rule
from .participation import Participation

if TYPE_CHECKING:
    from ..sketch import AmsSketch  # imports Numba: only a sketched run builds one (BuildContext.sketch)

__all__ = ["FedAdpRule"]


@rule("fedadp")
class FedAdpRule(Rule):
    Options = FedAdpOptions
    needs_anchor = True

    def __init__(self, comm: Communicator, participation: Participation, num_samples: int, *, alpha: float = 5.0,
                 angles: str = "exact", sketch: AmsSketch | None = None) -> None:
        if angles not in ANGLE_MODES:
            raise unknown("--fedadp-angles", angles, ANGLE_MODES)
        if angles == "sketch" and sketch is None:
            raise ValueError("fedadp with sketched angles needs an AmsSketch of the model's dimension")
        self.comm = comm
        self.participation = participation
        self.num_samples = int(num_samples)
        self.weights = FedAdpWeights(comm.world_size, alpha)
        self.angles = angles
        self.sketch = sketch
        self._delta: torch.Tensor | None = None

    @classmethod
    def needs_sketch(cls, options: FedAdpOptions) -> bool:
        return options.fedadp_angles == "sketch"

    @classmethod
    def build(cls, ctx: BuildContext, o: FedAdpOptions) -> "FedAdpRule":
        return cls(ctx.comm, ctx.participation, ctx.num_samples, alpha=o.fedadp_alpha, angles=o.fedadp_angles,
                   sketch=ctx.sketch if cls.needs_sketch(o) else None)

    def aggregate(self, w: torch.Tensor, anchor: torch.Tensor) -> None:
        part = self.participation
        if self._delta is None:
            self._delta = torch.empty_like(w)
        delta = torch.sub(w, anchor, out=self._delta)  # zero on non-participants
        n_i = float(self.num_samples) if part.active else 0.0
        n, sq_norms, dots, g_sq = (self._exact_stats if self.angles == "exact" else self._sketch_stats)(delta, n_i)
        p = part.ranks
        psi = self.weights.update(p, n[p], dots[p], sq_norms[p], g_sq)
        psi_all = np.zeros(self.comm.world_size)
        psi_all[p] = psi
        delta.mul_(float(psi_all[self.comm.rank]))
        self.comm.allreduce_sum_(delta, "model")
        w.copy_(anchor)
        apply_update(w, delta)
        angles = np.full(self.comm.world_size, np.nan)
        angles[p] = self.weights.angles[p]
        self.record("round", weights=psi_all, angles=angles)

    def _exact_stats(self, delta: torch.Tensor, n_i: float):
        # The angle does not depend on the scale of g, so Σ n_i Δ_i serves without n.
        g = delta * n_i
        self.comm.allreduce_sum_(g, "model")
        mine = np.array([n_i, float(torch.dot(delta, delta)), float(torch.dot(delta, g))])
        stats = self.comm.allgather(mine, "model")
        return stats[:, 0], stats[:, 1], stats[:, 2], float(torch.dot(g, g))

    def _sketch_stats(self, delta: torch.Tensor, n_i: float):
        sk = self.sketch.sketch(delta) if delta.device.type == "cpu" else self.sketch.sketch_torch(delta).cpu().numpy()
        mine = np.concatenate([[n_i], sk.ravel()]).astype(np.float32)
        stats = self.comm.allgather(mine, "model").astype(np.float64)
        n = stats[:, 0]
        cos = sketched_cosines(n, stats[:, 1:].reshape(-1, self.sketch.rows, self.sketch.cols))
        return n, np.ones_like(n), cos, 1.0  # passed on as (cos, 1, 1)

    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.weights.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights.load_state_dict(state["weights"])
