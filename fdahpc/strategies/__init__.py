"""Strategy registry: each name is a preset pairing a trigger with a rule.

``--sync`` swaps the preset's trigger, so every trigger drives every rule through the
same :class:`~.base.Synchronizer` (one mechanism, no matrix of classes): e.g.
``--strategy fedadam --sync sketch --theta 1`` is FedAdam driven by SketchFDA.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import torch

from ..aggregate import FedAdam, FedAvgM
from ..comm import Communicator
from .base import Rule, Synchronizer, Trigger, paper_comm_bytes
from .fda import LinearFDATrigger, SketchFDATrigger
from .fedadp import ANGLE_MODES, FedAdpRule
from .fedopt import ServerOptRule
from .participation import Participation
from .schedule import MeanRule, PeriodicTrigger

__all__ = ["STRATEGIES", "STRATEGY_HELP", "TRIGGERS", "RULES", "ANGLE_MODES", "Preset", "PRESETS",
           "build_strategy", "local_optimizer", "uses_sketch", "Synchronizer", "paper_comm_bytes"]


def periodic_tau(cfg, steps_per_epoch: int) -> int:
    """τ in local steps: ``--tau`` if given, else ``--local-epochs`` worth of steps."""
    if cfg.tau is not None:
        return cfg.tau
    return max(1, round(cfg.local_epochs * steps_per_epoch))


def _shared_sketch(cfg, dim: int) -> Callable[[], object]:
    """The run's one AMS sketcher, built on first call: the SketchFDA trigger and sketched
    FedAdp angles hash with the same table (2·l·d bytes), so one run holds it once."""

    @functools.cache
    def sketch():
        from ..sketch import AmsSketch

        return AmsSketch(dim, rows=cfg.sketch_rows, cols=cfg.sketch_cols, seed=cfg.seed)

    return sketch


# name -> builder(cfg, comm, dim, steps_per_epoch, sketch)
_TRIGGERS: dict[str, Callable[..., Trigger]] = {
    "every": lambda cfg, comm, dim, spe, sketch: PeriodicTrigger(1),
    "periodic": lambda cfg, comm, dim, spe, sketch: PeriodicTrigger(periodic_tau(cfg, spe)),
    "linear": lambda cfg, comm, dim, spe, sketch: LinearFDATrigger(
        comm, dim, cfg.theta, seed=cfg.seed, log_every=cfg.fda_log_every, log_variance=cfg.log_variance),
    "sketch": lambda cfg, comm, dim, spe, sketch: SketchFDATrigger(
        comm, dim, cfg.theta, sketcher=sketch(), eps=cfg.sketch_epsilon,
        log_every=cfg.fda_log_every, log_variance=cfg.log_variance),
}
# name -> builder(cfg, comm, dim, participation, num_samples, sketch)
_RULES: dict[str, Callable[..., Rule]] = {
    "mean": lambda cfg, comm, dim, part, n, sketch: MeanRule(comm, part),
    "fedavgm": lambda cfg, comm, dim, part, n, sketch: ServerOptRule(
        comm, part, FedAvgM(dim, eta_s=cfg.server_lr or 0.316, beta=cfg.server_momentum)),
    "fedadam": lambda cfg, comm, dim, part, n, sketch: ServerOptRule(
        comm, part, FedAdam(dim, eta_s=cfg.server_lr or 1e-3, beta_1=cfg.server_beta_pair[0],
                            beta_2=cfg.server_beta_pair[1], tau=cfg.server_tau)),
    "fedadp": lambda cfg, comm, dim, part, n, sketch: FedAdpRule(
        comm, part, n, alpha=cfg.fedadp_alpha, angles=cfg.fedadp_angles,
        sketch=sketch() if cfg.fedadp_angles == "sketch" else None),
}


class Preset(NamedTuple):
    trigger: str
    rule: str
    help: str
    optimizer: str = "adam"  # local optimizer and learning rate when the flags are not given
    lr: float = 1e-3


# The FDA paper's settings: Adam 1e-3 for LeNet-5 workers; SGD clients for FedOpt
# (0.0316 under FedAvgM, 0.01 under FedAdam).
PRESETS: dict[str, Preset] = {
    "synchronous": Preset("every", "mean", "average the models after every local step"),
    "fedavg": Preset("periodic", "mean", "Local-SGD: average every --tau steps or --local-epochs"),
    "linearfda": Preset("linear", "mean", "FDA: average when the linear variance estimate exceeds --theta"),
    "sketchfda": Preset("sketch", "mean", "FDA: average when the AMS-sketch variance estimate exceeds --theta"),
    "fedavgm": Preset("periodic", "fedavgm", "server momentum on the pseudo-gradient each round", "sgd", 0.0316),
    "fedadam": Preset("periodic", "fedadam", "server Adam on the pseudo-gradient each round", "sgd", 0.01),
    "fedadp": Preset("periodic", "fedadp", "FedAdp: angle-based adaptive weights each round", "sgd", 0.01),
}

STRATEGIES = tuple(PRESETS)
TRIGGERS = tuple(_TRIGGERS)
RULES = tuple(_RULES)
STRATEGY_HELP = {name: p.help for name, p in PRESETS.items()}


def local_optimizer(cfg) -> tuple[str, float]:
    """(optimizer, lr): the flags when given, else the strategy's preset."""
    preset = PRESETS[cfg.strategy]
    return cfg.optimizer or preset.optimizer, cfg.lr or preset.lr


def uses_sketch(cfg) -> bool:
    """Whether this configuration computes AMS sketches (SketchFDA trigger or sketched FedAdp angles)."""
    preset = PRESETS[cfg.strategy]
    return (cfg.sync or preset.trigger) == "sketch" or (preset.rule == "fedadp" and cfg.fedadp_angles == "sketch")


def build_strategy(cfg, comm: Communicator, w: torch.Tensor, steps_per_epoch: int, num_samples: int) -> Synchronizer:
    """The synchronizer for ``cfg.strategy`` (trigger overridden by ``cfg.sync``)."""
    if cfg.strategy not in PRESETS:
        raise ValueError(f"--strategy {cfg.strategy!r}: unknown; choose one of {', '.join(STRATEGIES)}")
    preset = PRESETS[cfg.strategy]
    trigger_name = cfg.sync or preset.trigger
    participation = Participation(comm.rank, comm.world_size, cfg.clients_per_round, cfg.seed)
    if participation.sampling and trigger_name in ("linear", "sketch"):
        raise ValueError("--clients-per-round: client sampling needs round-based syncing; drop it or use --sync periodic")
    sketch = _shared_sketch(cfg, w.numel())
    trigger = _TRIGGERS[trigger_name](cfg, comm, w.numel(), steps_per_epoch, sketch)
    rule = _RULES[preset.rule](cfg, comm, w.numel(), participation, num_samples, sketch)
    return Synchronizer(cfg.strategy, comm, w, trigger, rule, participation)
