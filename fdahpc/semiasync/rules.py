"""Semi-asynchronous aggregation rules: what the server does with a full buffer of K uploads.

Papers:
- FedQS: "FedQS: Optimizing Gradient and Model Aggregation for Semi-Asynchronous Federated
  Learning", NeurIPS 2025, arXiv 2510.07664 (Mod③, Section 3.4).
- FedBuff: Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated Learning with
  Buffered Asynchronous Aggregation", AISTATS 2022, arXiv 2106.06639.
- M-step FedAsync: Wu, Wang, "KAFL: Achieving High Training Efficiency for Fast-K
  Asynchronous Federated Learning", ICDCS 2022, pp. 873-883 (FedQS's ref. [37]), built on
  FedAsync: Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", arXiv 1903.03934.
- WKAFL: Zhou, Li, Ren, Yang, "Towards Efficient and Stable K-Asynchronous Federated
  Learning with Unbounded Stale Gradients on Non-IID Data", IEEE TPDS 33(12), 2022
  (FedQS's ref. [15]).

With ``w_i`` a client's final model, ``Δ_i = w_i - w_start`` its update, ``τ_i`` its staleness,
``n_i`` its samples and K the number of buffered uploads:

- ``fedavg``    (models):  ``w_g ← Σ q_i w_i``, ``q_i = 1/K`` (or ``n_i/Σn``, ``weighting="samples"``)
- ``fedsgd``    (updates): ``w_g ← w_g + Σ q_i Δ_i``, q as fedavg's
- ``fedbuff``   (updates): ``w_g ← w_g + η_s (1/K) Σ Δ_i / sqrt(1 + τ_i)``
- ``mstep``     (models):  ``w_g ← (1 - Σ β_i) w_g + Σ β_i w_i``, ``β_i = α (1 + τ_i)^(-1/2) / K``:
  FedAsync's mixing ``w ← (1 - α_τ) w + α_τ w_new`` with its polynomial staleness function
  ``α_τ = α (1 + τ)^(-a)``, a = 1/2, applied to the mean of the M = K buffered models, as
  KAFL's M-step FedAsync aggregates M models per step. α = ``--server-lr`` (default 0.6,
  FedAsync's). The KAFL text is not on this machine: this is our reading of its
  description, written down so it can be checked.
- ``wkafl``     (updates): staleness weights ``a_i = (e/2)^(-τ_i)`` normalised; the
  estimate ``ĝ = Σ a_i Δ_i``; updates whose cosine with ĝ is negative are dropped (the
  "cosine filter"; all kept when every one would be); ``w_g ← w_g + η_s Σ_{kept} a_i Δ_i /
  Σ_{kept} a_i``, η_s = ``--server-lr`` (default 1). WKAFL's two-stage gradient clipping
  is left to ``--clip-grad-norm`` on the clients. As for M-step, the WKAFL text is not on
  this machine: the formula is the paper's, made precise.
- ``fedqs-avg`` (models):  ``w_g ← Σ p_i w_i``
- ``fedqs-sgd`` (updates): ``w_g ← w_g + Σ p_i Δ_i``  (Δ_i includes the clients' momentum)

FedQS Mod③ weights: base ``p_i = n_i / Σ_{j∈S} n_j``; with ``φ = K/N`` and ``F_i`` the share of
all aggregations so far, this one included, that client i took part in (``(n(i) + 1) /
(t + 1)`` at aggregation t + 1: it averages φ, so the factor below is 1 for a client
aggregated at the fair rate), a client that asked for feedback (FSBC, or SSBC whose
labels are skewed) gets

- ``paper``: its weight *replaced* by ``(e/2)^(φ - F_i) · (1 + G_i)^2 / K``. The extracted
  text reads "exp(ϕ−F)2ϕ−F · (1+G)2K": superscripts flattened. ``exp(φ-F)/2^(φ-F) =
  (e/2)^(φ-F)`` is exactly the authors' code and WKAFL's ``(e/2)^(-τ)`` that the paper
  cites (the other reading, a fraction over ``2φ - F``, reaches zero); the paper's words
  "the quadratic relationship" and "typically higher" weights point to ``(1 + G)^2 / K``
  (about ``(1+G)^2`` times an average base weight 1/K), not ``(1 + G) / (2K)``.
  ``G_i`` is clamped to ``[0, 2]`` (the authors' ``min(G, 2)``; the client bounds it so already).
- ``authors``: the base weight *multiplied* by ``(e/2)^(φ - F_i) · (1 + min(G_i, 2)^2)``
  (their φ is the constant 0.1 = K/N of their setting; ours is K/N), and in this variant
  the feedback flags are reset after every aggregation: a flag is set when a job starts,
  so only an update with staleness 0 still carries it (``reset_flags``). Their F_i is the
  client's share of *all aggregated updates*, this aggregation's included:
  ``c_i / Σ_j c_j`` with ``c`` the counts after this buffer is added (a client twice in it
  counts twice), which averages 1/N, not φ; their G is taken at aggregation (the server
  sets ``Update.G``, server.py).
- ``authors-per-round`` (an ablation, never a default): the authors' weight with F read as
  fdahpc read it before issue 43, the share of aggregations the client took part in,
  ``(n(i) + 1) / (t + 1)``. It averages φ instead of 1/N, so a client aggregated at the
  fair rate gets the factor 1 instead of ``(e/2)^(φ - 1/N)``, and one aggregated in every
  round ``(e/2)^(φ - 1)``: it measures what the reading of F is worth.
- ``misread`` (an ablation, never a default): the weight this code used before,
  ``exp(φ - F_i) / max(2φ - F_i, φ/10) · (1 + G_i) / (2K)`` with ``F_i = n(i) / Σ_j n(j)``
  (share of updates, this aggregation not counted) and G clamped to ``[0, 9]``, kept so
  its effect can be measured.

then ``p`` is normalized to sum 1.

In the authors' variant FedQS-SGD is their code's: the uploads' statistics are changes too
and the global statistics move by their weighted sum, ``s_g ← s_g + Σ p_i δs_i``
(``stats_updates``; the hosts then subtract the start statistics as well).

BatchNorm running statistics are values, not parameters: an update-uploading rule would
otherwise add a weighted sum of stale differences to the global running variance, which
can turn it negative (measured: WKAFL at Dirichlet 0.5, variance -19, accuracy 10 % on
every other evaluation). So when the payload's tail holds statistics (``aggregate_``'s
``params``: the number of parameter entries in front of them), update uploads carry the
client's final statistics there, not their change, and every rule sets the global
statistics to the mean of the buffered ones under its own weights, normalised (dropped
uploads count 0). Model uploads need nothing: their statistics are averaged already.

All rules are pure: no communication, no state. A rule's new model is a
:class:`~.combination.Combination` of the payloads and the old model, summed exactly in
fixed point (:mod:`.combination`), so hosts may add their own members' (``--aggregate hosts``).

Each rule is one class registered with ``@buffer_rule("name")`` (which makes it
``--strategy name`` in ``--mode semiasync``), its options one frozen dataclass (``Options``,
fields named like the flags, with their defaults and checks) and ``build(options)``: the
same pattern as the sync triggers and rules (:mod:`fdahpc.strategies.base`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ..aggregate import _positive, weighted_sum
from ..choices import unknown
from ..options import WEIGHTINGS, MeanOptions, NoOptions, option_names, options_from  # MeanOptions: fedavg/fedsgd's q_i
from ..registry import registrar
from .combination import Combination, add_member
from .exact import to_float
from .fedqs import VARIANTS, FedQSParams, authors_G

__all__ = ["Update", "Combination", "add_member", "BufferRule", "FedAvg", "FedSGD", "FedBuff", "MStep", "WKAFL",
           "FedQSAvg", "FedQSSGD", "BUFFER_RULES", "SEMIASYNC_RULES", "FEEDBACK_WEIGHTS", "FEEDBACK_ALIASES", "WEIGHTINGS", "G_CAP", "feedback_weight",
           "buffer_rule", "ServerLROptions", "MStepOptions", "FedQSRuleOptions", "rule_options", "build_buffer_rule",
           "build_rule"]

FEEDBACK_WEIGHTS = ("paper", "authors", "authors-per-round", "misread")
FEEDBACK_ALIASES = {"code": "authors"}  # the old name of the authors' weight
G_CAP = 9.0  # the authors' cap on F and G (the misread ablation's clamp on G)
G_WEIGHT_MAX = 2.0  # min(G, 2) in the feedback weight (the authors')


@dataclass
class Update:
    """One buffered client upload, as the server sees it."""

    client: int
    version: int  # global version the client's job started from
    staleness: int  # server version at aggregation time - version
    n_samples: int  # the client's training samples n_i
    payload: torch.Tensor | None  # float 1-D: final model w_i (uploads "model") or Δ_i ("update"); None: on its host
    similarity: float = 0.0  # s_i the client reported (FedQS)
    feedback: bool = False  # the client asked for the feedback weight (FedQS)
    G: float = 1.0  # the client's bias ratio G_i (FedQS), already bounded by the client
    absmax: float = float("nan")  # max |payload| as the host reported it (NaN: unknown, computed from the payload)


class BufferRule:
    """An aggregation rule: ``weights`` says how much each upload counts, ``aggregate_``
    applies them to the global model in place."""

    name: str = ""  # set by @buffer_rule
    #: Its options: a frozen dataclass (fields named like the flags, with defaults and
    #: checks); the rule is built with an instance of it (:meth:`build`).
    Options: type = NoOptions
    #: Options its clients read beside the rule's own (fedqs-*: :class:`.fedqs.FedQSParams`).
    client_options: tuple[str, ...] = ()
    uploads: str = "model"  # "model" or "update"
    needs_client_state: bool = False  # fedqs-*: hosts keep per-client lr, momentum, last update
    stats_updates: bool = False  # update uploads carry the statistics' change too (authors' FedQS-SGD)
    weights_from_headers: bool = True  # False: the weights read the payloads (no --aggregate hosts)

    @classmethod
    def build(cls, options) -> "BufferRule":
        """The rule from its options (an instance of :attr:`Options`)."""
        return cls()

    @classmethod
    def reads(cls) -> frozenset[str]:
        """Every option a run with this rule reads beside the mode's own."""
        return frozenset(option_names(cls.Options)) | frozenset(cls.client_options)

    def weights(self, updates: list[Update], counts: np.ndarray, num_clients: int,
                params: int | None = None) -> np.ndarray:
        """Aggregation weights (float64, in the order of ``updates``). ``counts[j]`` is the
        number of times client j was aggregated before this aggregation; ``params`` as in
        :meth:`aggregate_`."""
        raise NotImplementedError

    def combination(self, updates: list[Update], counts: np.ndarray, num_clients: int,
                    params: int | None = None) -> "Combination":
        """The new global model as a linear combination of the payloads and the old model."""
        p = self.weights(updates, counts, num_clients, params)
        if self.uploads == "model":
            return Combination(p, p, p, 0.0, 0.0)
        if self.stats_updates:
            return Combination(p, p, p, 1.0, 1.0)  # w + Σ p_i Δ_i, statistics alike
        return Combination(p, p, _normalised(p), 1.0, 0.0)  # w + Σ p_i Δ_i; statistics: their mean

    def aggregate_(self, w_global: torch.Tensor, updates: list[Update], counts: np.ndarray,
                   num_clients: int, params: int | None = None) -> np.ndarray:
        """Update ``w_global`` in place from the buffer; returns the weights used.
        ``params``: the payloads' first ``params`` entries are parameters, the rest running
        statistics (module docstring); None: all parameters."""
        _check(w_global, updates, counts, num_clients)
        d = w_global.numel() if params is None else _params_count(params, w_global)
        c = self.combination(updates, counts, num_clients, params)
        payloads = [u.payload.numpy() for u in updates]
        with torch.no_grad():
            old = w_global.numpy()
            # the hosts' reported max |payload| (Update.absmax) where there is one
            absmax = [u.absmax if math.isfinite(u.absmax) else float(np.abs(x).max(initial=0.0))
                      for u, x in zip(updates, payloads)]
            acc, bits = c.start(old, d, absmax)
            for k, x in enumerate(payloads):
                c.add(acc, k, x, d, bits)
            w_global.copy_(torch.from_numpy(to_float(acc, bits)))
        return c.weights

    # What the server does around the clients' angles and FedQS's reference (Mod①), so that
    # the server names no variant: a rule without client state is never asked for a reference.
    def reference(self, w: torch.Tensor) -> torch.Tensor:
        """The reference sent with each model before the first aggregation."""
        raise NotImplementedError(f"{self.name}: its clients keep no state, so no reference goes with a model")

    def advance_reference(self, reference: torch.Tensor, before: torch.Tensor, after: torch.Tensor) -> None:
        """The reference after an aggregation took the model from ``before`` to ``after`` (in place)."""
        raise NotImplementedError(f"{self.name}: its clients keep no state, so no reference goes with a model")

    def keeps_angle(self, client_type: float) -> bool:
        """Whether a reported angle counts: that of a job that decided a client type (>= 0)."""
        return client_type >= 0

    def angle_mean(self, reported: np.ndarray) -> float:
        """θ̄ sent with the models: the mean of the angles that count (NaN: none yet)."""
        return float(reported.mean()) if len(reported) else float("nan")

    def at_aggregation(self, buffer: list[Update], angles: np.ndarray) -> list[Update]:
        """The buffer as the weights read it (``angles``: every client's latest, NaN where
        none or the client left)."""
        return buffer

    def state_dict(self) -> dict:
        """The rules keep no state; the name guards against loading another rule's run."""
        return {"name": self.name}

    def load_state_dict(self, state: dict) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state_dict['name'] {state.get('name')!r}: saved by another rule than "
                             f"{self.name!r}; resume with the same --strategy")


