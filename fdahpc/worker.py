"""Local training, shared by both execution modes: minibatches, the local optimizer, and
"take k local steps".

The synchronous loop calls :func:`local_steps` with k = 1 between collectives; a client
host of the semi-asynchronous mode calls it with a whole local job (``--tau`` steps or
``--local-epochs`` of the client's data). Nothing here communicates.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.optim.sgd import sgd as _torch_sgd  # SGD.step's own update, as a function

from .choices import unknown
from .data.text import TokenWindows, as_tensor
from .models import flat_outputs

__all__ = ["BatchStream", "OPTIMIZERS", "make_optimizer", "make_job_optimizer", "JobSGD", "local_steps", "check_clip",
           "steps_per_job"]

OPTIMIZERS = ("adam", "sgd", "momentum", "nesterov", "adamw")


class BatchStream:
    """Endless minibatches of one partition, reshuffled every local pass.

    Batches always have ``batch_size`` samples (a pass that runs out is continued from the
    next permutation), so every worker takes the same number of steps per epoch whatever
    the size of its partition. The shuffling stream depends only on ``(seed, stream)``:
    ``stream`` is the rank in the synchronous mode and the client id in the
    semi-asynchronous one, so client i there draws exactly the batches rank i draws here.

    With a GPU ``device`` the partition stays in host memory and each batch is gathered
    into pinned buffers and copied to the device once per step, asynchronously.

    ``drop_last`` (``--drop-last``, as PyTorch's DataLoader and the FedQS authors' code): a
    pass yields ``⌊n/batch_size⌋`` batches and its last partial batch is dropped, so an
    epoch is exactly one permutation; a partition smaller than one batch yields none
    (:meth:`next` raises; :func:`steps_per_job` gives such a client 0 steps).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, batch_size: int, seed: int, stream: int,
                 device: torch.device | str = "cpu", drop_last: bool = False) -> None:
        self.x, self.y = as_tensor(x), as_tensor(y)  # a text's windows are gathered per batch
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.gen = torch.Generator().manual_seed(seed * 100_003 + stream)
        self.order = torch.empty(0, dtype=torch.long)
        self.device = torch.device(device)
        self._windows = isinstance(self.x, TokenWindows) or isinstance(self.y, TokenWindows)
        if self.device.type != "cpu" and not self._windows:
            # Reused every step: the previous copy has finished by then (the step's loss
            # was read on the host).
            self._pinned = (torch.empty((batch_size, *self.x.shape[1:]), dtype=self.x.dtype).pin_memory(),
                            torch.empty(batch_size, dtype=self.y.dtype).pin_memory())

    def __len__(self) -> int:
        return len(self.y)

    def state_dict(self) -> dict:
        """The shuffling generator and what is left of the current permutation."""
        return {"generator": self.gen.get_state(), "order": self.order.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["generator"])
        self.order = state["order"].clone()

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.drop_last and len(self.order) < self.batch_size:
            if len(self.y) < self.batch_size:
                raise ValueError(f"--drop-last: a partition of {len(self.y)} samples holds no full batch of "
                                 f"{self.batch_size}; lower --batch-size or drop --drop-last")
            self.order = torch.randperm(len(self.y), generator=self.gen)  # the partial rest is dropped
        while len(self.order) < self.batch_size:
            self.order = torch.cat([self.order, torch.randperm(len(self.y), generator=self.gen)])
        idx, self.order = self.order[: self.batch_size], self.order[self.batch_size :]
        if self.device.type == "cpu":
            return self.x[idx], self.y[idx]
        if self._windows:
            return self.x[idx].to(self.device, non_blocking=True), self.y[idx].to(self.device, non_blocking=True)
        xb, yb = self._pinned
        torch.index_select(self.x, 0, idx, out=xb)
        torch.index_select(self.y, 0, idx, out=yb)
        return xb.to(self.device, non_blocking=True), yb.to(self.device, non_blocking=True)


