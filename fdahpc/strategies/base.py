"""A strategy = a trigger (when to synchronize) wrapped around a rule (how to combine).

Every rank runs the same :class:`Synchronizer` after each local optimizer step. The
trigger may reduce a small local state (FDA) and returns the same decision on every
rank; the rule then combines the full models (plain mean, a server optimizer, FedAdp
weights) and leaves the new global model in ``w`` on every rank. Any trigger composes
with any rule, so e.g. FedAdam driven by a SketchFDA trigger needs no class of its own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..comm import Communicator
from ..options import NoOptions, SketchShape
from ..registry import registrar
from ..renamed import current_purposes
from .participation import Participation

__all__ = ["BuildContext", "Trigger", "Rule", "TRIGGERS", "RULES", "trigger", "rule", "Synchronizer"]


@dataclass
class BuildContext:
    """What a trigger or rule may need to build itself beside its own options, the same for
    every kind."""

    comm: Communicator
    dim: int
    steps_per_epoch: int | None  # None in a user's own loop that did not give it
    num_samples: int  # this rank's training samples
    participation: Participation
    seed: int = 0  # the run's seed (hashes, random directions)
    sketch_shape: SketchShape = SketchShape()
    #: The learning rate of a step as the trigger counts them (after the sync warm-up), and the
    #: trigger's step at which the learning-rate warm-up ends; None: the loop did not say.
    lr_at: Callable[[int], float] | None = None
    lr_warmup_end: int = 0
    optimizer: str | None = None  # the local optimizer's name (adam, sgd, ...), when known

    def samples_if(self, weighting: str) -> int | None:
        """This rank's sample count when the mean is sample-weighted (``--weighting samples``)."""
        return self.num_samples if weighting == "samples" else None

    @functools.cached_property
    def sketch(self):
        """The run's one AMS sketcher, built on first use: the SketchFDA trigger and
        sketched FedAdp angles hash with the same table (2·l·d bytes), held once."""
        from ..sketch import AmsSketch

        s = self.sketch_shape
        shape = {k: v for k, v in (("rows", s.sketch_rows), ("cols", s.sketch_cols)) if v is not None}
        return AmsSketch(self.dim, seed=self.seed, **shape)


class _Part:
    """What triggers and rules share: the registry name, building from a context, the
    record path, and checkpoint state (the attributes named in ``_state``)."""

    name = ""  # set by @trigger / @rule
    #: Its options: a frozen dataclass of :mod:`fdahpc.options` (fields named like the flags,
    #: with defaults and checks); the part is built with an instance of it.
    Options: type = NoOptions
    #: Whether the part reads the last synchronized model ``w_t0``.
    needs_anchor = False
    #: Attributes saved in checkpoints; tensors are restored in place.
    _state: tuple[str, ...] = ()

    @classmethod
    def needs_sketch(cls, options) -> bool:
        """Whether this part, with these options, hashes AMS sketches."""
        return False

    @classmethod
    def build(cls, ctx: BuildContext, options):
        raise NotImplementedError

    def record(self, group: str, **values: Any) -> None:
        """Series for the run file (``group/step`` plus ``group/NAME``); the
        :class:`Synchronizer` connects it, unconnected it discards."""

    def state_dict(self) -> dict[str, Any]:
        state = {n: getattr(self, n) for n in self._state}
        return {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in state.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for n in self._state:
            current = getattr(self, n)
            if isinstance(current, torch.Tensor):
                current.copy_(state[n])
            else:
                setattr(self, n, state[n])


def drift_sq(old_anchor: torch.Tensor, new_anchor: torch.Tensor) -> float:
    """||w_new - w_t0||^2, the squared drift of the mean when the new model is the plain mean."""
    d = new_anchor - old_anchor
    return float(torch.dot(d, d))


class Trigger(_Part):
    """When to synchronize. The defaults describe a trigger without state or traffic;
    a subclass overrides what it has."""

    #: Bytes of the local state each rank reduces every step (0 for fixed schedules).
    state_bytes = 0
    #: Decides by comparing an estimate with Θ (FDA): Θ is what a sweep varies, the
    #: estimate is what a plot draws, and Θ names the run in a label.
    theta_driven = False
    #: Rounds end on a schedule that reads nothing the workers computed (a fixed τ), so
    #: client sampling applies: a worker left out of a round has no drift or loss to
    #: report. A trigger that reads the workers' models or losses sets it False and then
    #: ``--clients-per-round`` is refused.
    round_based = True
    #: Whether :meth:`should_sync` reads the step's training loss (then a loop that gives
    #: none is refused: ``ModelAverager.step(loss=...)``).
    needs_loss = False
    #: Whether it reads the learning rate (:attr:`BuildContext.lr_at`); the synchronous mode
    #: then refuses a schedule that never changes it.
    reads_lr = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "threshold" in vars(cls):  # the one attribute this used to be: say which of the two is meant
            raise TypeError(f"{cls.__name__}.threshold: split into theta_driven (Θ is what a sweep varies) and "
                            "round_based (client sampling applies); set those instead")

    def should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor | None, loss: float | None = None) -> bool:
        """Collective when ``state_bytes > 0``; must return the same value on every rank.
        ``loss``: this rank's training loss of the step (None on a rank that client sampling
        left out, or in a loop that does not give it; never None when :attr:`needs_loss`)."""
        raise NotImplementedError

    def on_sync(self, old_anchor: torch.Tensor | None, new_anchor: torch.Tensor) -> None:
        pass

    def mean_drift_sq(self, old_anchor: torch.Tensor, new_anchor: torch.Tensor) -> float:
        """``||mean_k w_k - w_t0||^2`` of the synchronization just done: the :class:`Synchronizer`
        connects its rule's :meth:`Rule.mean_drift_sq`; unconnected, the new model is the mean."""
        return drift_sq(old_anchor, new_anchor)

    def finish(self) -> None:
        """Complete any collective still in flight (the run ends or is saved)."""


