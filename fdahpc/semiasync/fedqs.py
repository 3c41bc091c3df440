"""FedQS client side: Mod① (similarity to the global trend) and Mod② (local adaptation).

"FedQS: Optimizing Gradient and Model Aggregation for Semi-Asynchronous Federated
Learning", NeurIPS 2025, arXiv 2510.07664, Sections 3.2-3.3. Pure math: the host feeds in
the numbers, no communication here.

- Mod①: pseudo-global gradient ``L_g = w_g^t - w_g^{t-1}`` (the caller's), similarity
  ``s_i = sim(Δ_i, L_g)`` with the client's latest local update (:func:`similarity`).
- Mod②: speed ``f_i = n(i) / mean_j n(j)`` (:func:`speeds`); with ``F = f̄/f_i`` and
  ``G = s̄/s_i`` each client is one of four types (:func:`classify`) and :func:`decide` sets
  its learning rate, momentum rate ``m = m0 + k (1/G - 1)`` and feedback flag:
  FSBC keeps lr and asks for feedback; FWBC ``η - aF`` with momentum; SWBC ``η + aF`` with
  momentum; SSBC ``η + aF``, then the label test picks SWBC's momentum (accuracy even over
  labels: a straggler) or FSBC's feedback (skewed labels).
- Local step: heavy ball (:func:`heavy_ball_step_`),
  ``w_e = w_{e-1} - η [Σ_{r=1..e} m^r ∇F_{e-r} + ∇F_e]``.

Where the authors' code differs from the paper (we follow the paper): momentum is disabled
in their main training files (here ``FedQSParams.momentum=False``); the feedback factor is
``(e/2)^(φ-F)·(1+min(G,2)^2)`` (``feedback_variant="code"`` in :mod:`.rules`); the similarity
is an angle rather than a cosine (the cosine orders clients the same way, reversed sign).
Both cap F and G at 9 (``FedQSParams.cap``).

Choices the paper leaves open, documented where they are made: tie-breaking in
:func:`classify`, the zero and negative cases of F and G, clipping every type's lr to
``[lr_min, lr_max]``, and the bounded Euclidean/Manhattan similarities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CLIENT_TYPES", "FSBC", "FWBC", "SWBC", "SSBC", "NONE", "SIMILARITIES", "similarity",
           "FedQSParams", "classify", "Decision", "decide", "speeds", "heavy_ball_step_"]

CLIENT_TYPES = ("FSBC", "FWBC", "SWBC", "SSBC")
FSBC, FWBC, SWBC, SSBC = range(4)
NONE = -1  # a client without history yet: no decision, plain SGD at its current lr
SIMILARITIES = ("cosine", "euclidean", "manhattan")
_ORTHOGONAL = 1.0 / (1.0 + math.sqrt(2.0))  # euclidean similarity of two orthogonal directions


# ----------------------------------------------------------------------------- Mod①

def similarity(delta: torch.Tensor, l_g: torch.Tensor, kind: str = "cosine") -> float:
    """Similarity of the client's last update ``delta`` and the pseudo-global gradient ``l_g``.

    Both are first scaled to unit L2 norm (``â``, ``b̂``), so the learning rates that shaped
    them do not matter; the sums run in float64.

    - ``cosine``: ``<â, b̂>`` in [-1, 1] (the paper's default).
    - ``euclidean``: ``1 / (1 + ||â - b̂||_2)`` in [1/3, 1]; orthogonal gives 1/(1+√2).
    - ``manhattan``: ``1 / (1 + ||â - b̂||_1 / sqrt(d))`` in [1/3, 1] (``||x||_1 ≤ √d ||x||_2``
      keeps the distance in [0, 2] whatever the model size d).

    A zero vector has no direction: cosine gives 0 and the other two the orthogonal value
    1/(1+√2), "no alignment either way". The bounded positive forms keep ``G = s̄/s_i``
    meaningful; with the cosine G can be negative, which :func:`decide` handles.
    """
    if kind not in SIMILARITIES:
        raise ValueError(f"kind {kind!r}: unknown similarity; choose one of {', '.join(SIMILARITIES)}")
    for name, t in (("delta", delta), ("l_g", l_g)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or not t.is_floating_point():
            raise ValueError(f"{name}: expected a 1-D float torch tensor (the flat parameter vector)")
    if delta.shape != l_g.shape:
        raise ValueError(f"delta and l_g: shapes {tuple(delta.shape)} and {tuple(l_g.shape)} differ; "
                         f"compare vectors of the same model")
    with torch.no_grad():
        a = delta.to(torch.float64)
        b = l_g.to(device=a.device, dtype=torch.float64)
        na, nb = float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b))
        if na == 0.0 or nb == 0.0 or not (math.isfinite(na) and math.isfinite(nb)):
            return 0.0 if kind == "cosine" else _ORTHOGONAL
        if kind == "cosine":
            return min(1.0, max(-1.0, float(torch.dot(a, b)) / na / nb))
        diff = a / na - b / nb
        if kind == "euclidean":
            return 1.0 / (1.0 + float(torch.linalg.vector_norm(diff)))
        return 1.0 / (1.0 + float(diff.abs().sum()) / math.sqrt(diff.numel()))


# ----------------------------------------------------------------------------- Mod②

# The command-line flag of each field, so an error names what the user typed.
_FLAGS = {"eta0": "--lr", "a": "--fedqs-a", "m0": "--fedqs-m0", "k": "--fedqs-k",
          "lr_min": "--fedqs-lr-min", "lr_max": "--fedqs-lr-max"}


@dataclass(frozen=True)
class FedQSParams:
    """Mod②'s hyperparameters; defaults are the paper's (Section 5 and Appendix)."""

    eta0: float = 0.1  # initial local learning rate
    a: float = 0.002  # learning-rate change rate: η ± a·F
    m0: float = 0.1  # momentum base rate
    k: float = 0.2  # momentum slope: m = m0 + k (1/G - 1)
    lr_min: float = 0.001  # every type's lr is clipped to [lr_min, lr_max]
    lr_max: float = 0.2
    cap: float = 9.0  # F and G are capped here (the authors' code)
    momentum: bool = True  # False: the ablation without momentum (as the authors' main files run)
    label_gap: float = 0.30  # SSBC label test: max - min per-label accuracy (fractions) at or above it = skewed

    def __post_init__(self) -> None:
        def fail(name: str, rule: str, example: str) -> None:
            what = _FLAGS.get(name, f"FedQSParams.{name}")
            raise ValueError(f"{what} {getattr(self, name)!r}: {rule}, e.g. {example}")

        def number(name: str) -> float:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                fail(name, "must be a finite number", str(getattr(FedQSParams, name)))
            return float(v)

        if number("eta0") <= 0:
            fail("eta0", "must be positive", "0.1")
        if number("a") < 0:
            fail("a", "must be >= 0", "0.002")
        if not 0 <= number("m0") < 0.6:
            fail("m0", "must be in [0, 0.6) so that the momentum cap m0 + 0.4 stays below 1", "0.1")
        if number("k") < 0:
            fail("k", "must be >= 0", "0.2")
        if number("lr_min") <= 0:
            fail("lr_min", "must be positive", "0.001")
        if number("lr_max") < self.lr_min:
            fail("lr_max", f"must be >= {_FLAGS['lr_min']} {self.lr_min}", "0.2")
        if number("cap") <= 0:
            fail("cap", "must be positive", "9.0")
        if not 0 <= number("label_gap") <= 1:
            fail("label_gap", "must be a fraction in [0, 1] (per-label accuracies are fractions)", "0.30")
        if not isinstance(self.momentum, (bool, np.bool_)):
            fail("momentum", "must be True or False", "True")


def classify(f_i: float, f_bar: float, s_i: float, s_bar: float) -> int:
    """The client's quadrant, an index into :data:`CLIENT_TYPES`.

    Fast means ``f_i > f̄`` and strongly biased ``s_i < s̄``, the paper's strict inequalities;
    a tie counts as straggling and as weakly biased (a client exactly at the mean is not
    singled out for a lower lr or feedback).
    """
    fast = f_i > f_bar
    strong = s_i < s_bar
    if fast:
        return FSBC if strong else FWBC
    return SSBC if strong else SWBC


@dataclass(frozen=True)
class Decision:
    """What Mod② tells the client's next job (and, through ``feedback`` and ``G``, the server)."""

    type: int  # index into CLIENT_TYPES
    lr: float
    momentum: float
    feedback: bool
    F: float  # f̄ / f_i, capped
    G: float  # s̄ / s_i, in [0, cap]


def _ratio_F(f_i: float, f_bar: float, cap: float) -> float:
    # A client never aggregated yet (f_i = 0) is as slow as it gets: the cap.
    if f_i <= 0:
        return cap
    return min(max(f_bar / f_i, 0.0), cap)


def _ratio_G(s_i: float, s_bar: float, cap: float) -> float:
    # With the cosine, s can be <= 0. A client pointing away from the trend (s_i <= 0) is as
    # biased as it gets: the cap. s̄ <= 0 < s_i: the client beats an average that points
    # away, the least biased: 0 (so 1/G, and with it m, hits the upper clip).
    if s_i <= 0:
        return cap
    return min(max(s_bar / s_i, 0.0), cap)


def decide(params: FedQSParams, lr_prev: float, f_i: float, f_bar: float, s_i: float, s_bar: float,
           label_accuracy: np.ndarray | None) -> Decision:
    """Mod②: the client's type, learning rate, momentum rate and feedback flag.

    ``label_accuracy``: the global model's accuracy per label (fractions) on the client's
    validation split, labels present only; only SSBC reads it, and ``None`` or empty counts
    as "even" (a straggler). The lr of every type is clipped to ``[lr_min, lr_max]`` (the
    paper states the range without saying for which types; clipping FSBC's unchanged lr is a
    no-op once it is in range).
    """
    F = _ratio_F(float(f_i), float(f_bar), params.cap)
    G = _ratio_G(float(s_i), float(s_bar), params.cap)
    kind = classify(f_i, f_bar, s_i, s_bar)
    if kind == FSBC:
        lr, feedback = lr_prev, True
    elif kind == FWBC:
        lr, feedback = lr_prev - params.a * F, False
    elif kind == SWBC:
        lr, feedback = lr_prev + params.a * F, False
    else:
        lr, feedback = lr_prev + params.a * F, _skewed(label_accuracy, params.label_gap)
    lr = min(max(lr, params.lr_min), params.lr_max)
    m_max = params.m0 + 0.4
    if feedback or not params.momentum:
        m = 0.0
    elif G == 0.0:
        m = m_max
    else:
        m = min(max(params.m0 + params.k * (1.0 / G - 1.0), 0.0), m_max)
    return Decision(type=kind, lr=lr, momentum=m, feedback=feedback, F=F, G=G)


def _skewed(label_accuracy, gap: float) -> bool:
    """SSBC's label test: True (skewed data, feedback) when max - min accuracy >= gap."""
    if label_accuracy is None:
        return False
    acc = np.asarray(label_accuracy, dtype=np.float64).ravel()
    acc = acc[~np.isnan(acc)]
    if acc.size == 0:
        return False
    return bool(acc.max() - acc.min() >= gap)


def speeds(counts: np.ndarray, active: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Paper Eq. 1: ``f_j = n(j) / mean_j n(j)``, and ``f̄``.

    ``counts[j]`` = n(j), the times client j was aggregated. The mean runs over the
    ``active`` clients (boolean mask; all when None); ``f`` is returned for every client.
    ``f̄`` is the mean of f over active clients with n(j) > 0 (the mean over all clients
    would be 1 by construction, so it could not divide anything); 1.0 when none has been
    aggregated yet, where f is all 0.
    """
    n = np.asarray(counts, dtype=np.float64)
    if n.ndim != 1 or np.any(n < 0) or not np.all(np.isfinite(n)):
        raise ValueError("counts: expected a 1-D array of non-negative aggregation counts, one per client")
    mask = np.ones(n.shape, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    if mask.shape != n.shape:
        raise ValueError(f"active: expected a boolean mask of shape {n.shape}, got {mask.shape}")
    mean = n[mask].mean() if mask.any() else 0.0
    if mean <= 0:
        return np.zeros_like(n), 1.0
    f = n / mean
    seen = mask & (n > 0)
    return f, float(f[seen].mean())


# ----------------------------------------------------------------------- local step

def heavy_ball_step_(w: torch.Tensor, grad: torch.Tensor | None, buf: torch.Tensor, lr: float, m: float) -> None:
    """One heavy-ball step in place: ``buf ← m·buf + grad;  w ← w - lr·buf``.

    With ``buf`` zero at the start of a job, after step e
    ``buf = Σ_{r=0..e-1} m^r ∇F_{e-r}``, which is the paper's Equation 3 bracket
    ``Σ_{r=1..e} m^r ∇F_{e-r} + ∇F_e`` with ``∇F_0 = 0`` (no gradient before the first step).
    ``m = 0`` is plain SGD. Separate element-wise ops (no fused ``alpha=``) keep the
    result independent of the kernel's code path. ``grad=None`` (a parameter the loss did
    not touch) skips the parameter, as ``torch.optim.SGD`` does.
    """
    if grad is None:
        return
    with torch.no_grad():
        if m == 0.0:
            buf.copy_(grad)
        else:
            buf.mul_(m)
            buf.add_(grad)
        w.sub_(torch.mul(buf, lr))
