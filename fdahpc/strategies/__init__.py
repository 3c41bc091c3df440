"""Strategy registry: each name is a preset pairing a trigger with a rule.

``--sync`` swaps the preset's trigger, so every trigger drives every rule through the
same :class:`~.base.Synchronizer` (one mechanism, no matrix of classes).
"""

from __future__ import annotations

from typing import Callable

import torch

from ..comm import Communicator
from .base import Rule, Synchronizer, Trigger, paper_comm_bytes
from .fda import LinearFDATrigger, SketchFDATrigger
from .schedule import MeanRule, PeriodicTrigger

__all__ = ["STRATEGIES", "STRATEGY_HELP", "TRIGGERS", "RULES", "build_strategy", "Synchronizer", "paper_comm_bytes"]


def periodic_tau(cfg, steps_per_epoch: int) -> int:
    """τ in local steps: ``--tau`` if given, else ``--local-epochs`` worth of steps."""
    if cfg.tau is not None:
        return cfg.tau
    return max(1, round(cfg.local_epochs * steps_per_epoch))


# name -> builder(cfg, comm, dim, steps_per_epoch)
_TRIGGERS: dict[str, Callable[..., Trigger]] = {
    "every": lambda cfg, comm, dim, spe: PeriodicTrigger(1),
    "periodic": lambda cfg, comm, dim, spe: PeriodicTrigger(periodic_tau(cfg, spe)),
    "linear": lambda cfg, comm, dim, spe: LinearFDATrigger(
        comm, dim, cfg.theta, seed=cfg.seed, log_every=cfg.fda_log_every, log_variance=cfg.log_variance),
    "sketch": lambda cfg, comm, dim, spe: SketchFDATrigger(
        comm, dim, cfg.theta, rows=cfg.sketch_rows, cols=cfg.sketch_cols, eps=cfg.sketch_epsilon,
        seed=cfg.seed, log_every=cfg.fda_log_every, log_variance=cfg.log_variance),
}
# name -> builder(cfg, comm, dim)
_RULES: dict[str, Callable[..., Rule]] = {
    "mean": lambda cfg, comm, dim: MeanRule(comm),
}
# name -> (trigger, rule, one-line description)
_PRESETS: dict[str, tuple[str, str, str]] = {
    "synchronous": ("every", "mean", "average the models after every local step"),
    "fedavg": ("periodic", "mean", "Local-SGD: average every --tau steps or --local-epochs"),
    "linearfda": ("linear", "mean", "FDA: average when the linear variance estimate exceeds --theta"),
    "sketchfda": ("sketch", "mean", "FDA: average when the AMS-sketch variance estimate exceeds --theta"),
}


STRATEGIES = tuple(_PRESETS)
TRIGGERS = tuple(_TRIGGERS)
RULES = tuple(_RULES)
STRATEGY_HELP = {name: desc for name, (_, _, desc) in _PRESETS.items()}


def build_strategy(cfg, comm: Communicator, w: torch.Tensor, steps_per_epoch: int) -> Synchronizer:
    """The synchronizer for ``cfg.strategy`` (trigger overridden by ``cfg.sync``)."""
    if cfg.strategy not in _PRESETS:
        raise ValueError(f"--strategy {cfg.strategy!r}: unknown; choose one of {', '.join(STRATEGIES)}")
    trigger_name, rule_name, _ = _PRESETS[cfg.strategy]
    trigger_name = cfg.sync or trigger_name
    if trigger_name not in _TRIGGERS:
        raise ValueError(f"--sync {trigger_name!r}: unknown; choose one of {', '.join(TRIGGERS)}")
    trigger = _TRIGGERS[trigger_name](cfg, comm, w.numel(), steps_per_epoch)
    rule = _RULES[rule_name](cfg, comm, w.numel())
    return Synchronizer(cfg.strategy, comm, w, trigger, rule)