#: name -> class, in the order registered; filled by ``@buffer_rule`` next to each class.
BUFFER_RULES: dict[str, type[BufferRule]] = {}
#: ``@buffer_rule("name")`` above a :class:`BufferRule` subclass makes it ``--strategy name``
#: of ``--mode semiasync``.
buffer_rule = registrar(BUFFER_RULES, BufferRule, "buffer_rule")


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


def _params_count(params, w_global) -> int:
    if isinstance(params, bool) or not isinstance(params, (int, np.integer)) or not 0 < params <= w_global.numel():
        raise ValueError(f"params {params!r}: must be the number of parameter entries, in [1, {w_global.numel()}]")
    return int(params)


def _normalised(p: np.ndarray) -> np.ndarray:
    """Weights for averaging values (statistics): the non-negative weights over their sum."""
    q = np.clip(p, 0.0, None)
    return q / q.sum() if q.sum() > 0 else np.full(len(p), 1.0 / len(p))


def _check_counts(counts, num_clients) -> np.ndarray:
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"num_clients {num_clients!r}: must be a positive integer, e.g. 100")
    c = np.asarray(counts)
    if c.shape != (num_clients,) or np.any(c < 0):
        raise ValueError(f"counts: expected {num_clients} non-negative aggregation counts, one per client, "
                         f"got shape {c.shape}")
    return c


