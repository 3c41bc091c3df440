"""FedQS on a client host: each client's last update, and Mod① and Mod② before its next job.

A host of a FedQS rule keeps, per client, its last update (parameters only, or with
``--fedqs-sketch-similarity`` its AMS sketch) until the client's next job; that job first
measures the update against the reference the server sent with the model (Mod①: the
paper's similarity to ``w^t - w^(t-1)``, or the authors' per-layer angle) and then decides
the client's type, learning rate, momentum and feedback flag (Mod②, :func:`.fedqs.decide`).
Which similarity, and when the authors' variant decides at all, is the variant's
(:mod:`.fedqs`); the host (:class:`.client.Host`) names no variant.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..aggregate import sketch_cosine
from .fedqs import SSBC, FedQSParams, authors_ready, classify, decide, layer_angle, layer_bounds, similarity
from .store import ModelStore, capacity

__all__ = ["FedQSClients"]


class FedQSClients:
    """The FedQS state of one host's clients. ``sketcher``: an :class:`fdahpc.sketch.AmsSketch`
    over the parameters (``--fedqs-sketch-similarity``), or None; ``done_at(clients)``: when
    each listed client's last job ended (the one that ended first needs its update first)."""

    def __init__(self, params: FedQSParams, model: torch.nn.Module, flat, sketcher, budget: float | None,
                 spill_dir: str | None, done_at: Callable, tag: str = "") -> None:
        self.params, self.flat, self.sketcher = params, flat, sketcher
        self.layers = layer_bounds(model)  # the authors' per-layer angle
        self.ref_sketches: dict[int, np.ndarray] = {}  # version -> sketch of its reference
        floats = sketcher.rows * sketcher.cols if sketcher else flat.dim
        self.deltas = ModelStore(capacity(budget, floats), spill_dir, lambda: done_at(self.deltas.keys()),
                                 tag=f"{tag}fedqs-updates-")

    @property
    def held_peak(self) -> int:
        """Full-size vectors held at once (sketches are not counted)."""
        return 0 if self.sketcher else self.deltas.peak

    def decide(self, i: int, c, version: int, reference: torch.Tensor, label_test: Callable):
        """Mod① and Mod②: similarity (or the authors' angle) of client i's last update to
        ``reference`` (that of ``version``), then the type; returns (decision or None, s_i)."""
        if i not in self.deltas:  # no update yet
            return None, float("nan")
        delta, fedqs = self.deltas[i], self.params
        if fedqs.variant == "authors":
            s_i = layer_angle(delta, reference, self.layers)
        elif self.sketcher is not None:
            if version not in self.ref_sketches:
                self.ref_sketches[version] = self.sketcher.sketch(reference).astype(np.float32)
            s_i = sketch_cosine(delta.numpy().reshape(self.sketcher.rows, self.sketcher.cols), self.ref_sketches[version])
        else:
            s_i = similarity(delta, reference, fedqs.similarity)
        if fedqs.variant == "authors" and not authors_ready(c.f_i, c.f_bar, c.s_bar):
            return None, s_i  # the angle is still reported (the server's θ̄ counts it)
        s_bar = s_i if np.isnan(c.s_bar) else c.s_bar
        labels = None
        if classify(c.f_i, c.f_bar, s_i, s_bar, fedqs.variant) == SSBC:
            labels = label_test(c.data)
        return decide(fedqs, c.lr, c.f_i, c.f_bar, s_i, s_bar, labels), s_i

    def keep(self, i: int, c, lr: float, end: torch.Tensor, start: torch.Tensor) -> None:
        """Client i's (``c``'s) learning rate and update (parameters only) from the job that
        ran at ``lr`` from ``start`` to ``end``, for its next job."""
        c.lr = lr
        delta = end[: self.flat.dim] - start[: self.flat.dim]
        if self.sketcher is not None:  # 5 KB with the default 5 x 250
            delta = torch.from_numpy(self.sketcher.sketch(delta).astype(np.float32).ravel())
        self.deltas.put(i, delta)

    def forget(self, version: int) -> None:
        self.ref_sketches.pop(version, None)

    def state_dict(self) -> dict[int, torch.Tensor]:
        return {i: self.deltas[i] for i in self.deltas.keys()}

    def load_state_dict(self, state: dict, clients) -> None:
        for i, delta in state.items():
            if int(i) in clients:
                self.deltas.put(int(i), delta)

    def close(self) -> None:
        self.deltas.close()
