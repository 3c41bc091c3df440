"""Pure aggregation math: pseudo-gradients, FedOpt server steps, FedAdp weights.

Nothing here communicates. In an AllReduce world there is no server rank: every rank
holds an identical replica of the server state, the caller averages (or gathers) what
is needed and hands the results in, and every rank applies the same deterministic
update.

Vectors are flat 1-D float tensors: ``torch.Tensor`` on any device, or ``numpy``
arrays, which are wrapped zero-copy with ``torch.from_numpy`` so in-place results land
in the caller's array. The math is written with torch ops so that a CUDA parameter
buffer is updated on the GPU without a round trip through the host.

Determinism: the server updates use only correctly rounded element-wise operations
(multiply, add, subtract, divide, sqrt), never fused ``a + alpha * b`` kernels. A fused
kernel may take an FMA path in the SIMD loop and a plain path in the scalar tail, and
where the tail falls depends on the thread chunking; with separate operations every
coordinate's result is the same whatever code path computed it, so replicas on
identical hardware stay bit-identical.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

__all__ = [
    "pseudo_gradient",
    "weighted_sum",
    "apply_update",
    "ServerOptimizer",
    "FedAvgM",
    "FedAdam",
    "DiLoCoOuter",
    "gompertz",
    "FedAdpWeights",
    "sketch_cosine",
    "sketched_cosines",
]


# ----------------------------------------------------------------------------- helpers

def _as_tensor(x, name: str) -> torch.Tensor:
    """Share memory with ``x`` so in-place writes reach the caller's buffer."""
    if isinstance(x, torch.Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        t = torch.from_numpy(x)
    else:
        raise ValueError(f"{name}: expected a 1-D float numpy array or torch tensor, "
                         f"got {type(x).__name__}")
    if t.dim() != 1 or not t.is_floating_point():
        raise ValueError(f"{name}: expected a 1-D float vector, got shape "
                         f"{tuple(t.shape)} dtype {t.dtype}; pass the flat parameter buffer")
    return t


def _check_pair(a: torch.Tensor, b: torch.Tensor, names: tuple[str, str]) -> None:
    if a.shape != b.shape or a.device != b.device or a.dtype != b.dtype:
        raise ValueError(f"{names[0]} and {names[1]}: must share shape, dtype and device, "
                         f"got {tuple(a.shape)}/{a.dtype}/{a.device} and "
                         f"{tuple(b.shape)}/{b.dtype}/{b.device}")


def _positive(value, name: str, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} {value!r}: must be a positive finite number, e.g. {example}")
    return float(value)


def _beta(value, name: str, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} {value!r}: must be in [0, 1), e.g. {example}")
    return float(value)


def _positive_int(value, name: str, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} {value!r}: must be a positive integer, e.g. {example}")
    return int(value)


def _load_vector(dst: torch.Tensor, src, name: str) -> None:
    t = torch.as_tensor(np.asarray(src) if not isinstance(src, torch.Tensor) else src)
    if tuple(t.shape) != tuple(dst.shape):
        raise ValueError(f"state_dict[{name!r}]: shape {tuple(t.shape)} does not match "
                         f"{tuple(dst.shape)}; load a state saved with the same dim")
    dst.copy_(t)


# ----------------------------------------------------------------------- plain vectors

def pseudo_gradient(w_server, w_mean, out=None):
    """``Delta = w_server - w_mean``: the server's view of the clients' progress.

    The sign follows Reddi et al., so a server optimizer *descends* along Delta, and
    plain FedAvg is ``w_server - 1.0 * Delta = w_mean``. Returns ``out`` (or a new
    vector of ``w_server``'s type).
    """
    ws = _as_tensor(w_server, "w_server")
    wm = _as_tensor(w_mean, "w_mean")
    _check_pair(ws, wm, ("w_server", "w_mean"))
    if out is None:
        out = np.empty_like(w_server) if isinstance(w_server, np.ndarray) \
            else torch.empty_like(ws)
    o = _as_tensor(out, "out")
    _check_pair(ws, o, ("w_server", "out"))
    torch.sub(ws, wm, out=o)
    return out


def weighted_sum(vectors: Sequence, weights: Sequence[float], out=None):
    """``sum_i weights[i] * vectors[i]`` in the given order (a fixed order keeps it
    deterministic). For single-process simulation and for the coordinator of the
    semi-asynchronous mode; under MPI the sum is an AllReduce of ``psi_i * Delta_i``."""
    if len(vectors) == 0 or len(vectors) != len(weights):
        raise ValueError(f"vectors/weights: need equally many, at least one; got "
                         f"{len(vectors)} vectors and {len(weights)} weights")
    ts = [_as_tensor(v, f"vectors[{i}]") for i, v in enumerate(vectors)]
    for i, t in enumerate(ts[1:], 1):
        _check_pair(ts[0], t, ("vectors[0]", f"vectors[{i}]"))
    if out is None:
        out = np.empty_like(vectors[0]) if isinstance(vectors[0], np.ndarray) \
            else torch.empty_like(ts[0])
    o = _as_tensor(out, "out")
    _check_pair(ts[0], o, ("vectors[0]", "out"))
    with torch.no_grad():
        tmp = torch.empty_like(o)
        o.zero_()
        for t, a in zip(ts, weights):
            torch.mul(t, float(a), out=tmp)
            o.add_(tmp)
    return out


def apply_update(w_global, update):
    """FedAdp's global step ``w_global <- w_global + sum_i psi_i Delta_i``, in place.

    ``update`` is the already weighted sum (after the caller's AllReduce of
    ``psi_i * Delta_i``), with ``Delta_i = w_i - w_global`` (note: the opposite sign of
    :func:`pseudo_gradient`, as in the FedAdp paper)."""
    w = _as_tensor(w_global, "w_global")
    u = _as_tensor(update, "update")
    _check_pair(w, u, ("w_global", "update"))
    with torch.no_grad():
        w.add_(u)
    return w_global


# ------------------------------------------------------------------ server optimizers

class ServerOptimizer:
    """A FedOpt server step on a replicated server model.

    ``step(w_server, w_mean)`` reads the average of the client models, forms the
    pseudo-gradient and writes the new server model into ``w_server`` in place.
    Subclasses implement ``_update(w, delta)`` and name their state buffers in
    ``_buffers``; the step counter and (de)serialization live here once.
    """

    _buffers: tuple[str, ...] = ()        # state, saved by state_dict
    _scratch: tuple[str, ...] = ("_delta",)  # work space, not state

    def __init__(self, dim: int):
        self.dim = _positive_int(dim, "dim", "the number of trainable parameters")
        self.step_count = 0
        for b in self._buffers + self._scratch:
            setattr(self, b, torch.zeros(self.dim, dtype=torch.float32))

    def _follow(self, w: torch.Tensor) -> None:
        # State follows the parameters' device and dtype (moved once, on the first step).
        if self._delta.device != w.device or self._delta.dtype != w.dtype:
            for b in self._buffers + self._scratch:
                setattr(self, b, getattr(self, b).to(device=w.device, dtype=w.dtype))

    def step(self, w_server, w_mean):
        """One server round: ``Delta = w_server - w_mean``, then the rule's update."""
        ws = _as_tensor(w_server, "w_server")
        wm = _as_tensor(w_mean, "w_mean")
        _check_pair(ws, wm, ("w_server", "w_mean"))
        if ws.numel() != self.dim:
            raise ValueError(f"w_server: has {ws.numel()} entries but the optimizer was "
                             f"built for dim={self.dim}; build it with the model's size")
        self._follow(ws)
        with torch.no_grad():
            self._update(ws, pseudo_gradient(ws, wm, out=self._delta))
        self.step_count += 1
        return w_server

    def _update(self, w: torch.Tensor, delta: torch.Tensor) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """Step counter and state buffers as CPU copies (safe for torch.save / HDF5)."""
        d = {"dim": self.dim, "step": self.step_count}
        for b in self._buffers:
            d[b] = getattr(self, b).detach().to("cpu", copy=True)
        return d

    def load_state_dict(self, state: dict) -> None:
        if int(state["dim"]) != self.dim:
            raise ValueError(f"state_dict['dim'] {state['dim']}: does not match dim={self.dim}; "
                             f"load a state saved for the same model")
        for b in self._buffers:
            _load_vector(getattr(self, b), state[b], b)
        self.step_count = int(state["step"])


class FedAvgM(ServerOptimizer):
    """Server momentum, Hsu et al. 2019 (arXiv 1909.06335):
    ``v <- beta v + Delta;  w <- w - eta_s v``.

    Defaults are the FDA paper's (eta_s 0.316, beta 0.9). ``eta_s=1, beta=0`` is plain
    FedAvg (``w <- w_mean``).
    """

    _buffers = ("v",)

    def __init__(self, dim: int, eta_s: float = 0.316, beta: float = 0.9):
        self.eta_s = _positive(eta_s, "eta_s (--server-lr)", "0.316")
        self.beta = _beta(beta, "beta (--server-momentum)", "0.9")
        super().__init__(dim)

    def _update(self, w, delta):
        v = self.v
        v.mul_(self.beta)
        v.add_(delta)
        torch.mul(v, self.eta_s, out=delta)   # delta is scratch from here on
        w.sub_(delta)


class FedAdam(ServerOptimizer):
    """Server Adam, Reddi et al. 2021 "Adaptive Federated Optimization" (arXiv 2003.00295):
    ``m <- beta_1 m + (1-beta_1) Delta;  v <- beta_2 v + (1-beta_2) Delta^2;
    w <- w - eta_s m / (sqrt(v) + tau)``.

    No bias correction by default, exactly as in Reddi et al.'s Algorithm 2 (so the first
    steps are about ``eta_s * (1-beta_1)/sqrt(1-beta_2)`` per coordinate, not ``eta_s``);
    ``bias_correction=True`` divides ``m`` by ``1-beta_1^t`` and ``v`` by ``1-beta_2^t``
    in round ``t`` as Kingma and Ba's Adam does (what Keras' Adam applies). ``tau``
    is the adaptivity floor and must be positive: with tau = 0 a coordinate whose Delta
    has always been 0 would compute 0/0. Defaults are the FDA paper's (Keras Adam).
    """

    _buffers = ("m", "v")
    _scratch = ("_delta", "_tmp")

    def __init__(self, dim: int, eta_s: float = 1e-3, beta_1: float = 0.9,
                 beta_2: float = 0.999, tau: float = 1e-7, bias_correction: bool = False):
        self.bias_correction = bool(bias_correction)
        self.eta_s = _positive(eta_s, "eta_s (--server-lr)", "1e-3")
        self.beta_1 = _beta(beta_1, "beta_1 (--server-betas)", "0.9")
        self.beta_2 = _beta(beta_2, "beta_2 (--server-betas)", "0.999")
        self.tau = _positive(tau, "tau (--server-tau)", "1e-7")
        super().__init__(dim)

    def _update(self, w, delta):
        m, v, tmp = self.m, self.v, self._tmp
        m.mul_(self.beta_1)
        torch.mul(delta, 1.0 - self.beta_1, out=tmp)
        m.add_(tmp)
        v.mul_(self.beta_2)
        torch.mul(delta, delta, out=tmp)
        tmp.mul_(1.0 - self.beta_2)
        v.add_(tmp)
        eta = self.eta_s
        if self.bias_correction:
            t = self.step_count + 1
            torch.mul(v, 1.0 / (1.0 - self.beta_2 ** t), out=tmp)
            torch.sqrt(tmp, out=tmp)
            eta = self.eta_s / (1.0 - self.beta_1 ** t)
        else:
            torch.sqrt(v, out=tmp)
        tmp.add_(self.tau)
        torch.div(m, tmp, out=tmp)
        tmp.mul_(eta)
        w.sub_(tmp)


class DiLoCoOuter(ServerOptimizer):
    """DiLoCo's outer step, Douillard et al. 2023, "DiLoCo: Distributed Low-Communication
    Training of Language Models" (arXiv 2311.08105): SGD with Nesterov momentum on the
    pseudo-gradient, ``v <- mu v + Delta;  w <- w - eta (Delta + mu v)``.

    This is ``torch.optim.SGD(lr=eta, momentum=mu, nesterov=True)`` (dampening 0, no weight
    decay) with ``Delta`` as the gradient: torch's first step sets the buffer to the gradient,
    which is the rule above with ``v`` starting at zero, so the two agree from the first
    round (tests/test_diloco.py ties them). The difference from :class:`FedAvgM` is the
    look-ahead ``Delta + mu v`` in place of ``v``. Defaults are DiLoCo's (eta 0.7, mu 0.9);
    ``eta=1, mu=0`` is plain FedAvg.
    """

    _buffers = ("v",)
    _scratch = ("_delta", "_tmp")

    def __init__(self, dim: int, eta: float = 0.7, mu: float = 0.9):
        self.eta = _positive(eta, "eta (--server-lr, DiLoCo's outer learning rate)", "0.7")
        self.mu = _beta(mu, "mu (--server-momentum, DiLoCo's outer momentum)", "0.9")
        super().__init__(dim)

    def _update(self, w, delta):
        v, tmp = self.v, self._tmp
        v.mul_(self.mu)
        v.add_(delta)
        torch.mul(v, self.mu, out=tmp)
        delta.add_(tmp)  # delta is scratch from here on: Delta + mu v
        delta.mul_(self.eta)
        w.sub_(delta)


# ------------------------------------------------------------------------------ FedAdp

def gompertz(angle, alpha: float = 5.0):
    """FedAdp's contribution map ``f(θ) = alpha (1 - exp(-exp(-alpha (θ - 1))))`` of an angle θ.

    Decreasing in the angle (radians): an aligned node (θ = 0) scores about alpha,
    θ = 1 scores alpha (1 - 1/e), an orthogonal one (pi/2) scores about 0.28 for
    alpha = 5. Scalars in give a float; arrays give a float64 array.
    """
    alpha = _positive(alpha, "alpha", "5.0")
    th = np.asarray(angle, dtype=np.float64)
    # Past exp(700) the inner term saturates f at alpha anyway; capping avoids overflow.
    f = alpha * -np.expm1(-np.exp(np.minimum(-alpha * (th - 1.0), 700.0)))
    return float(f) if f.ndim == 0 else f


class FedAdpWeights:
    """FedAdp aggregation weights (Wu & Wang, "Fast-Convergent Federated Learning with
    Adaptive Weighting", IEEE TCCN 2021, arXiv 2012.00661).

    Each round the caller gathers, for every participating node i, the scalars
    ``<Delta_i, g>`` and ``||Delta_i||^2`` and the global ``||g||^2`` with
    ``g = sum_i (n_i/n) Delta_i``; :meth:`update` turns them into angles, smooths each
    node's angle over the rounds it took part in, and returns the weights ``psi``.

    Zero norms: if ``Delta_i = 0`` or ``g = 0`` the angle is undefined; we use
    ``θ = π/2`` (orthogonal: the node shows no alignment either way). It still
    counts as a round the node took part in. When g = 0 every node gets pi/2 that round.
    """

    def __init__(self, num_nodes: int, alpha: float = 5.0):
        self.num_nodes = _positive_int(num_nodes, "num_nodes", "10")
        self.alpha = _positive(alpha, "alpha (--fedadp-alpha)", "5.0")
        self.angles = np.full(self.num_nodes, np.nan)      # last raw angle θ; nan = never
        self.smoothed = np.zeros(self.num_nodes)           # θ̃, the smoothed angle
        self.counts = np.zeros(self.num_nodes, dtype=np.int64)
        self.step_count = 0

    def _validate(self, participants, n, dots, norms_sq, g_norm_sq):
        p = np.asarray(participants)
        if p.ndim != 1 or p.size == 0 or not np.issubdtype(p.dtype, np.integer):
            raise ValueError(f"participants: expected a non-empty 1-D integer array of node ids, "
                             f"got {p!r}")
        if p.min() < 0 or p.max() >= self.num_nodes or np.unique(p).size != p.size:
            raise ValueError(f"participants {p.tolist()}: ids must be distinct and in "
                             f"[0, {self.num_nodes}); one entry per participating node")
        arrays = []
        for name, a in (("n", n), ("dots", dots), ("norms_sq", norms_sq)):
            a = np.asarray(a, dtype=np.float64)
            if a.shape != p.shape or not np.all(np.isfinite(a)):
                raise ValueError(f"{name}: expected {p.size} finite values, one per participant, "
                                 f"got {a!r}")
            arrays.append(a)
        n_, dots_, norms_ = arrays
        if np.any(n_ <= 0):
            raise ValueError(f"n {n_.tolist()}: sample counts must be positive; leave nodes "
                             f"without data out of participants")
        if np.any(norms_ < 0):
            raise ValueError(f"norms_sq {norms_.tolist()}: squared norms cannot be negative")
        g = float(g_norm_sq)
        if not math.isfinite(g) or g < 0:
            raise ValueError(f"g_norm_sq {g_norm_sq!r}: must be a finite squared norm >= 0")
        return p.astype(np.int64), n_, dots_, norms_, g

    def update(self, participants, n, dots, norms_sq, g_norm_sq) -> np.ndarray:
        """One round; returns ``psi`` (float64, in the order of ``participants``, sums to 1)."""
        p, n, dots, norms_sq, g_norm_sq = self._validate(participants, n, dots, norms_sq,
                                                         g_norm_sq)
        # sqrt each factor separately: the product of two squared norms can under/overflow.
        denom = np.sqrt(norms_sq) * math.sqrt(g_norm_sq)
        angle = np.full(p.size, math.pi / 2)
        ok = denom > 0
        angle[ok] = np.arccos(np.clip(dots[ok] / denom[ok], -1.0, 1.0))

        self.counts[p] += 1
        c = self.counts[p].astype(np.float64)
        self.smoothed[p] = ((c - 1.0) / c) * self.smoothed[p] + angle / c
        self.angles[p] = angle
        self.step_count += 1

        # psi_i = n_i e^{f_i} / sum_j n_j e^{f_j}, as a log-sum-exp softmax.
        logits = np.log(n) + gompertz(self.smoothed[p], self.alpha)
        logits -= logits.max()
        e = np.exp(logits)
        return e / e.sum()

    def state_dict(self) -> dict:
        return {"num_nodes": self.num_nodes, "step": self.step_count,
                "angles": self.angles.copy(), "smoothed": self.smoothed.copy(),
                "counts": self.counts.copy()}

    def load_state_dict(self, state: dict) -> None:
        if int(state["num_nodes"]) != self.num_nodes:
            raise ValueError(f"state_dict['num_nodes'] {state['num_nodes']}: does not match "
                             f"num_nodes={self.num_nodes}; load a state from the same run")
        for name in ("angles", "smoothed", "counts"):
            a = np.asarray(state[name])
            if a.shape != (self.num_nodes,):
                raise ValueError(f"state_dict[{name!r}]: shape {a.shape}, expected "
                                 f"({self.num_nodes},)")
        self.angles = np.asarray(state["angles"], dtype=np.float64).copy()
        self.smoothed = np.asarray(state["smoothed"], dtype=np.float64).copy()
        self.counts = np.asarray(state["counts"], dtype=np.int64).copy()
        self.step_count = int(state["step"])


def sketch_cosine(sk_a: np.ndarray, sk_b: np.ndarray) -> float:
    """cos(a, b) from AMS sketches ``(rows, cols)``: the median over rows of each row's
    cosine (0 for a zero row)."""
    dots = np.einsum("rj,rj->r", sk_a, sk_b)
    norms = np.sqrt(np.einsum("rj,rj->r", sk_a, sk_a) * np.einsum("rj,rj->r", sk_b, sk_b))
    return float(np.median(np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)))


def sketched_cosines(n, sketches) -> np.ndarray:
    """FedAdp's ``cos(Delta_i, g)`` for every node from the nodes' sketches alone.

    ``sketches[i]`` is ``sk(Delta_i)`` and ``n[i]`` its sample count. Sketches are linear,
    so ``sk(g)`` is ``sum_i n_i sk(Delta_i)`` (the scale of g does not change an angle).
    Each cosine is estimated row by row from one sketch pair, then the median taken:
    numerator and norms share their hashing errors, so the ratio is steadier than an
    estimated inner product over exact norms.
    """
    sks = np.asarray(sketches, dtype=np.float64)
    sk_g = np.tensordot(np.asarray(n, dtype=np.float64), sks, axes=1)
    return np.array([sketch_cosine(s, sk_g) for s in sks])
