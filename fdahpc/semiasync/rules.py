"""Semi-asynchronous aggregation rules: what the server does with a full buffer of K uploads.

Papers:
- FedQS: "FedQS: Optimizing Gradient and Model Aggregation for Semi-Asynchronous Federated
  Learning", NeurIPS 2025, arXiv 2510.07664 (Mod③, Section 3.4).
- FedBuff: Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated Learning with
  Buffered Asynchronous Aggregation", AISTATS 2022, arXiv 2106.06639.

With ``w_i`` a client's final model, ``Δ_i = w_i - w_start`` its update, ``τ_i`` its staleness
and K the number of buffered uploads:

- ``fedavg``    (models):  ``w_g ← (1/K) Σ w_i``
- ``fedsgd``    (updates): ``w_g ← w_g + (1/K) Σ Δ_i``
- ``fedbuff``   (updates): ``w_g ← w_g + η_s (1/K) Σ Δ_i / sqrt(1 + τ_i)``
- ``fedqs-avg`` (models):  ``w_g ← Σ p_i w_i``
- ``fedqs-sgd`` (updates): ``w_g ← w_g + Σ p_i Δ_i``  (Δ_i includes the clients' momentum)

FedQS Mod③ weights: ``p_i = n_i / Σ_{j∈S} n_j``; a client that asked for feedback (FSBC, or
SSBC whose labels are skewed) gets instead, with ``φ = K/N`` and ``F_i`` its share of all
aggregations so far,

- paper (``feedback_variant="paper"``): ``p_i = exp(φ - F_i) / (2φ - F_i) · (1 + G_i) / (2K)``;
- authors' code (``"code"``): ``p_i = (e/2)^(φ - F_i) · (1 + min(G_i, 2)^2) / (2K)``. The code
  has no ``1/(2K)``; the factor is ours, so both variants live on the scale of the base
  weights and the normalization treats them alike.

then ``p`` is normalized to sum 1. Guards (ours, the paper has none): the paper's
denominator ``2φ - F_i`` reaches 0 and turns negative for a client that took more than twice
its fair share of aggregations, so it is floored at ``φ/10``; ``G_i`` is clamped to
``[0, 9]`` (9 is the authors' cap), so every weight is finite and positive.

All rules are pure: no communication, no state. :meth:`Rule.aggregate_` sums in the
order of the buffer with :func:`fdahpc.aggregate.weighted_sum` and separate element-wise
ops, so the result is deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..aggregate import weighted_sum

__all__ = ["Update", "Rule", "FedAvg", "FedSGD", "FedBuff", "FedQSAvg", "FedQSSGD", "RULES",
           "SEMIASYNC_RULES", "FEEDBACK_VARIANTS", "G_CAP", "feedback_weight", "build_rule"]

FEEDBACK_VARIANTS = ("paper", "code")
G_CAP = 9.0  # the authors' cap on F and G


@dataclass
class Update:
    """One buffered client upload, as the server sees it."""

    client: int
    version: int  # global version the client's job started from
    staleness: int  # server version at aggregation time - version
    n_samples: int  # the client's training samples n_i
    payload: torch.Tensor  # float 1-D: final model w_i (uploads "model") or Δ_i (uploads "update")
    similarity: float = 0.0  # s_i the client reported (FedQS)
    feedback: bool = False  # the client asked for the feedback weight (FedQS)
    G: float = 1.0  # the client's G_i = s̄/s_i (FedQS), already capped by the client


class Rule:
    """An aggregation rule: ``weights`` says how much each upload counts, ``aggregate_``
    applies them to the global model in place."""

    name: str = ""
    uploads: str = "model"  # "model" or "update"
    needs_client_state: bool = False  # fedqs-*: hosts keep per-client lr, momentum, last update

    def weights(self, updates: list[Update], counts: np.ndarray, num_clients: int) -> np.ndarray:
        """Aggregation weights (float64, in the order of ``updates``). ``counts[j]`` is the
        number of times client j was aggregated before this aggregation."""
        raise NotImplementedError

    def aggregate_(self, w_global: torch.Tensor, updates: list[Update], counts: np.ndarray,
                   num_clients: int) -> np.ndarray:
        """Update ``w_global`` in place from the buffer; returns the weights used."""
        _check(w_global, updates, counts, num_clients)
        p = self.weights(updates, counts, num_clients)
        payloads = [u.payload for u in updates]
        with torch.no_grad():
            if self.uploads == "model":
                weighted_sum(payloads, p.tolist(), out=w_global)
            else:
                w_global.add_(weighted_sum(payloads, p.tolist()))
        return p

    def state_dict(self) -> dict:
        """The rules keep no state; the name guards against loading another rule's run."""
        return {"name": self.name}

    def load_state_dict(self, state: dict) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state_dict['name'] {state.get('name')!r}: saved by another rule than "
                             f"{self.name!r}; resume with the same --strategy")


def _check(w_global, updates, counts, num_clients) -> None:
    if not isinstance(w_global, torch.Tensor) or w_global.dim() != 1 or not w_global.is_floating_point():
        raise ValueError("w_global: expected a 1-D float torch tensor; pass the flat model state")
    if len(updates) == 0:
        raise ValueError("updates: the buffer is empty; aggregate at least one upload")
    _check_counts(counts, num_clients)
    for k, u in enumerate(updates):
        p = u.payload
        if not isinstance(p, torch.Tensor) or p.shape != w_global.shape or p.dtype != w_global.dtype \
                or p.device != w_global.device:
            raise ValueError(f"updates[{k}].payload: must match w_global ({tuple(w_global.shape)}, "
                             f"{w_global.dtype}, {w_global.device}); send the flat model state")
        if p.data_ptr() == w_global.data_ptr():
            raise ValueError(f"updates[{k}].payload: aliases w_global; pass a copy")


