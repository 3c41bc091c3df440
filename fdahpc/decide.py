"""The end-of-step (and end-of-round) decisions of the modes' loops, as pure functions.

A loop trains, then asks what this position is due: agree on signals and divergence,
evaluate, write a checkpoint, stop at a target. The answers depend only on the position and
the schedule options, so they are decided here and tested without training
(``tests/test_decide.py``); the loops act on them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["reached", "StepPlan", "step_plan", "RoundPlan", "round_plan"]


def reached(target_accuracy: float | None, target_loss: float | None, accuracy: float, loss: float) -> bool:
    """Whether an evaluation meets the run's targets: ``--target-accuracy`` (accuracy >= it)
    and ``--target-loss`` (mean test cross-entropy <= it); with both given, both must hold.
    False when neither is given."""
    goals = [accuracy >= target_accuracy] if target_accuracy is not None else []
    goals += [loss <= target_loss] if target_loss is not None else []
    return bool(goals) and all(goals)


@dataclass(frozen=True)
class StepPlan:
    """What one synchronous step is due, in the loop's order: ``check`` (the ranks agree on
    signals and divergence; a stop ends the loop before the rest), ``evaluate`` (scheduled),
    ``checkpoint`` (scheduled, or the run's last step), ``evaluate_last`` (the run's end,
    scored after its checkpoint so that a longer resumed run does not score it again)."""

    check: bool
    evaluate: bool
    checkpoint: bool
    evaluate_last: bool


def step_plan(step: int, *, total: int, steps_per_epoch: int, eval_every: int | None, check_every: int,
              checkpoint_every: int | None, checkpointing: bool) -> StepPlan:
    """The synchronous mode's decisions at ``step`` (1-based) of ``total``: evaluations at
    every epoch end and every ``eval_every`` steps, agreement every ``check_every`` steps,
    checkpoints every ``checkpoint_every`` steps and (with a checkpoint folder) at the end.
    A target reached after an evaluation ends the run with a checkpoint when ``checkpointing``
    and none was written this step (the loop's, as it needs the score)."""
    last = step == total
    scheduled = step % steps_per_epoch == 0 or bool(eval_every and step % eval_every == 0)
    return StepPlan(check=step % check_every == 0 or last, evaluate=scheduled,
                    checkpoint=bool((checkpoint_every and step % checkpoint_every == 0) or (last and checkpointing)),
                    evaluate_last=last and not scheduled)


@dataclass(frozen=True)
class RoundPlan:
    """What one aggregation round is due: ``evaluate`` (the server scores the new model),
    and ``checkpoint`` (scheduled or the last round), to which a target reached or a stop
    signal adds one before the loop ends."""

    evaluate: bool
    checkpoint: bool


def round_plan(version: int, *, rounds: int, eval_every: int, checkpoint_every: int | None,
               checkpointing: bool) -> RoundPlan:
    """The semi-asynchronous server's decisions after aggregation ``version`` of ``rounds``."""
    last = version == rounds
    return RoundPlan(evaluate=version % eval_every == 0 or last,
                     checkpoint=checkpointing and bool((checkpoint_every and version % checkpoint_every == 0) or last))