def _base(updates, weighting: str) -> np.ndarray:
    """fedavg/fedsgd's q: uniform, or the sample shares n_i / Σ n_j."""
    if weighting == "uniform":
        return np.full(len(updates), 1.0 / len(updates))
    return _sample_shares(updates)


def _sample_shares(updates) -> np.ndarray:
    n = np.array([u.n_samples for u in updates], dtype=np.float64)
    if np.any(n <= 0) or not np.all(np.isfinite(n)):
        raise ValueError(f"Update.n_samples {n.tolist()}: must be positive; leave clients without data out")
    return n / n.sum()


class _Weighted(BufferRule):
    Options = MeanOptions  # weighting (--weighting): uniform or samples

    def __init__(self, weighting: str = MeanOptions.weighting):
        self.weighting = self.Options(weighting).weighting

    @classmethod
    def build(cls, options: MeanOptions) -> "_Weighted":
        return cls(options.weighting)

    def weights(self, updates, counts, num_clients, params=None):
        return _base(updates, self.weighting)


@buffer_rule("fedavg")
class FedAvg(_Weighted):
    """Average of the K buffered models: uniform, or by samples (``--weighting samples``)."""

    uploads = "model"


@buffer_rule("fedsgd")
class FedSGD(_Weighted):
    """The global model moves by the mean of the K buffered updates (uniform or by samples)."""

    uploads = "update"