def steps_per_job(n: int, batch_size: int, local_epochs: float, tau: int | None = None,
                  drop_last: bool = False) -> int:
    """Local steps of one job over ``n`` samples: ``tau`` when given, else ``local_epochs``
    passes: ``⌈E·n/B⌉`` (at least 1), or with ``drop_last`` ``⌊E·⌊n/B⌋⌋`` full batches
    (the FedQS authors' 2·⌊n/50⌋; 0 for a client with fewer than B samples, which then
    uploads its starting model unchanged). With ``tau`` and ``drop_last`` such a client
    takes no step either."""
    if drop_last and n < batch_size:
        return 0
    if tau is not None:
        return tau
    if drop_last:
        return int(math.floor(local_epochs * (n // batch_size) + 1e-9))
    return max(1, math.ceil(local_epochs * n / batch_size))


#: The SGD family, name -> (momentum, nesterov): "momentum" is the heavy ball. Both
#: :func:`make_optimizer` and :func:`make_job_optimizer` build from it.
_SGD_FAMILY = {"sgd": (0.0, False), "momentum": (0.9, False), "nesterov": (0.9, True)}


def make_optimizer(name: str, lr: float, params, weight_decay: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name in _SGD_FAMILY:
        momentum, nesterov = _SGD_FAMILY[name]
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
    raise unknown("--optimizer", name, OPTIMIZERS)


class JobSGD:
    """SGD for one local job whose optimizer state ends with the job (a semi-asynchronous
    client's): ``torch.optim.SGD``'s own update, the functional :func:`torch.optim.sgd.sgd`
    called with the arguments ``SGD.step`` passes it, so the parameters come out bit for bit
    the same (``tests/test_job_optimizer.py``). Why not the class: every ``torch.optim``
    optimizer imports ``torch._dynamo`` on its first ``add_param_group``/``step`` (their
    guards against compilation), about as long as importing torch itself, on every client
    host at the first job of a run: over a quarter of the time to the end of round 1 at N = 1000
    (``benchmarks/startup_profile.py``). No ``state_dict``: nothing of it outlives the job."""

    def __init__(self, params, lr: float, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0):
        self.params = list(params)
        self.lr, self.momentum, self.nesterov, self.weight_decay = lr, momentum, nesterov, weight_decay
        self.buffers: dict[int, torch.Tensor | None] = {}  # momentum buffers, by parameter position

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.params) if p.grad is not None]  # as SGD._init_group skips them
        params = [self.params[i] for i in live]
        grads = [p.grad for p in params]
        bufs = [self.buffers.get(i) for i in live]
        _torch_sgd(params, grads, bufs, weight_decay=self.weight_decay, momentum=self.momentum, lr=self.lr,
                   dampening=0.0, nesterov=self.nesterov, maximize=False,
                   has_sparse_grad=any(g.is_sparse for g in grads), foreach=None, fused=None)
        if self.momentum != 0:
            self.buffers.update(zip(live, bufs))

    def zero_grad(self) -> None:
        """``Optimizer.zero_grad()``'s default (``set_to_none=True``)."""
        for p in self.params:
            p.grad = None


def make_job_optimizer(name: str, lr: float, params, weight_decay: float):
    """The optimizer of one local job that starts afresh and is dropped at its end: the
    SGD family as :class:`JobSGD`, the others as :func:`make_optimizer` builds them."""
    if name in _SGD_FAMILY:
        momentum, nesterov = _SGD_FAMILY[name]
        return JobSGD(params, lr, momentum, nesterov, weight_decay)
    return make_optimizer(name, lr, params, weight_decay)


def _loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; over every predicted character for a sequence model."""
    return nn.functional.cross_entropy(*flat_outputs(logits, y))


def check_clip(clip_grad_norm: float | None) -> None:
    """``--clip-grad-norm``: None (off) or a positive finite norm."""
    v = clip_grad_norm
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
        raise ValueError(f"--clip-grad-norm {v!r}: must be a positive finite gradient norm, e.g. 20 (omit it for no clip)")


def local_steps(model: nn.Module, batches: BatchStream, k: int, step: Callable[[], None],
                zero_grad: Callable[[], None], clip_grad_norm: float | None = None,
                device: torch.device | None = None) -> float:
    """Take ``k`` minibatch steps on ``model``; returns the sum of the k training losses.

    ``step``/``zero_grad`` are an optimizer's methods, or any update rule written against
    the parameters' ``.grad`` (FedQS's heavy-ball step), so every mode trains through this
    one loop. ``clip_grad_norm`` (``--clip-grad-norm``): before each step the gradients of
    all parameters are scaled to a total L2 norm of at most this
    (:func:`torch.nn.utils.clip_grad_norm_`); None, the default, touches nothing.
    ``device``: copy each batch there first (a semi-asynchronous GPU host, whose many
    clients' streams stay in host memory).
    """
    check_clip(clip_grad_norm)
    total = 0.0
    for _ in range(k):
        xb, yb = batches.next()
        if device is not None and xb.device != device:
            xb, yb = xb.to(device), yb.to(device)
        zero_grad()
        loss = _loss_fn(model(xb), yb)
        loss.backward()
        if clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
        step()
        total += loss.item()
    return total