def _check_counts(counts, num_clients) -> np.ndarray:
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"num_clients {num_clients!r}: must be a positive integer, e.g. 100")
    c = np.asarray(counts)
    if c.shape != (num_clients,) or np.any(c < 0):
        raise ValueError(f"counts: expected {num_clients} non-negative aggregation counts, one per client, "
                         f"got shape {c.shape}")
    return c


class FedAvg(Rule):
    """Uniform average of the K buffered models."""

    name, uploads = "fedavg", "model"

    def weights(self, updates, counts, num_clients):
        return np.full(len(updates), 1.0 / len(updates))


class FedSGD(Rule):
    """The global model moves by the mean of the K buffered updates."""

    name, uploads = "fedsgd", "update"

    def weights(self, updates, counts, num_clients):
        return np.full(len(updates), 1.0 / len(updates))


class FedBuff(Rule):
    """FedBuff: updates discounted by ``1/sqrt(1 + τ)``, averaged over K, times ``η_s``.
    The weights are the effective coefficients ``η_s / (K sqrt(1 + τ_i))``; they do not sum to 1."""

    name, uploads = "fedbuff", "update"

    def __init__(self, server_lr: float = 1.0):
        self.eta_s = _positive(server_lr, "server_lr", "--server-lr 1.0")

    def weights(self, updates, counts, num_clients):
        K = len(updates)
        tau = np.array([u.staleness for u in updates], dtype=np.float64)
        if np.any(tau < 0):
            raise ValueError(f"Update.staleness {tau.tolist()}: must be >= 0 (server version - start version)")
        return self.eta_s / (K * np.sqrt(1.0 + tau))


class _FedQS(Rule):
    needs_client_state = True

    def __init__(self, feedback: bool = True, feedback_variant: str = "paper"):
        if not isinstance(feedback, (bool, np.bool_)):
            raise ValueError(f"feedback {feedback!r}: must be True or False (False is the ablation without "
                             f"Mod③'s feedback weights)")
        if feedback_variant not in FEEDBACK_VARIANTS:
            raise ValueError(f"feedback_variant {feedback_variant!r}: unknown; choose one of "
                             f"{', '.join(FEEDBACK_VARIANTS)}")
        self.feedback = bool(feedback)
        self.feedback_variant = feedback_variant

    def weights(self, updates, counts, num_clients):
        c = _check_counts(counts, num_clients).astype(np.float64)
        K = len(updates)
        n = np.array([u.n_samples for u in updates], dtype=np.float64)
        if np.any(n <= 0) or not np.all(np.isfinite(n)):
            raise ValueError(f"Update.n_samples {n.tolist()}: must be positive; leave clients without data out")
        p = n / n.sum()
        if self.feedback:
            phi = K / num_clients
            total = max(1.0, c.sum())
            for k, u in enumerate(updates):
                if not u.feedback:
                    continue
                if not 0 <= u.client < num_clients:
                    raise ValueError(f"Update.client {u.client}: must be in [0, {num_clients})")
                if not math.isfinite(u.G):
                    raise ValueError(f"Update.G {u.G!r}: must be finite; the client caps G = s̄/s_i")
                p[k] = feedback_weight(phi, c[u.client] / total, u.G, K, self.feedback_variant)
        return p / p.sum()


def feedback_weight(phi: float, F: float, G: float, K: int, variant: str = "paper") -> float:
    """Mod③'s weight for a client that asked for feedback (before normalization)."""
    G = min(max(float(G), 0.0), G_CAP)
    if variant == "paper":
        return math.exp(phi - F) / max(2.0 * phi - F, phi / 10.0) * (1.0 + G) / (2.0 * K)
    return (math.e / 2.0) ** (phi - F) * (1.0 + min(G, 2.0) ** 2) / (2.0 * K)


class FedQSAvg(_FedQS):
    """FedQS-Avg: the global model is the Mod③-weighted sum of the buffered models."""

    name, uploads = "fedqs-avg", "model"


class FedQSSGD(_FedQS):
    """FedQS-SGD: the global model moves by the Mod③-weighted sum of the buffered updates."""

    name, uploads = "fedqs-sgd", "update"


RULES: dict[str, type] = {r.name: r for r in (FedAvg, FedSGD, FedBuff, FedQSAvg, FedQSSGD)}
SEMIASYNC_RULES = tuple(RULES)


def _positive(value, name: str, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} {value!r}: must be a positive finite number, e.g. {example}")
    return float(value)


def build_rule(name: str, server_lr: float | None = None, feedback: bool = True, feedback_variant: str = "paper") -> Rule:
    """The rule called ``name``. Every argument is validated; each rule uses only its own
    (``server_lr``: fedbuff, whose own default serves when None; ``feedback``,
    ``feedback_variant``: fedqs-*)."""
    if name not in RULES:
        raise ValueError(f"--strategy {name!r}: unknown semi-asynchronous rule; choose one of "
                         f"{', '.join(SEMIASYNC_RULES)}")
    if server_lr is not None:
        _positive(server_lr, "server_lr", "--server-lr 1.0")
    _FedQS(feedback, feedback_variant)  # validates both, whichever rule is built
    if name == "fedbuff":
        return FedBuff() if server_lr is None else FedBuff(server_lr)
    if name.startswith("fedqs"):
        return RULES[name](feedback, feedback_variant)
    return RULES[name]()
