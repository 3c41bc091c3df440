"""The α–β cost model of an AllReduce and the epoch-time projection built on it.

``T(n, K) = 2·⌈log2 K⌉·α + 2·(K−1)/K·n·β`` for ``n`` bytes per rank over ``K`` ranks (Rabenseifner:
reduce-scatter then allgather, each ⌈log2 K⌉ rounds; the reduction's arithmetic folded into β).
``scaling.py`` fits α and β to its measurements and projects epoch times with them; other benchmarks
can price communication on a modelled fabric with :func:`fabric_allreduce_seconds`. Pure Python
(NumPy only inside the fit), no MPI or torch, so any script or test can import it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

#: The strategies the projection knows (and ``scaling.py`` measures), in report order.
STRATEGIES = ("synchronous", "fedavg", "linearfda", "sketchfda")


class Fabric(NamedTuple):
    """A modelled interconnect: bandwidth per rank (Gb/s) and per-message latency α (µs)."""

    gbps: float
    latency_us: float


#: Fabrics to price communication on. Stated assumptions, typical of each kind of link, not
#: measurements: 10 Gb/s Ethernet with a kernel TCP stack (α ≈ 25 µs), 100 Gb/s InfiniBand with RDMA
#: (α ≈ 2 µs, ``scaling.py``'s default fabric) and a 1 Gb/s link between sites (α ≈ 10 ms of
#: wide-area round trip). No congestion, no sharing of a NIC, full bisection.
FABRICS = {
    "ethernet-10g": Fabric(gbps=10.0, latency_us=25.0),
    "infiniband-100g": Fabric(gbps=100.0, latency_us=2.0),
    "cross-site-1g": Fabric(gbps=1.0, latency_us=10_000.0),
}


def latency_rounds(k: int) -> int:
    """2·⌈log2 K⌉: the latency terms of a reduce-scatter plus an allgather."""
    return 2 * math.ceil(math.log2(k)) if k > 1 else 0


def bandwidth_bytes(n: float, k: int) -> float:
    """2·(K−1)/K·n: the bytes each rank sends (and receives) in a Rabenseifner AllReduce."""
    return 2.0 * (k - 1) / k * n


def allreduce_seconds(n: float, k: int, alpha: float, beta: float) -> float:
    """T(n, K) = 2⌈log2 K⌉α + 2(K−1)/K·n·β; zero for one rank."""
    return latency_rounds(k) * alpha + bandwidth_bytes(n, k) * beta


def ring_allreduce_seconds(n: float, k: int, alpha: float, beta: float) -> float:
    """T_ring(n, K) = 2(K−1)α + 2(K−1)/K·n·β: a ring reduce-scatter then allgather, K−1 steps each,
    every step one message of n/K bytes (the latency-heavier schedule NCCL and gloo's ring use);
    zero for one rank. Equal to :func:`allreduce_seconds` at K = 2."""
    return (2 * (k - 1) * alpha if k > 1 else 0.0) + bandwidth_bytes(n, k) * beta


#: The AllReduce schedules a report can price with, by name.
COLLECTIVES = {"rabenseifner": allreduce_seconds, "ring": ring_allreduce_seconds}


def fabric_alpha_beta(gbps: float, latency_us: float) -> tuple[float, float]:
    """(α in s, β in s/B) of a link of ``gbps`` Gb/s per rank and ``latency_us`` µs per message."""
    return latency_us * 1e-6, 8.0 / (gbps * 1e9)


def fabric_allreduce_seconds(n: float, k: int, fabric: str) -> float:
    """Seconds for an AllReduce of ``n`` bytes per rank over ``k`` ranks on ``FABRICS[fabric]``.

    The α–β model with that fabric's stated α and β; zero for one rank.
    """
    try:
        f = FABRICS[fabric]
    except KeyError:
        raise ValueError(f"unknown fabric {fabric!r}; known: {', '.join(FABRICS)}") from None
    return allreduce_seconds(n, k, *fabric_alpha_beta(f.gbps, f.latency_us))


def fit_alpha_beta(points) -> tuple[float, float, list[float]]:
    """Least squares on the relative error of T(n, K) over ``points`` = [(K, n, seconds)].

    Returns (α, β, residuals) with residual = fit / measured − 1 per point. Noiseless
    times from the model give back its α and β.
    """
    import numpy as np

    pts = [(k, n, t) for k, n, t in points if k > 1 and t > 0]
    if len(pts) < 2:
        raise ValueError("fit_alpha_beta: need at least two measurements with K > 1 and a positive time")
    a = np.array([[latency_rounds(k), bandwidth_bytes(n, k)] for k, n, _ in pts], dtype=float)
    t = np.array([t for *_, t in pts], dtype=float)
    scale = a.max(axis=0)  # columns of similar size keep lstsq well conditioned
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(a / t[:, None] / scale, np.ones_like(t), rcond=None)
    alpha, beta = (coef / scale).tolist()
    residuals = [allreduce_seconds(n, k, alpha, beta) / t - 1 for k, n, t in pts]
    return alpha, beta, residuals


def steps_per_epoch(samples: int, k: int, batch: int) -> int:
    """fdahpc's epoch (``sync_loop.build``): one pass over the mean partition."""
    return max(1, math.ceil(samples / k / batch))


def period(spec, spe: int) -> int:
    """``"epoch"`` → the epoch's steps, else the given number of steps."""
    return spe if spec == "epoch" else max(1, int(spec))


def project(models: dict, ranks, alpha: float, beta: float, samples: int, batch: int, fedavg_tau="epoch",
            fda_steps_per_sync="epoch", compute_scale: float = 1.0) -> list[dict]:
    """Projected seconds per epoch; ``models[name] = {"params", "compute": {strategy: s},
    "state_bytes": {strategy: bytes}}``. One dict per (model, K, strategy); its
    ``breakeven_speedup`` is how many times faster compute must get before that strategy
    spends as long communicating as computing."""
    rows = []
    for name, m in models.items():
        model_bytes = 4 * m["params"]
        for k in ranks:
            spe = steps_per_epoch(samples, k, batch)
            full = allreduce_seconds(model_bytes, k, alpha, beta)
            for strategy in STRATEGIES:
                if strategy not in m["compute"]:
                    continue
                if strategy == "synchronous":
                    comm, syncs = full, 1.0
                elif strategy == "fedavg":
                    syncs = 1.0 / period(fedavg_tau, spe)
                    comm = full * syncs
                else:
                    syncs = 1.0 / period(fda_steps_per_sync, spe)
                    comm = allreduce_seconds(m["state_bytes"][strategy], k, alpha, beta) + full * syncs
                compute = m["compute"][strategy] / compute_scale
                step = compute + comm
                rows.append(dict(model=name, strategy=strategy, ranks=k, steps_per_epoch=spe, compute_seconds=compute,
                                 comm_seconds=comm, step_seconds=step, epoch_seconds=spe * step,
                                 comm_epoch_seconds=spe * comm, comm_share=comm / step if step > 0 else float("nan"),
                                 breakeven_speedup=compute / comm if comm > 0 else float("inf"),
                                 bytes_per_step=k * (2 * model_bytes * syncs + m["state_bytes"].get(strategy, 0))))
    return rows
