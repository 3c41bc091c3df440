"""Federated Dynamic Averaging: synchronize only when the models have drifted apart.

Theologitis, Frangias, Anestis, Samoladas, Deligiannakis, "Communication-Efficient
Distributed Deep Learning via Federated Dynamic Averaging", EDBT 2025, arXiv 2405.20988.

Every local step each worker reduces a small state ``S_k`` computed from its drift
``u_k = w_k - w_t0``; every worker evaluates the same ``H(mean S_k)``, an over-estimate of
the model variance ``Var = mean ||u_k||^2 - ||mean u_k||^2``, and the full models are
averaged only when ``H > Θ``. The trigger is independent of the aggregation rule, so it
can drive a plain mean, FedAvgM, FedAdam or FedAdp alike.

- LinearFDA: ``S_k = (||u_k||^2, <ξ, u_k>)``, ``H = mean ||u||^2 - (mean <ξ,u>)^2``;
  a deterministic bound for any unit ξ (Cauchy–Schwarz). ξ points from the previous
  synchronized model to the last one, or is a seeded random unit vector until two
  synchronizations have happened.
- SketchFDA: ``S_k = (||u_k||^2, sk(u_k))`` with an AMS sketch (:mod:`fdahpc.sketch`),
  ``H = mean ||u||^2 - M2(mean sk(u)) / (1 + ε)``; holds with probability ≥ 1 - δ.

Θ = 0 is the synchronous limit: every step synchronizes, even when the sketch's noise
makes the estimate non-positive.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..comm import Communicator
from ..sketch import AmsSketch, estimate_sq_norm
from .base import BuildContext, Trigger, trigger

__all__ = ["LinearFDATrigger", "SketchFDATrigger", "exact_variance"]


def exact_variance(comm: Communicator, u: torch.Tensor) -> float:
    """Var = mean ||u_k||^2 - ||mean u_k||^2, with one full AllReduce (counted as evaluation)."""
    local = np.array([float(torch.dot(u, u))])
    comm.allreduce_mean_(local, "eval")
    mean_u = u.clone()
    comm.allreduce_mean_(mean_u, "eval")
    return float(local[0] - torch.dot(mean_u, mean_u))


class _FDATrigger(Trigger):
    """The part both variants share: drift, the one state AllReduce, the decision, records."""

    needs_anchor = True
    threshold = True
    _state: tuple[str, ...] = ("theta",)

    def __init__(self, comm: Communicator, dim: int, theta: float, *, state_len: int,
                 log_every: int = 1, log_variance: bool = False) -> None:
        if theta < 0:
            raise ValueError(f"theta (--theta) {theta}: must be >= 0 (0 averages every step), e.g. 1.0")
        self.comm = comm
        self.theta = float(theta)
        self.log_every = log_every
        self.log_variance = log_variance
        self.state = torch.zeros(state_len, dtype=torch.float32)  # what goes on the wire, moved beside w
        self.state_bytes = 4 * state_len
        self._u: torch.Tensor | None = None  # drift scratch, allocated beside w on first use

    def should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor) -> bool:
        if self._u is None:
            self._u = torch.empty_like(w)
            self.state = self.state.to(w.device)
        u = torch.sub(w, anchor, out=self._u)
        # The state is computed and reduced where w lives; only the reduced state (8 bytes
        # for LinearFDA, 5 KB for SketchFDA) comes to the host for the decision.
        state = self.comm.allreduce_mean_(self.local_state(u), "monitor").cpu().numpy()
        h = self.estimate(state)
        if step % self.log_every == 0:
            extra = {"variance": exact_variance(self.comm, u)} if self.log_variance else {}
            self.record("fda", h=h, **extra)
        return h > self.theta or self.theta == 0.0

    def local_state(self, u: torch.Tensor) -> torch.Tensor:
        """``S_k`` of drift ``u`` (float32, what goes on the wire, on ``u``'s device); reuses one buffer."""
        self.state[0] = torch.dot(u, u)
        self._fill_state(u, self.state[1:])
        return self.state


@trigger("linear")
class LinearFDATrigger(_FDATrigger):
    """8 bytes per step: the squared drift and its projection on ξ."""

    _state = ("theta", "xi", "syncs_seen")

    def __init__(self, comm: Communicator, dim: int, theta: float, *, seed: int = 0, **kw) -> None:
        super().__init__(comm, dim, theta, state_len=2, **kw)
        gen = torch.Generator().manual_seed(seed)
        self.xi = torch.randn(dim, generator=gen, dtype=torch.float32)
        self.xi /= torch.linalg.vector_norm(self.xi)
        self.syncs_seen = 0

    @classmethod
    def build(cls, ctx: BuildContext) -> "LinearFDATrigger":
        c = ctx.cfg
        return cls(ctx.comm, ctx.dim, c.theta, seed=c.seed, log_every=c.fda_log_every, log_variance=c.log_variance)

    def _fill_state(self, u: torch.Tensor, out: torch.Tensor) -> None:
        if self.xi.device != u.device:
            self.xi = self.xi.to(u.device)
        out[0] = torch.dot(self.xi, u)

    @staticmethod
    def estimate(state: np.ndarray) -> float:
        """H(S̄) = mean ||u||^2 - (mean <ξ, u>)^2, from the averaged state."""
        sq_norm, proj = float(state[0]), float(state[1])
        return sq_norm - proj * proj

    def on_sync(self, old_anchor: torch.Tensor, new_anchor: torch.Tensor) -> None:
        # ξ needs two synchronized models; the initial model is not one of them.
        self.syncs_seen += 1
        if self.syncs_seen < 2:
            return
        direction = new_anchor - old_anchor
        norm = torch.linalg.vector_norm(direction)
        if norm > 0:
            torch.div(direction, norm, out=self.xi)



@trigger("sketch")
class SketchFDATrigger(_FDATrigger):
    """4 + 4·l·m bytes per step: the squared drift and an AMS sketch of the drift."""

    _state = ("theta", "eps")

    def __init__(self, comm: Communicator, dim: int, theta: float, *, eps: float | None = None,
                 sketcher: AmsSketch | None = None, **kw) -> None:
        """``sketcher``: an existing AmsSketch of dimension ``dim`` to share; without one, an
        AmsSketch of its own defaults (seed 0)."""
        if sketcher is None:
            sketcher = AmsSketch(dim)
        elif sketcher.dim != dim:
            raise ValueError(f"SketchFDATrigger: the sketcher hashes {sketcher.dim} coordinates, the model has {dim}")
        rows, cols = sketcher.rows, sketcher.cols
        super().__init__(comm, dim, theta, state_len=1 + rows * cols, **kw)
        if eps is not None and not 0 <= eps < 1:
            raise ValueError(f"eps (--sketch-eps) {eps}: must be in [0, 1), e.g. {1 / np.sqrt(cols):.3f}")
        self.eps = 1.0 / np.sqrt(cols) if eps is None else float(eps)
        self.sketcher = sketcher
        self._sk = np.empty((rows, cols), dtype=np.float64)

    @classmethod
    def needs_sketch(cls, cfg) -> bool:
        return True

    @classmethod
    def build(cls, ctx: BuildContext) -> "SketchFDATrigger":
        c = ctx.cfg
        return cls(ctx.comm, ctx.dim, c.theta, sketcher=ctx.sketch, eps=c.sketch_eps,
                   log_every=c.fda_log_every, log_variance=c.log_variance)

    def _fill_state(self, u: torch.Tensor, out: torch.Tensor) -> None:
        if u.device.type == "cpu":  # the Numba kernel
            self.sketcher.sketch_into(u, self._sk)
            out.copy_(torch.from_numpy(self._sk).ravel())
        else:
            out.copy_(self.sketcher.sketch_torch(u).ravel())

    def estimate(self, state: np.ndarray) -> float:
        """H(S̄) = mean ||u||^2 - M2(mean sk(u)) / (1 + ε), from the averaged state."""
        mean_sk = state[1:].reshape(self._sk.shape).astype(np.float64)
        return float(state[0]) - estimate_sq_norm(mean_sk) / (1.0 + self.eps)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "sketch": self.sketcher.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.sketcher.load_state_dict(state["sketch"])
