"""FDA (or any fdahpc strategy) inside your own PyTorch training loop.

    comm = make_communicator()                      # MPI under mpirun, torch.distributed under torchrun
    avg = ModelAverager(model, comm, "linearfda", theta=0.5)
    for x, y in batches:
        ...; optimizer.step()
        if avg.step(loss=loss.item()):              # after every optimizer step (the loss: optional)
            ...                                     # the models were just combined

The averager moves the model's trainable parameters into one flat buffer (the same
``nn.Parameter`` objects, new storage), broadcasts rank 0's initial model to every rank,
and builds the strategy exactly as ``python -m fdahpc.train`` does: the options are the
strategy's own (:mod:`fdahpc.options`; ``theta``, ``tau``, ``server_lr``,
``clients_per_round``, ...), named and checked as on the command line, with the same
defaults.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from .choices import unknown
from .comm import make_communicator
from .params import FlatParams
from .renamed import take_old
from .options import LRScheduleOptions, option_names, refuse_together
from .strategies import PRESETS, build_strategy, option_names_of, strategy_options

__all__ = ["ModelAverager"]


def _family(optimizer) -> str | None:
    """``sgd`` for torch's SGD, ``adam`` for the Adam family, else None (QSR's constants)."""
    if isinstance(optimizer, torch.optim.SGD):
        return "sgd"
    return "adam" if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)) else None


class ModelAverager:
    """One strategy over ``model`` on every rank of ``comm``.

    ``steps_per_epoch`` turns ``local_epochs`` into a round length for the periodic
    strategies (give ``tau`` instead, in steps, or both are refused); ``num_samples`` is
    this rank's sample count, used by FedAdp's weights. Build it before the first
    optimizer step.

    ``optimizer``: your local optimizer, when the averager is to set or read its learning
    rate. With ``lr_schedule`` (``"cosine"``, ``"linear"``, ``"constant"``; ``lr_warmup_steps``,
    ``lr_floor`` as on the command line) and ``total_steps``, the averager sets each
    parameter group to its current rate (taken as the peak) times the schedule's factor,
    before the first step and after each :meth:`step`; leave ``lr_schedule`` out to keep
    your own torch scheduler, whose rate ``trigger="qsr"`` then reads when a round starts.
    """

    def __init__(self, model: nn.Module, comm=None, strategy: str = "sketchfda", *, steps_per_epoch: int | None = None,
                 num_samples: int = 1, seed: int = 0, optimizer: torch.optim.Optimizer | None = None,
                 total_steps: int | None = None, **options: Any) -> None:
        if strategy not in PRESETS:
            raise unknown("strategy", strategy, PRESETS)
        for line in take_old(options, "ModelAverager", "keyword"):  # sync= is trigger='s old name
            warnings.warn(line, DeprecationWarning, stacklevel=2)
        trigger = options.pop("trigger", None)
        known = option_names_of(strategy, trigger)
        strange = sorted(set(options) - known)
        if strange:
            raise unknown("option", strange[0], sorted(known | {"trigger"}), scope=f" for {strategy}")
        refuse_together(options)
        parts = strategy_options(strategy, trigger, options)  # checked before anything is built
        self.optimizer = optimizer
        self.schedule, self.peaks = None, ()
        lr_at = None
        if any(name in options for name in option_names(LRScheduleOptions)):
            if optimizer is None or total_steps is None:
                raise ValueError("lr_schedule: the averager sets the learning rate of your optimizer over the run; "
                                 "pass optimizer= and total_steps= (or keep your own torch scheduler and drop "
                                 "lr_schedule)")
            self.schedule = parts.lr.schedule(total_steps)
            self.peaks = tuple(group["lr"] for group in optimizer.param_groups)
            self.schedule.apply(optimizer, self.peaks, 0)
            lr_at = lambda step: self.schedule.rate_at(self.peaks[0], step)  # noqa: E731
        elif optimizer is not None:  # your own scheduler sets it: read when a round starts
            lr_at = lambda step: optimizer.param_groups[0]["lr"]  # noqa: E731
        if parts.trigger.reads_lr and lr_at is None:
            raise ValueError(f"trigger {parts.trigger.name!r}: reads the learning rate; pass optimizer= (and "
                             "lr_schedule= with total_steps=, or keep your own torch scheduler)")
        self.comm = comm if comm is not None else make_communicator()
        self.flat = FlatParams(model)
        self.strategy = build_strategy(parts, self.comm, self.flat.w, steps_per_epoch, num_samples, seed, lr_at=lr_at,
                                       lr_warmup_steps=parts.lr.lr_warmup_steps, optimizer=_family(optimizer))
        self.comm.bcast_(self.flat.w, "control")  # one initial model everywhere
        self.strategy.reset()

    def step(self, loss: float | None = None) -> bool:
        """Collective; call on every rank after each ``optimizer.step()`` (also after a
        skipped one, see :attr:`participating`). ``loss``: the step's training loss (a
        number or a 1-element tensor), which the trigger sees; needed by a trigger that
        reads it (``needs_loss``), ignored by the others. True when the models were combined."""
        synced = self.strategy.after_step(loss)
        if self.schedule is not None:  # the rate of the next step
            self.schedule.apply(self.optimizer, self.peaks, self.strategy.steps)
        return synced

    def finish(self, settle: bool = True) -> bool:
        """Collective; call once after the last :meth:`step`: completes what is still in
        flight (with ``fda_lag=1``, the last state's AllReduce) and, with ``settle``, leaves
        on every rank the model the strategy hands back (:meth:`held_model`) by synchronizing
        once more when a step came after the last synchronization. True when it did."""
        self.strategy.finish()
        return settle and self.strategy.settle()

    def held_model(self) -> torch.Tensor:
        """Collective: the model the strategy would hand back if training stopped now (its
        rule applied to a synchronization forced at this step: the mean, a server or outer
        step, FedAdp's weights) as a new flat vector of the trainable parameters, without
        changing the training; load it into a replica with
        ``torch.nn.utils.vector_to_parameters``. Its traffic counts as ``eval``."""
        return self.strategy.held_model(torch.empty_like(self.flat.w))

    @property
    def participating(self) -> bool:
        """False on a rank that client sampling leaves out of this round: skip training
        (but still call :meth:`step`)."""
        return self.strategy.participating

    @property
    def steps(self) -> int:
        return self.strategy.steps

    @property
    def syncs(self) -> int:
        """How many times the models were combined."""
        return self.strategy.syncs

    @property
    def comm_bytes(self) -> int:
        """Training traffic of all ranks so far, counted as the FDA paper does (models up
        and down, monitoring state up); what this rank itself sent is ``comm.bytes_sent``."""
        return self.strategy.comm_bytes()

    def state_dict(self) -> dict[str, Any]:
        """The strategy's state (anchor, FDA state, server optimizer ...) for your checkpoint."""
        return self.strategy.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (with ``lr_schedule``, the optimizer's rate follows the step count)."""
        self.strategy.load_state_dict(state)
        if self.schedule is not None:
            self.schedule.apply(self.optimizer, self.peaks, self.strategy.steps)