def _staleness(updates) -> np.ndarray:
    staleness = np.array([u.staleness for u in updates], dtype=np.float64)
    if np.any(staleness < 0):
        raise ValueError(f"Update.staleness {staleness.tolist()}: must be >= 0 (server version - start version)")
    return staleness


@dataclass(frozen=True)
class ServerLROptions:
    """The server's step: FedBuff's and WKAFL's η_s (default 1, no scaling)."""

    server_lr: float = 1.0

    def __post_init__(self) -> None:
        _positive(self.server_lr, "server_lr", f"--server-lr {type(self).server_lr}")


@dataclass(frozen=True)
class MStepOptions(ServerLROptions):
    """M-step's mixing α (``--server-lr``), in (0, 1]; default 0.6, FedAsync's."""

    server_lr: float = 0.6

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.server_lr > 1:
            raise ValueError(f"--server-lr {self.server_lr!r}: mstep's mixing α must be in (0, 1], e.g. 0.6")


class _ServerLR(BufferRule):
    """A rule whose one option is ``--server-lr``."""

    Options = ServerLROptions

    @classmethod
    def build(cls, options: ServerLROptions) -> "_ServerLR":
        return cls(options.server_lr)


@buffer_rule("fedbuff")
class FedBuff(_ServerLR):
    """FedBuff: updates discounted by ``1/sqrt(1 + τ)``, averaged over K, times ``η_s``.
    The weights are the effective coefficients ``η_s / (K sqrt(1 + τ_i))``; they do not sum to 1."""

    uploads = "update"

    def __init__(self, server_lr: float = ServerLROptions.server_lr):
        self.eta_s = float(self.Options(server_lr).server_lr)

    def weights(self, updates, counts, num_clients, params=None):
        return self.eta_s / (len(updates) * np.sqrt(1.0 + _staleness(updates)))


