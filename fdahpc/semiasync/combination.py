"""A buffer rule's new global model as a linear combination, summed exactly.

``Σ_i c_i x_i + keep · w_old``, per part of the flat vector (parameters, then running
statistics), every term added in fixed point (:mod:`.exact`): the result depends neither on
the order of the buffer nor on who adds which term, so the server summing all K payloads
and hosts summing their own members' (``--aggregate hosts``) give the same bits. The rules
(:mod:`.rules`) say what the coefficients are; this module only adds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .exact import add_term, scale_bits

__all__ = ["Combination", "add_member"]


@dataclass
class Combination:
    """A rule's new global model: ``Σ_i c_i x_i + keep · w_old``, per part of the vector
    (parameters, running statistics), every sum exact (:mod:`.exact`), so that the server
    summing all K payloads and hosts summing their members' give the same bits."""

    weights: np.ndarray  # the rule's weights, as the run file records them
    params: np.ndarray  # c_i on each payload's parameter entries
    stats: np.ndarray  # c_i on its running-statistics entries
    keep_params: float  # the old global model's coefficient on its parameters
    keep_stats: float

    def bound(self, absmax: list[float], old_absmax: float) -> float:
        """``Σ |c_i| max|x_i|``, the old model's term included."""
        c = np.maximum(np.abs(self.params), np.abs(self.stats))
        return float(c @ np.asarray(absmax, dtype=np.float64)) + max(abs(self.keep_params), abs(self.keep_stats)) * old_absmax

    def start(self, old: np.ndarray, d: int, absmax: list[float]) -> tuple[np.ndarray, int]:
        """The accumulator holding the old model's term, and the scale for ``absmax`` payloads."""
        bits = scale_bits(self.bound(absmax, float(np.abs(old).max(initial=0.0))))
        acc = np.zeros(old.shape, dtype=np.int64)
        add_term(acc[:d], self.keep_params, old[:d], bits)
        add_term(acc[d:], self.keep_stats, old[d:], bits)
        return acc, bits

    def add(self, acc: np.ndarray, k: int, x: np.ndarray, d: int, bits: int) -> None:
        """Payload ``k``'s term."""
        add_member(acc, self.params[k], self.stats[k], x, d, bits)


def add_member(acc: np.ndarray, c_params: float, c_stats: float, x: np.ndarray, d: int, bits: int) -> None:
    """One payload's term in a fixed-point sum: ``c_params`` on its first ``d`` entries,
    ``c_stats`` on the rest (the server for its buffer, a host for its members)."""
    add_term(acc[:d], c_params, x[:d], bits)
    add_term(acc[d:], c_stats, x[d:], bits)
