"""DiLoCo's aggregation rule: an outer SGD step with Nesterov momentum on the pseudo-gradient.

Douillard, Feng, Rusu, Chhaparia, Donchev, Kuncoro, Ranzato, Szlam, Shen, "DiLoCo:
Distributed Low-Communication Training of Language Models", arXiv 2311.08105.

Each worker takes H inner AdamW steps from the last global model ``w_t0``; the models are
averaged and ``Delta = w_t0 - mean_k w_k`` is the outer gradient of an SGD step with
Nesterov momentum (outer lr 0.7, momentum 0.9): ``v <- mu v + Delta; w_t0 <- w_t0 - eta
(Delta + mu v)`` (:class:`fdahpc.aggregate.DiLoCoOuter`, torch's ``SGD(nesterov=True)``).
The paper's round is a fixed H = 500 inner steps (the ``diloco`` preset); like every rule
here it composes with any trigger, so ``--strategy diloco --trigger linear`` ends DiLoCo's
rounds by FDA's variance test instead. As with FedOpt there is no server rank: after the
model AllReduce every rank applies the same deterministic outer step to its replica.
"""

from __future__ import annotations

from ..aggregate import DiLoCoOuter
from ..options import DiLoCoOptions
from .base import BuildContext, rule
from .fedopt import ServerOptRule, _given

__all__ = ["DiLoCoRule"]


@rule("diloco")
class DiLoCoRule(ServerOptRule):
    """The participants' mean, then DiLoCo's outer Nesterov step from ``w_t0``."""

    Options = DiLoCoOptions

    @classmethod
    def build(cls, ctx: BuildContext, o: DiLoCoOptions) -> "DiLoCoRule":
        return cls(ctx.comm, ctx.participation, DiLoCoOuter(ctx.dim, mu=o.server_momentum, **_given(eta=o.server_lr)),
                   ctx.samples_if(o.weighting))