@buffer_rule("mstep")
class MStep(_ServerLR):
    """M-step FedAsync (KAFL): FedAsync's staleness-discounted mixing over the K buffered
    models. The weights are the models' ``β_i = α (1 + τ_i)^(-1/2) / K``; the old global
    model keeps ``1 - Σ β_i`` (returned weights do not include it)."""

    uploads = "model"
    Options = MStepOptions
    a = 0.5  # FedAsync's polynomial staleness exponent

    def __init__(self, server_lr: float = MStepOptions.server_lr):
        self.alpha = float(self.Options(server_lr).server_lr)

    def weights(self, updates, counts, num_clients, params=None):
        return self.alpha * (1.0 + _staleness(updates)) ** -self.a / len(updates)

    def combination(self, updates, counts, num_clients, params=None):
        beta = self.weights(updates, counts, num_clients, params)
        keep = 1.0 - float(beta.sum())
        return Combination(beta, beta, beta, keep, keep)


@buffer_rule("wkafl")
class WKAFL(_ServerLR):
    """WKAFL: staleness weights ``(e/2)^(-τ)``, a cosine filter against their weighted mean,
    then the weighted mean of the kept updates times ``η_s``. Returns the effective
    coefficients (0 for a dropped update)."""

    uploads = "update"
    weights_from_headers = False  # the cosine filter reads every update

    def __init__(self, server_lr: float = ServerLROptions.server_lr):
        self.eta_s = float(self.Options(server_lr).server_lr)

    def weights(self, updates, counts, num_clients, params=None):
        a = (math.e / 2.0) ** -_staleness(updates)
        a = a / a.sum()
        m = updates[0].payload.numel() if params is None else params  # the cosine is over parameters
        with torch.no_grad():
            g = weighted_sum([u.payload[:m].to(torch.float64) for u in updates], a.tolist())
            ng = float(torch.linalg.vector_norm(g))
            keep = np.ones(len(updates), dtype=bool)
            if ng > 0:
                for k, u in enumerate(updates):
                    d = u.payload[:m].to(torch.float64)
                    nd = float(torch.linalg.vector_norm(d))
                    keep[k] = nd == 0 or float(torch.dot(d, g)) / (nd * ng) >= 0.0
        if not keep.any():
            keep[:] = True
        kept = np.where(keep, a, 0.0)
        return self.eta_s * kept / kept.sum()


