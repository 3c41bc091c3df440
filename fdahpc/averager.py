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

from torch import nn

from .comm import make_communicator
from .params import FlatParams
from .renamed import take_old
from .strategies import PRESETS, build_strategy, option_names_of, strategy_options

__all__ = ["ModelAverager"]


class ModelAverager:
    """One strategy over ``model`` on every rank of ``comm``.

    ``steps_per_epoch`` turns ``local_epochs`` into a round length for the periodic
    strategies (give ``tau`` instead, in steps, or both are refused); ``num_samples`` is
    this rank's sample count, used by FedAdp's weights. Build it before the first
    optimizer step.
    """

    def __init__(self, model: nn.Module, comm=None, strategy: str = "sketchfda", *, steps_per_epoch: int | None = None,
                 num_samples: int = 1, seed: int = 0, **options: Any) -> None:
        if strategy not in PRESETS:
            raise ValueError(f"strategy {strategy!r}: unknown; choose one of {', '.join(PRESETS)}")
        for line in take_old(options, "ModelAverager", "keyword"):  # sync= is trigger='s old name
            warnings.warn(line, DeprecationWarning, stacklevel=2)
        trigger = options.pop("trigger", None)
        known = option_names_of(strategy, trigger)
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"option {unknown[0]!r}: unknown for {strategy}; it takes {', '.join(sorted(known | {'trigger'}))}")
        parts = strategy_options(strategy, trigger, options)  # checked before anything is built
        self.comm = comm if comm is not None else make_communicator()
        self.flat = FlatParams(model)
        self.strategy = build_strategy(parts, self.comm, self.flat.w, steps_per_epoch, num_samples, seed)
        self.comm.bcast_(self.flat.w, "control")  # one initial model everywhere
        self.strategy.reset()

    def step(self, loss: float | None = None) -> bool:
        """Collective; call on every rank after each ``optimizer.step()`` (also after a
        skipped one, see :attr:`participating`). ``loss``: the step's training loss (a
        number or a 1-element tensor), which the trigger sees; needed by a trigger that
        reads it (``needs_loss``), ignored by the others. True when the models were combined."""
        return self.strategy.after_step(loss)

    def finish(self) -> None:
        """Collective; call once after the last :meth:`step`: completes what is still in
        flight (with ``fda_lag=1``, the last state's AllReduce)."""
        self.strategy.finish()

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
        self.strategy.load_state_dict(state)
