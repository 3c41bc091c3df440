"""Strategy registry: each name is a preset pairing a trigger with a rule.

``--trigger`` swaps the preset's trigger, so every trigger drives every rule through the
same :class:`~.base.Synchronizer` (one mechanism, no matrix of classes): e.g.
``--strategy fedadam --trigger sketch --theta 1`` is FedAdam driven by SketchFDA.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Callable, NamedTuple

import torch

from ..choices import unknown
from ..comm import Communicator
from ..options import (ANGLE_MODES, WEIGHTINGS, LRScheduleOptions, PeriodicOptions, SamplingOptions, SketchShape,
                       WarmupOptions, option_names, options_from)
from .base import RULES, TRIGGERS, BuildContext, Rule, Synchronizer, Trigger, rule, trigger
from .participation import Participation

# Every module of this package registers its triggers and rules with @trigger/@rule:
# a new one is a new file here, nothing else.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["WEIGHTINGS", "STRATEGIES", "STRATEGY_HELP", "TRIGGERS", "RULES", "ANGLE_MODES", "Preset", "PRESETS", "BuildContext",
           "Trigger", "Rule", "trigger", "rule", "build_strategy", "local_optimizer", "trigger_of", "rule_of",
           "Synchronizer", "StrategyOptions", "strategy_options", "option_names_of"]


class Preset(NamedTuple):
    trigger: str
    rule: str
    help: str
    optimizer: str = "adam"  # local optimizer and learning rate when the flags are not given
    lr: float = 1e-3
    tau: int | None = None  # a periodic round of this many steps when --tau is not given (None: --local-epochs)
    lr_schedule: str = "constant"  # --lr-schedule when not given


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
    # DiLoCo's published setting: inner AdamW, H = 500 inner steps, outer Nesterov (0.7, 0.9).
    "diloco": Preset("periodic", "diloco", "DiLoCo: inner AdamW, outer SGD with Nesterov momentum on the "
                     "pseudo-gradient every --tau steps (default 500)", "adamw", 1e-3, tau=500),
    # QSR (Gu et al., ICLR 2024): rounds of max(H_base, (α/η)²) steps under a decaying learning rate.
    "qsr": Preset("qsr", "mean", "QSR: average after rounds of max(H_base, (alpha/lr)^2) steps, lr falling on a "
                  "cosine (--lr-schedule) from --lr", lr_schedule="cosine"),
}

STRATEGIES = tuple(PRESETS)
STRATEGY_HELP = {name: p.help for name, p in PRESETS.items()}


def local_optimizer(cfg) -> tuple[str, float]:
    """(optimizer, lr): the flags when given, else the strategy's preset."""
    preset = PRESETS[cfg.strategy]
    return cfg.optimizer or preset.optimizer, cfg.lr or preset.lr


def trigger_of(strategy: str, trigger: str | None = None) -> type[Trigger]:
    """The trigger class a strategy runs with (``--trigger`` overriding its preset's)."""
    return TRIGGERS[trigger or PRESETS[strategy].trigger]


def rule_of(strategy: str) -> type[Rule]:
    """The rule class of a strategy's preset."""
    return RULES[PRESETS[strategy].rule]


class StrategyOptions(NamedTuple):
    """A strategy's parts and each one's options, built and checked."""

    trigger: type[Trigger]
    rule: type[Rule]
    trigger_options: object
    rule_options: object
    sampling: SamplingOptions
    sketch: SketchShape
    warmup: WarmupOptions = WarmupOptions()
    lr: LRScheduleOptions = LRScheduleOptions()

    @property
    def uses_sketch(self) -> bool:
        """Whether it hashes AMS sketches (its trigger or its rule says so)."""
        return self.trigger.needs_sketch(self.trigger_options) or self.rule.needs_sketch(self.rule_options)


def option_names_of(strategy: str, trigger: str | None = None) -> set[str]:
    """Every option a strategy reads (its trigger's, its rule's, client sampling, the sketch's shape, the warm-up, the
    learning-rate schedule)."""
    parts = (trigger_of(strategy, trigger).Options, rule_of(strategy).Options, SamplingOptions, SketchShape,
             WarmupOptions, LRScheduleOptions)
    return {name for cls in parts for name in option_names(cls)}


def strategy_options(strategy: str, trigger: str | None, values) -> StrategyOptions:
    """The parts of ``strategy`` (trigger overridden by ``trigger``) and their options from
    ``values`` (a TrainConfig, or a mapping of option names); ``ValueError`` with one line."""
    if strategy not in PRESETS:
        raise unknown("--strategy", strategy, STRATEGIES)
    if trigger is not None and trigger not in TRIGGERS:
        raise unknown("--trigger", trigger, TRIGGERS)
    trigger_cls, rule_cls = trigger_of(strategy, trigger), rule_of(strategy)
    sampling = options_from(SamplingOptions, values)
    if sampling.clients_per_round is not None and not trigger_cls.round_based:
        raise ValueError("--clients-per-round: client sampling needs round-based syncing; drop it or use --trigger periodic")
    trigger_options = options_from(trigger_cls.Options, values)
    preset_tau = PRESETS[strategy].tau
    if preset_tau is not None and type(trigger_options) is PeriodicOptions and trigger_options.tau is None:
        # The preset's round is counted in steps (DiLoCo's H); --local-epochs would be shadowed by it.
        if trigger_options.local_epochs != PeriodicOptions.local_epochs:
            raise ValueError(f"--local-epochs: {strategy}'s round is --tau steps (default {preset_tau}); give --tau "
                             "STEPS instead")
        trigger_options = dataclasses.replace(trigger_options, tau=preset_tau)
    return StrategyOptions(trigger_cls, rule_cls, trigger_options,
                           options_from(rule_cls.Options, values), sampling, options_from(SketchShape, values),
                           options_from(WarmupOptions, values), options_from(LRScheduleOptions, values))


def build_strategy(o: StrategyOptions, comm: Communicator, w: torch.Tensor, steps_per_epoch: int | None,
                   num_samples: int, seed: int = 0, lr_at: Callable[[int], float] | None = None,
                   lr_warmup_steps: int = 0, optimizer: str | None = None) -> Synchronizer:
    """The synchronizer of a strategy's parts and their options (:func:`strategy_options`,
    built and checked once per run). ``lr_at(step)``: the local learning rate of the run's
    step (from 1), for a trigger that reads it (QSR); ``lr_warmup_steps``: its warm-up;
    ``optimizer``: the local optimizer's name."""
    participation = Participation(comm.rank, comm.world_size, o.sampling.clients_per_round, seed)
    shift = o.warmup.warmup_steps  # a trigger counts its steps from the sync warm-up's end
    ctx = BuildContext(comm, w.numel(), steps_per_epoch, num_samples, participation, seed, o.sketch,
                       lr_at=None if lr_at is None else (lambda step: lr_at(step + shift)),
                       lr_warmup_end=lr_warmup_steps - shift, optimizer=optimizer)
    return Synchronizer(comm, w, o.trigger.build(ctx, o.trigger_options), o.rule.build(ctx, o.rule_options), participation,
                        warmup_steps=o.warmup.warmup_steps)