@dataclass(frozen=True)
class FedQSRuleOptions:
    """Mod③ on the server: the ablation without feedback weights, the variant (which the
    clients' :class:`.fedqs.FedQSParams` read too, and whose default is declared there) and
    the feedback weight (None: the variant's own)."""

    fedqs_no_feedback: bool = False
    fedqs_variant: str = FedQSParams.variant
    fedqs_feedback: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.fedqs_no_feedback, (bool, np.bool_)):
            raise ValueError(f"--fedqs-no-feedback {self.fedqs_no_feedback!r}: must be True or False")
        if self.fedqs_variant not in VARIANTS:
            raise unknown("--fedqs-variant", self.fedqs_variant, VARIANTS)
        if FEEDBACK_ALIASES.get(self.fedqs_feedback, self.fedqs_feedback) not in FEEDBACK_WEIGHTS + (None,):
            raise unknown("--fedqs-feedback", self.fedqs_feedback, FEEDBACK_WEIGHTS,
                          " (or omit it for the variant's own)")


class _FedQS(BufferRule):
    Options = FedQSRuleOptions
    needs_client_state = True
    # What fedqs_params (mode.py) hands the clients' FedQSParams.
    client_options = ("fedqs_a", "fedqs_m0", "fedqs_k", "fedqs_lr_min", "fedqs_lr_max", "fedqs_variant",
                      "fedqs_similarity", "fedqs_authors_momentum", "fedqs_sketch_similarity", "fedqs_no_momentum")

    def __init__(self, feedback: bool = True, variant: str = FedQSParams.variant, feedback_weight: str | None = None,
                 reset_flags: bool | None = None):
        if not isinstance(feedback, (bool, np.bool_)):
            raise ValueError(f"feedback {feedback!r}: must be True or False (False is the ablation without "
                             f"Mod③'s feedback weights)")
        self.Options(not feedback, variant, feedback_weight)  # the checks, one wording
        weight = FEEDBACK_ALIASES.get(feedback_weight, feedback_weight) or variant
        self.feedback, self.variant, self.feedback_weight = bool(feedback), variant, weight
        self.reset_flags = variant == "authors" if reset_flags is None else bool(reset_flags)

    @classmethod
    def build(cls, options: FedQSRuleOptions) -> "_FedQS":
        return cls(not options.fedqs_no_feedback, options.fedqs_variant, options.fedqs_feedback)

    # Mod①'s reference, sent with each model over the parameters: the last global step
    # w^v − w^(v−1) (paper variant; zero before round 1), or the authors' w^(v−1) itself
    # (their state_dict quirk, see fedqs.py; the initial model before round 1). The authors
    # also count an angle from the job that computed it, decision or not, take θ̄ over the
    # non-zero angles (a client without one reports 0) and G at aggregation (:func:`.fedqs.authors_G`).
    def reference(self, w: torch.Tensor) -> torch.Tensor:
        return w.clone() if self.variant == "authors" else torch.zeros_like(w)

    def advance_reference(self, reference: torch.Tensor, before: torch.Tensor, after: torch.Tensor) -> None:
        if self.variant == "authors":
            reference.copy_(before)
        else:
            torch.sub(after, before, out=reference)

    def keeps_angle(self, client_type: float) -> bool:
        return self.variant == "authors" or client_type >= 0

    def angle_mean(self, reported: np.ndarray) -> float:
        return super().angle_mean(reported[reported != 0] if self.variant == "authors" else reported)

    def at_aggregation(self, buffer: list[Update], angles: np.ndarray) -> list[Update]:
        if self.variant != "authors":
            return buffer
        G = authors_G(angles, [u.client for u in buffer], G_CAP)
        return [replace(u, G=float(g)) for u, g in zip(buffer, G)]

    def weights(self, updates, counts, num_clients, params=None):
        c = _check_counts(counts, num_clients).astype(np.float64)
        K = len(updates)
        p = _sample_shares(updates)
        if not self.feedback:
            return p
        phi = K / num_clients
        round_now = updates[0].version + updates[0].staleness + 1  # this aggregation's number
        after = c.copy()  # the authors' F: shares of every aggregated update, this buffer's included
        np.add.at(after, [u.client for u in updates], 1.0)
        for k, u in enumerate(updates):
            if not u.feedback or (self.reset_flags and u.staleness != 0):
                continue
            if not 0 <= u.client < num_clients:
                raise ValueError(f"Update.client {u.client}: must be in [0, {num_clients})")
            if not math.isfinite(u.G):
                raise ValueError(f"Update.G {u.G!r}: must be finite; the client bounds G")
            if self.feedback_weight == "misread":
                F = c[u.client] / max(1.0, c.sum())
            elif self.feedback_weight == "authors":
                F = after[u.client] / after.sum()
            else:  # paper, authors-per-round
                F = (c[u.client] + 1.0) / round_now
            p[k] = feedback_weight(phi, F, u.G, K, self.feedback_weight, base=p[k])
        return p / p.sum()


