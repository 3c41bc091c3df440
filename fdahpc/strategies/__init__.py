"""Strategy registry: each name is a preset pairing a trigger with a rule.

``--sync`` swaps the preset's trigger, so every trigger drives every rule through the
same :class:`~.base.Synchronizer` (one mechanism, no matrix of classes): e.g.
``--strategy fedadam --sync sketch --theta 1`` is FedAdam driven by SketchFDA.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import NamedTuple

import torch

from ..comm import Communicator
from .base import RULES, TRIGGERS, BuildContext, Rule, Synchronizer, Trigger, rule, trigger
from .fedadp import ANGLE_MODES
from .participation import Participation

# Every module of this package registers its triggers and rules with @trigger/@rule:
# a new one is a new file here, nothing else.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

#: How the mean weighs the workers' models (``--weighting``).
WEIGHTINGS = ("uniform", "samples")

__all__ = ["WEIGHTINGS", "STRATEGIES", "STRATEGY_HELP", "TRIGGERS", "RULES", "ANGLE_MODES", "Preset", "PRESETS", "BuildContext",
           "Trigger", "Rule", "trigger", "rule", "build_strategy", "local_optimizer", "uses_sketch", "trigger_of", "rule_of",
           "Synchronizer"]


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
STRATEGY_HELP = {name: p.help for name, p in PRESETS.items()}


def local_optimizer(cfg) -> tuple[str, float]:
    """(optimizer, lr): the flags when given, else the strategy's preset."""
    preset = PRESETS[cfg.strategy]
    return cfg.optimizer or preset.optimizer, cfg.lr or preset.lr


def trigger_of(strategy: str, sync: str | None = None) -> type[Trigger]:
    """The trigger class a strategy runs with (``--sync`` overriding its preset's)."""
    return TRIGGERS[sync or PRESETS[strategy].trigger]


def rule_of(strategy: str) -> type[Rule]:
    """The rule class of a strategy's preset."""
    return RULES[PRESETS[strategy].rule]


def uses_sketch(cfg) -> bool:
    """Whether this configuration hashes AMS sketches (its trigger or its rule says so)."""
    return trigger_of(cfg.strategy, cfg.sync).needs_sketch(cfg) or rule_of(cfg.strategy).needs_sketch(cfg)


def build_strategy(cfg, comm: Communicator, w: torch.Tensor, steps_per_epoch: int | None, num_samples: int) -> Synchronizer:
    """The synchronizer for ``cfg.strategy`` (trigger overridden by ``cfg.sync``)."""
    if cfg.strategy not in PRESETS:
        raise ValueError(f"--strategy {cfg.strategy!r}: unknown; choose one of {', '.join(STRATEGIES)}")
    trigger_cls = trigger_of(cfg.strategy, cfg.sync)
    participation = Participation(comm.rank, comm.world_size, cfg.clients_per_round, cfg.seed)
    if participation.sampling and trigger_cls.threshold:
        raise ValueError("--clients-per-round: client sampling needs round-based syncing; drop it or use --sync periodic")
    ctx = BuildContext(cfg, comm, w.numel(), steps_per_epoch, num_samples, participation)
    return Synchronizer(comm, w, trigger_cls.build(ctx), rule_of(cfg.strategy).build(ctx), participation)