class Rule(_Part):
    """How to combine the models at a synchronization."""

    def aggregate(self, w: torch.Tensor, anchor: torch.Tensor | None) -> None:
        """Collective: replace ``w`` by the new global model on every rank; ``anchor`` is read-only."""
        raise NotImplementedError

    def mean_drift_sq(self, old_anchor: torch.Tensor, new_anchor: torch.Tensor) -> float:
        """``||mean_k w_k - w_t0||^2`` of the last :meth:`aggregate` (an FDA trigger's exact
        variance needs it). Here the new model is taken for the mean; a rule that steps away
        from the mean (a server optimizer) keeps the value its AllReduce gave."""
        return drift_sq(old_anchor, new_anchor)


#: name -> class; filled by the decorators below, next to each class.
TRIGGERS: dict[str, type[Trigger]] = {}
RULES: dict[str, type[Rule]] = {}


#: ``@trigger("name")`` above a :class:`Trigger` subclass makes it ``--trigger name``.
trigger = registrar(TRIGGERS, Trigger, "trigger")
#: ``@rule("name")`` above a :class:`Rule` subclass registers it for presets.
rule = registrar(RULES, Rule, "rule")


class Synchronizer:
    """Runs a trigger and a rule over a flat parameter buffer ``w``.

    ``warmup_steps`` W (post-local SGD, :class:`fdahpc.options.WarmupOptions`): steps 1..W
    synchronize without asking the trigger; from step W+1 the trigger decides and sees the
    step counted from the warm-up's end (``steps - W``), so its rounds start there.

    :meth:`held_model` is the model a user holds at any step: what the rule would hand back
    from a synchronization forced there (the evaluations score it, and :meth:`settle` makes
    it the run's final model).
    """

    def __init__(self, comm: Communicator, w: torch.Tensor, trigger: Trigger, rule: Rule,
                 participation: Participation | None = None, warmup_steps: int = 0) -> None:
        self.comm = comm
        self.w = w
        self.trigger = trigger
        self.rule = rule
        self.participation = participation or Participation(comm.rank, comm.world_size, None, 0)
        #: Where records go: ``sink(name, value)``, e.g. the run file's append; None drops them.
        self.sink: Callable[[str, Any], None] | None = None
        trigger.record = rule.record = self.record
        trigger.mean_drift_sq = rule.mean_drift_sq
        self.anchor = w.detach().clone() if (trigger.needs_anchor or rule.needs_anchor) else None
        self.warmup_steps = warmup_steps
        self.steps = 0
        self.syncs = 0
        self.synced_at = 0  # the step of the last synchronization (0: the common initial model)
        self.held_bytes = 0  # what the last held_model's forced synchronization cost (eval traffic)
        self._bytes_at_reset = self._training_bytes()

    def _training_bytes(self) -> dict[str, int]:
        return {p: self.comm.bytes_sent[p] for p in ("model", "monitor")}

    def reset(self) -> None:
        """Take the current (common) ``w`` as ``w_t0``: call once every rank holds the same
        initial model. Traffic is counted from here."""
        if self.anchor is not None:
            self.anchor.copy_(self.w)
        self.synced_at = self.steps
        self._bytes_at_reset = self._training_bytes()

    def record(self, group: str, **values: Any) -> None:
        """The one path from a strategy to the run file: ``group/step`` (the current step)
        and ``group/NAME`` for each value, e.g. ``record("fda", h=0.3)``."""
        if self.sink is None:
            return
        self.sink(f"{group}/step", self.steps)
        for name, value in values.items():
            self.sink(f"{group}/{name}", value)

    @property
    def participating(self) -> bool:
        """Whether this rank trains in the current round (always, without client sampling)."""
        return self.participation.active

    def after_step(self, loss: float | None = None) -> bool:
        """Call once after every local step (taken or skipped), with the step's training
        loss when there is one; True when the models were combined."""
        if loss is None and self.trigger.needs_loss and self.participating:
            raise ValueError(f"loss: the {self.trigger.name} trigger reads the training loss; pass each step's, "
                             "e.g. step(loss=loss.item())")
        self.steps += 1
        if self.steps > self.warmup_steps and not self.trigger.should_sync(
                self.steps - self.warmup_steps, self.w, self.anchor, None if loss is None else float(loss)):
            return False
        self.sync()
        return True

    def sync(self) -> None:
        self.rule.aggregate(self.w, self.anchor)
        self.record("sync")
        self.trigger.on_sync(self.anchor, self.w)
        if self.anchor is not None:
            self.anchor.copy_(self.w)
        self.syncs += 1
        self.synced_at = self.steps
        self.participation.next_round()

    @property
    def in_sync(self) -> bool:
        """Whether every rank holds the global model: no local step since the last synchronization."""
        return self.synced_at == self.steps

    def held_model(self, out: torch.Tensor) -> torch.Tensor:
        """Collective: write into ``out`` the model this run hands back if it stops now.

        That is the rule applied to a synchronization forced at this step: the mean for the
        mean rules, the server or outer step for FedAvgM, FedAdam and DiLoCo, FedAdp's
        weights; just after a synchronization, the global model itself (no traffic). It is
        computed on ``out`` with the rule's state saved and restored, its traffic counted as
        ``eval`` and its records dropped, so training goes on bit for bit as without it.
        :attr:`held_bytes`: what that forced synchronization would have cost as training
        traffic (:meth:`comm_bytes`' convention; 0 just after a synchronization), which a
        time to accuracy charges when the target is met between synchronizations.
        """
        out.copy_(self.w)
        self.held_bytes = 0
        if self.in_sync:
            return out
        saved, sink, before = self.rule.state_dict(), self.sink, self.comm.bytes_sent["eval"]
        self.sink = None
        try:
            with self.comm.counting_as("eval"):
                self.rule.aggregate(out, self.anchor)
        finally:
            self.sink = sink
            self.rule.load_state_dict(saved)
        self.held_bytes = self.comm.world_size * 2 * (self.comm.bytes_sent["eval"] - before)
        return out

    def settle(self) -> bool:
        """Collective: end the run on the model :meth:`held_model` scored, by synchronizing
        once more when a local step came after the last synchronization (training traffic like
        any other); True when it did. Call after :meth:`finish`, once, when training is over."""
        if self.in_sync:
            return False
        self.sync()
        return True

    def finish(self) -> None:
        """Complete what the trigger still has in flight; collective. Call once the loop ends."""
        self.trigger.finish()

    def comm_bytes(self) -> int:
        """The job's training traffic since :meth:`reset`, measured, in the FDA paper's
        convention: what is reduced or gathered at a synchronization counts up and down,
        the per-step monitoring state up only.

        Measured on this rank (its communicator counts every byte it hands to a
        collective) and multiplied by K: every rank issues the same collectives with the
        same sizes, client sampling included (a rank left out still takes part in the
        AllReduce). ``tests/test_reference.py`` checks the total against the paper's formula
        for every preset and the per-rank counts against each other.
        """
        now = self._training_bytes()
        sent = {p: now[p] - self._bytes_at_reset[p] for p in now}
        return self.comm.world_size * (2 * sent["model"] + sent["monitor"])

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "syncs": self.syncs,
            "synced_at": self.synced_at,
            "anchor": None if self.anchor is None else self.anchor.clone(),
            "trigger": self.trigger.state_dict(),
            "rule": self.rule.state_dict(),
            "participation": self.participation.state_dict(),
            "bytes_at_reset": dict(self._bytes_at_reset),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.syncs = state["steps"], state["syncs"]
        # Checkpoints written before it was kept: unknown, so the next held model is computed.
        self.synced_at = state.get("synced_at", -1)
        if self.anchor is not None:
            self.anchor.copy_(state["anchor"])
        self.trigger.load_state_dict(state["trigger"])
        self.rule.load_state_dict(state["rule"])
        self.participation.load_state_dict(state["participation"])
        # Checkpoints written before the count was measured lack it: count from the resume
        # (and older ones name the model bytes "sync").
        self._bytes_at_reset = current_purposes(state.get("bytes_at_reset", self._training_bytes()))