def feedback_weight(phi: float, F: float, G: float, K: int, weight: str = "paper", base: float = 1.0) -> float:
    """Mod③'s weight for a flagged client before normalization (module docstring);
    ``base`` (n_i/Σn) is used by the ``authors`` weight only, the others replace it."""
    if weight == "paper":
        G = min(max(float(G), 0.0), G_WEIGHT_MAX)
        return (math.e / 2.0) ** (phi - F) * (1.0 + G) ** 2 / K
    if weight in ("authors", "authors-per-round"):
        G = min(max(float(G), 0.0), G_WEIGHT_MAX)
        return base * (math.e / 2.0) ** (phi - F) * (1.0 + G ** 2)
    if weight == "misread":
        G = min(max(float(G), 0.0), G_CAP)
        return math.exp(phi - F) / max(2.0 * phi - F, phi / 10.0) * (1.0 + G) / (2.0 * K)
    raise unknown("--fedqs-feedback", weight, FEEDBACK_WEIGHTS)


@buffer_rule("fedqs-avg")
class FedQSAvg(_FedQS):
    """FedQS-Avg: the global model is the Mod③-weighted sum of the buffered models."""

    uploads = "model"


@buffer_rule("fedqs-sgd")
class FedQSSGD(_FedQS):
    """FedQS-SGD: the global model moves by the Mod③-weighted sum of the buffered updates
    (authors' variant: running statistics too, module docstring)."""

    uploads = "update"

    @property
    def stats_updates(self) -> bool:
        return self.variant == "authors"


#: The built-in rules, in the order registered (a rule registered later, e.g. by a user's
#: module, is in :data:`BUFFER_RULES` and so a ``--strategy`` too).
SEMIASYNC_RULES = tuple(BUFFER_RULES)


def rule_options(name: str, values: Any):
    """The options of rule ``name`` from ``values`` (a TrainConfig, or a mapping of option
    names; absent or None: the option's default), checked; ``ValueError`` with one line."""
    if name not in BUFFER_RULES:
        raise ValueError(f"--strategy {name!r}: unknown semi-asynchronous rule; choose one of "
                         f"{', '.join(BUFFER_RULES)}")
    return options_from(BUFFER_RULES[name].Options, values)


def build_buffer_rule(name: str, values: Any) -> BufferRule:
    """The rule called ``name``, built from its options in ``values`` (:func:`rule_options`)."""
    return BUFFER_RULES[name].build(rule_options(name, values))


def _and(names: list[str]) -> str:
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def build_rule(name: str, server_lr: float | None = None, feedback: bool = True, variant: str = "paper",
               feedback_weight: str | None = None, weighting: str = "uniform") -> BufferRule:
    """The rule called ``name`` from keyword arguments (the spelling of tests and scripts):
    every argument is validated, and one the rule does not read, given other than its
    default here, is refused (``server_lr`` None: the rule's own default)."""
    if not isinstance(feedback, (bool, np.bool_)):
        raise ValueError(f"feedback {feedback!r}: must be True or False (False is the ablation without "
                         f"Mod③'s feedback weights)")
    given = {"server_lr": server_lr, "fedqs_no_feedback": not feedback, "fedqs_variant": variant,
             "fedqs_feedback": feedback_weight, "weighting": weighting}
    unset = {"server_lr": None, "fedqs_no_feedback": False, "fedqs_variant": "paper", "fedqs_feedback": None,
             "weighting": "uniform"}
    rule_options(name, {})  # an unknown name first
    for option, value in given.items():
        if value != unset[option] and option not in option_names(BUFFER_RULES[name].Options):
            readers = [r for r, cls in BUFFER_RULES.items() if option in option_names(cls.Options)]
            raise ValueError(f"--{option.replace('_', '-')} {value}: only {_and(readers)} take it ({name} does not "
                             "read it); drop it")
    return build_buffer_rule(name, given)
