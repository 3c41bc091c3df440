"""A strategy = a trigger (when to synchronize) wrapped around a rule (how to combine).

Every rank runs the same :class:`Synchronizer` after each local optimizer step. The
trigger may reduce a small local state (FDA) and returns the same decision on every
rank; the rule then combines the full models (plain mean, a server optimizer, FedAdp
weights) and leaves the new global model in ``w`` on every rank. Any trigger composes
with any rule, so e.g. FedAdam driven by a SketchFDA trigger needs no class of its own.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from ..comm import Communicator

__all__ = ["Trigger", "Rule", "Synchronizer", "paper_comm_bytes"]


class Trigger(Protocol):
    #: Bytes of the local state each rank reduces every step (0 for fixed schedules).
    state_bytes: int
    #: Whether the trigger reads the last synchronized model ``w_t0``.
    needs_anchor: bool

    def should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor | None) -> bool:
        """Collective when ``state_bytes > 0``; must return the same value on every rank."""

    def on_sync(self, old_anchor: torch.Tensor | None, new_anchor: torch.Tensor) -> None: ...

    def records(self) -> list[tuple[str, float]]:
        """(dataset name, value) pairs for the run file after the latest step."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Rule(Protocol):
    #: Full-model AllReduces one synchronization costs (FedAdp needs two).
    model_reductions: int
    needs_anchor: bool

    def aggregate(self, w: torch.Tensor, anchor: torch.Tensor | None) -> None:
        """Collective: replace ``w`` by the new global model on every rank; ``anchor`` is read-only."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def paper_comm_bytes(*, syncs: int, steps: int, dim: int, workers: int, state_bytes: int, model_reductions: int = 1) -> int:
    """Training traffic as the FDA paper counts it (ALGORITHMS.md §1).

    Every sync moves each worker's float32 model up and down (``4·d·K·2`` bytes per
    full-model reduction); every step each worker uploads its monitoring state.
    """
    return syncs * model_reductions * 4 * dim * workers * 2 + state_bytes * steps * workers


class Synchronizer:
    """Runs a trigger and a rule over a flat parameter buffer ``w``."""

    def __init__(self, name: str, comm: Communicator, w: torch.Tensor, trigger: Trigger, rule: Rule) -> None:
        self.name = name
        self.comm = comm
        self.w = w
        self.trigger = trigger
        self.rule = rule
        self.anchor = w.detach().clone() if (trigger.needs_anchor or rule.needs_anchor) else None
        self.steps = 0
        self.syncs = 0

    def reset(self) -> None:
        """Take the current (common) ``w`` as ``w_t0``: call once every rank holds the same initial model."""
        if self.anchor is not None:
            self.anchor.copy_(self.w)

    def records(self) -> list[tuple[str, float]]:
        return self.trigger.records()

    def after_step(self) -> bool:
        """Call once after every local optimizer step; returns True when the models were combined."""
        self.steps += 1
        if not self.trigger.should_sync(self.steps, self.w, self.anchor):
            return False
        self.sync()
        return True

    def sync(self) -> None:
        self.rule.aggregate(self.w, self.anchor)
        self.trigger.on_sync(self.anchor, self.w)
        if self.anchor is not None:
            self.anchor.copy_(self.w)
        self.syncs += 1

    def comm_bytes(self) -> int:
        return paper_comm_bytes(
            syncs=self.syncs,
            steps=self.steps,
            dim=self.w.numel(),
            workers=self.comm.world_size,
            state_bytes=self.trigger.state_bytes,
            model_reductions=self.rule.model_reductions,
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "syncs": self.syncs,
            "anchor": None if self.anchor is None else self.anchor.clone(),
            "trigger": self.trigger.state_dict(),
            "rule": self.rule.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.syncs = state["steps"], state["syncs"]
        if self.anchor is not None:
            self.anchor.copy_(state["anchor"])
        self.trigger.load_state_dict(state["trigger"])
        self.rule.load_state_dict(state["rule"])
