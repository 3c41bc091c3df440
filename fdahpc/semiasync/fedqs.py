"""FedQS client side: Mod① (similarity to the global trend) and Mod② (local adaptation).

"FedQS: Optimizing Gradient and Model Aggregation for Semi-Asynchronous Federated
Learning", NeurIPS 2025, arXiv 2510.07664, Sections 3.2-3.3. Pure math: the host feeds in
the numbers, no communication here.

- Mod①: pseudo-global gradient ``L_g = w_g^t - w_g^{t-1}`` (the caller's), similarity
  ``s_i = sim(Δ_i, L_g)`` with the client's latest local update (:func:`similarity`).
- Mod②: speed ``f_i = n(i) / mean_j n(j)`` (:func:`speeds`); with ``F = f̄/f_i`` and a
  bias ratio ``G`` each client is one of four types (:func:`classify`) and :func:`decide`
  sets its learning rate, momentum rate and feedback flag: FSBC keeps lr and asks for
  feedback; FWBC ``η - aF`` with momentum; SWBC ``η + aF`` with momentum; SSBC ``η + aF``,
  then the label test (:func:`label_accuracies`) picks SWBC's momentum (accuracy even over
  labels: a straggler) or FSBC's feedback (skewed labels).
- Local step: heavy ball (:func:`heavy_ball_step_`),
  ``w_e = w_{e-1} - η [Σ_{r=1..e} m^r ∇F_{e-r} + ∇F_e]``.

Two variants (``FedQSParams.variant``, ``--fedqs-variant``), each end to end:

- ``paper`` (default): cosine similarity with the true pseudo-gradient ``w^t - w^(t-1)``;
  strongly biased when ``s_i < s̄``; ``m = m0 + k (1/G - 1)`` clipped to ``[0, m0 + 0.4]``,
  k = 0.2. ``G = s̄/s_i`` is unbounded near ``s_i = 0`` and meaningless for negative
  cosines (before, any ``s_i <= 0`` jumped to the cap 9), so G is taken on the cosine
  shifted to ``[0, 1]``: ``G = (1 + s̄) / (1 + s_i)``, bounded by ``min(G, 2)`` (the
  authors' bound on G in the weight). The shift is linear, so the mean commutes with it
  and the classification ``s_i < s̄`` is exactly the paper's; G is continuous in s_i and s̄
  (``s_i = -1`` gives the bound, the limit); with the defaults, ``G = 2`` is exactly where
  the momentum reaches its lower clip 0, so the bound leaves the momentum rule untouched.
  The bounded Euclidean/Manhattan similarities use ``G = min(s̄/s_i, 2)`` unshifted.
- ``authors``: the authors' published code (GitHub bkjod/FedQS_, as we read it):
  the similarity is a per-layer angle in degrees (:func:`layer_angle`) against
  ``w^(t-1)`` itself, not ``w^t - w^(t-1)`` (their assignment into ``state_dict()`` never
  changes the model, so the "pseudo-gradient" they compare with is the previous global
  model; we reproduce that quirk on purpose); θ̄ is the mean of the non-zero θ_i; strongly
  biased when ``θ_i > θ̄``; ``G = θ_i/θ̄`` (capped at 9); momentum 0 (their main files), or
  with ``authors_momentum`` their other files' ``m = m0 + min(2 (1/G - 1), 0.4)``, floored
  at 0 (a negative rate is not a momentum), and for an SSBC client that passes the label
  test ``m0 + max(0, min(2 (1/G - 1), 0.4))``, which is m0 since G > 1 there. No decision
  until the client's speed, θ̄ and f̄ are known (:func:`authors_ready`); θ̄ for decisions is
  the server's after the last aggregation, the G in the weight is taken at aggregation.

Both variants: ``F = min(f̄/f_i, 9)``; lr ``η ± a F`` clipped to ``[lr_min, lr_max]``
for every type; the SSBC label test on up to 20 of the client's own *training* samples
per label (nothing held out), per-label accuracy halved for a label with fewer than 10
samples, a gap of at least 30 points flags the client (:func:`label_accuracies`).

Choices the paper leaves open, documented where they are made: tie-breaking in
:func:`classify`, the zero cases of F and G, clipping every type's lr, the bounded
Euclidean/Manhattan similarities, and the degenerate layers of :func:`layer_angle`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CLIENT_TYPES", "FSBC", "FWBC", "SWBC", "SSBC", "NONE", "SIMILARITIES", "VARIANTS", "similarity",
           "layer_bounds", "layer_angle", "FedQSParams", "classify", "Decision", "decide", "label_accuracies",
           "label_probe", "ratio_G", "speeds", "heavy_ball_step_", "authors_ready", "authors_G"]

CLIENT_TYPES = ("FSBC", "FWBC", "SWBC", "SSBC")
FSBC, FWBC, SWBC, SSBC = range(4)
NONE = -1  # a client without history yet: no decision, plain SGD at its current lr
SIMILARITIES = ("cosine", "euclidean", "manhattan")
VARIANTS = ("paper", "authors")
_ORTHOGONAL = 1.0 / (1.0 + math.sqrt(2.0))  # euclidean similarity of two orthogonal directions
AUTHORS_K = 2.0  # the authors' momentum slope: m = 0.1 + min(2 (1/G - 1), 0.4)
PROBE_PER_LABEL = 20  # the label test uses up to this many of a client's training samples per label
PROBE_FEW = 10  # a label with fewer samples than this has its accuracy halved


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


def layer_bounds(model: torch.nn.Module) -> list[tuple[int, int]]:
    """``(start, end)`` in the flat parameter vector of every trainable parameter named
    ``*.weight`` or ``*.bias`` (the authors' "weight and bias tensors"; buffers such as
    BatchNorm's running statistics are not parameters and never in the vector)."""
    out, offset = [], 0
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if name.endswith("weight") or name.endswith("bias"):
            out.append((offset, offset + p.numel()))
        offset += p.numel()
    return out


def layer_angle(delta: torch.Tensor, ref: torch.Tensor, layers: list[tuple[int, int]]) -> float:
    """The authors' similarity: the mean over layers of the angle in degrees between the
    client's update and ``ref`` (their ``w^(t-1)``), each first min-max normalised to
    [0, 1] and divided by its sum.

    A layer where either vector has a zero entry is skipped (as theirs); a constant vector
    (min = max, where min-max would divide by zero) is only divided by its sum, as theirs.
    No layer left: 0, which the server leaves out of θ̄.
    The sum normalisation does not change an angle; it is kept to transcribe theirs.
    """
    angles = []
    with torch.no_grad():
        for lo, hi in layers:
            x = delta[lo:hi].to(torch.float64)
            y = ref[lo:hi].to(device=x.device, dtype=torch.float64)
            if bool((x == 0).any()) or bool((y == 0).any()):
                continue
            xs, ys = [], []
            for v, keep in ((x, xs), (y, ys)):
                span = float(v.max() - v.min())
                if not math.isfinite(span):
                    break
                if span != 0.0:
                    v = (v - v.min()) / span
                keep.append(v / v.sum())
            if not xs or not ys:
                continue
            xv, yv = xs[0], ys[0]
            cos = float(torch.dot(xv, yv)) / float(torch.linalg.vector_norm(xv)) / float(torch.linalg.vector_norm(yv))
            angles.append(math.degrees(math.acos(min(1.0, max(-1.0, cos)))))
    return float(np.mean(angles)) if angles else 0.0


# ----------------------------------------------------------------------------- Mod②

# The command-line flag of each field, so an error names what the user typed.
_FLAGS = {"eta0": "--lr", "a": "--fedqs-a", "m0": "--fedqs-m0", "k": "--fedqs-k",
          "lr_min": "--fedqs-lr-min", "lr_max": "--fedqs-lr-max", "variant": "--fedqs-variant",
          "similarity": "--fedqs-similarity", "authors_momentum": "--fedqs-authors-momentum",
          "sketch": "--fedqs-sketch-similarity"}


@dataclass(frozen=True)
class FedQSParams:
    """Mod②'s hyperparameters; defaults are the paper's (Section 5 and Appendix)."""

    eta0: float = 0.1  # initial local learning rate
    a: float = 0.002  # learning-rate change rate: η ± a·F
    m0: float = 0.1  # momentum base rate
    k: float = 0.2  # momentum slope: m = m0 + k (1/G - 1) (paper variant)
    lr_min: float = 0.001  # every type's lr is clipped to [lr_min, lr_max]
    lr_max: float = 0.2
    cap: float = 9.0  # F (both variants) and the authors' G are capped here (the authors' code)
    g_max: float = 2.0  # the paper variant's bound on G (the authors' min(G, 2)); see the module docstring
    momentum: bool = True  # False: the ablation without momentum
    label_gap: float = 0.30  # SSBC label test: max - min per-label accuracy (fractions) at or above it = skewed
    variant: str = "paper"  # "paper" or "authors" (module docstring)
    similarity: str = "cosine"  # paper variant's Mod① similarity (the authors' variant uses layer_angle)
    authors_momentum: bool = False  # authors variant: their other files' m = m0 + min(2 (1/G - 1), 0.4)
    sketch: bool = False  # paper variant, cosine: Mod①'s cosine from AMS sketches (a client keeps l·m floats, not 4·d bytes)

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
        if not self.lr_min <= self.eta0 <= self.lr_max:  # else the first decision would clip it there
            fail("eta0", f"outside FedQS's lr bounds [{_FLAGS['lr_min']} {self.lr_min}, {_FLAGS['lr_max']} "
                 f"{self.lr_max}], to which every client's lr is clipped; move the bounds (and {_FLAGS['a']}) with it",
                 "--lr 1.0 --fedqs-lr-min 0.01 --fedqs-lr-max 2.0 --fedqs-a 0.02")
        if number("cap") <= 0:
            fail("cap", "must be positive", "9.0")
        if number("g_max") <= 0:
            fail("g_max", "must be positive", "2.0")
        if not 0 <= number("label_gap") <= 1:
            fail("label_gap", "must be a fraction in [0, 1] (per-label accuracies are fractions)", "0.30")
        for name in ("momentum", "authors_momentum", "sketch"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                fail(name, "must be True or False", "False")
        if self.variant not in VARIANTS:
            fail("variant", f"unknown; choose one of {', '.join(VARIANTS)}", "paper")
        if self.similarity not in SIMILARITIES:
            fail("similarity", f"unknown; choose one of {', '.join(SIMILARITIES)}", "cosine")
        if self.authors_momentum and self.variant != "authors":
            fail("authors_momentum", "is the authors' variant's momentum; add --fedqs-variant authors or drop it", "False")
        if self.sketch and (self.variant != "paper" or self.similarity != "cosine"):
            fail("sketch", "estimates the paper variant's cosine; use it with --fedqs-variant paper and "
                 "--fedqs-similarity cosine, or drop it", "False")


def classify(f_i: float, f_bar: float, s_i: float, s_bar: float, variant: str = "paper") -> int:
    """The client's quadrant, an index into :data:`CLIENT_TYPES`.

    Fast means ``f_i > f̄``; strongly biased ``s_i < s̄`` (paper: a similarity) or
    ``θ_i > θ̄`` (authors: an angle, larger is more biased); strict inequalities, so a tie
    counts as straggling and as weakly biased (a client exactly at the mean is not singled
    out for a lower lr or feedback).
    """
    fast = f_i > f_bar
    strong = s_i > s_bar if variant == "authors" else s_i < s_bar
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
    G: float  # the bias ratio: paper min((1+s̄)/(1+s_i), g_max) (cosine); authors min(θ_i/θ̄, cap)


def _ratio_F(f_i: float, f_bar: float, cap: float) -> float:
    # A client never aggregated yet (f_i = 0) is as slow as it gets: the cap.
    if f_i <= 0:
        return cap
    return min(max(f_bar / f_i, 0.0), cap)


def ratio_G(params: FedQSParams, s_i: float, s_bar: float) -> float:
    """G of the variant (module docstring): continuous in both arguments and bounded."""
    if params.variant == "authors":
        # θ̄ = 0: no client has an angle yet, nothing to compare with: neutral.
        return 1.0 if s_bar <= 0 else min(max(s_i / s_bar, 0.0), params.cap)
    num, den = (1.0 + s_bar, 1.0 + s_i) if params.similarity == "cosine" else (s_bar, s_i)
    if den <= 0:  # s_i = -1 (cosine): the bound, the limit from above; both at -1: even
        return 1.0 if num <= 0 else params.g_max
    return min(max(num / den, 0.0), params.g_max)


def _momentum(params: FedQSParams, G: float) -> float:
    """The momentum rate of a client without feedback."""
    m_max = params.m0 + 0.4
    if not params.momentum or (params.variant == "authors" and not params.authors_momentum):
        return 0.0
    if G == 0.0:
        return m_max
    if params.variant == "authors":
        return max(params.m0 + min(AUTHORS_K * (1.0 / G - 1.0), 0.4), 0.0)
    return min(max(params.m0 + params.k * (1.0 / G - 1.0), 0.0), m_max)


def decide(params: FedQSParams, lr_prev: float, f_i: float, f_bar: float, s_i: float, s_bar: float,
           label_accuracy: np.ndarray | None) -> Decision:
    """Mod②: the client's type, learning rate, momentum rate and feedback flag.

    ``s_i``, ``s_bar``: the variant's similarity (paper) or angle (authors) and its mean.
    ``label_accuracy``: :func:`label_accuracies` of the global model on the client's probe
    samples (fractions, labels present only); only SSBC reads it, and ``None`` or empty
    counts as "even" (a straggler). The lr of every type is clipped to ``[lr_min, lr_max]``
    (the paper states the range without saying for which types; clipping FSBC's unchanged
    lr is a no-op once it is in range).
    """
    F = _ratio_F(float(f_i), float(f_bar), params.cap)
    G = ratio_G(params, float(s_i), float(s_bar))
    kind = classify(f_i, f_bar, s_i, s_bar, params.variant)
    if kind == FSBC:
        lr, feedback = lr_prev, True
    elif kind == FWBC:
        lr, feedback = lr_prev - params.a * F, False
    elif kind == SWBC:
        lr, feedback = lr_prev + params.a * F, False
    else:
        lr, feedback = lr_prev + params.a * F, _skewed(label_accuracy, params.label_gap)
    lr = min(max(lr, params.lr_min), params.lr_max)
    m = 0.0 if feedback else _momentum(params, G)
    if kind == SSBC and not feedback and params.variant == "authors" and params.authors_momentum and params.momentum \
            and G > 0:
        # their _multi files' straggler: m0 + max(0, min(2 (1/G - 1), 0.4)), and G > 1 for
        # an SSBC client (θ_i > θ̄), so the fixed m0 (0.1)
        m = params.m0 + max(0.0, min(AUTHORS_K * (1.0 / G - 1.0), 0.4))
    return Decision(type=kind, lr=lr, momentum=m, feedback=feedback, F=F, G=G)


def authors_G(angles: np.ndarray, clients, cap: float = 9.0) -> np.ndarray:
    """The authors' G of each listed client, taken at aggregation: its latest angle over
    θ̄, the mean of every client's latest non-zero angle at that moment (``angles``: one
    per client, NaN where none is known), in ``[0, cap]``; 1 (neutral) while θ̄ is unknown
    or the client has no angle."""
    theta = np.asarray(angles, dtype=np.float64)
    known = theta[np.isfinite(theta) & (theta != 0)]
    mean = float(known.mean()) if len(known) else 0.0
    out = np.ones(len(clients))
    for k, c in enumerate(clients):
        if mean > 0 and math.isfinite(theta[c]):
            out[k] = min(max(float(theta[c]) / mean, 0.0), cap)
    return out


def authors_ready(f_i: float, f_bar: float, s_bar: float) -> bool:
    """The authors decide nothing (lr kept, no momentum, no flag) until the client's speed,
    the mean angle and the mean speed are all known: ``f_i > 0`` (aggregated at least
    once), ``θ̄ > 0`` and ``f̄ > 0``."""
    return f_i > 0 and f_bar > 0 and math.isfinite(s_bar) and s_bar > 0


def _skewed(label_accuracy, gap: float) -> bool:
    """SSBC's label test: True (skewed data, feedback) when max - min accuracy >= gap."""
    if label_accuracy is None:
        return False
    acc = np.asarray(label_accuracy, dtype=np.float64).ravel()
    acc = acc[~np.isnan(acc)]
    if acc.size == 0:
        return False
    return bool(acc.max() - acc.min() >= gap)


def label_probe(y: np.ndarray, order: np.ndarray, per_label: int = PROBE_PER_LABEL) -> np.ndarray:
    """The label test's samples: the first ``per_label`` rows of each label in ``order`` (a
    seeded permutation of the client's rows), returned sorted. Nothing is held out: these
    rows stay in the client's training data, as in the authors' code."""
    y = np.asarray(y)
    taken: dict[int, int] = {}
    keep = []
    for r in np.asarray(order):
        label = int(y[r])
        if taken.get(label, 0) < per_label:
            taken[label] = taken.get(label, 0) + 1
            keep.append(int(r))
    return np.sort(np.array(keep, dtype=np.int64))


def label_accuracies(accuracy: np.ndarray, counts: np.ndarray, few: int = PROBE_FEW) -> np.ndarray:
    """Per-label accuracies as the label test reads them: labels with samples only, the
    accuracy of a label with fewer than ``few`` samples halved (the authors' rule, so a
    label the client barely holds pulls the minimum down and flags it more readily)."""
    acc = np.asarray(accuracy, dtype=np.float64)
    n = np.asarray(counts)
    if acc.shape != n.shape:
        raise ValueError(f"accuracy and counts: shapes {acc.shape} and {n.shape} differ; give one entry per label")
    seen = n > 0
    return np.where(n[seen] < few, acc[seen] / 2.0, acc[seen])


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
