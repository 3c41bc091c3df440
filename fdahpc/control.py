"""Stopping together: SIGTERM/SIGUSR1 and divergence, agreed by all ranks every few steps.

SLURM sends SIGTERM at the time limit and on preemption, and the signal chosen with
``--signal`` (e.g. ``B:USR1@120``) before it. A handler only notes the signal; the loop
finishes its step and, every ``--stop-check-every`` steps, the ranks allgather one small
row each (stop requested, step at which the rank diverged). So a signal seen by any rank,
or a NaN/Inf on any rank, stops every rank at the same step with no collective added to
the other steps.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import numpy as np

__all__ = ["STOP_SIGNALS", "Diverged", "StopRequest", "Verdict", "agree", "stopped"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Diverged(Exception):
    """A NaN or Inf ended the run; every rank raises it at the same point (exit code 3)."""

    exit_code = 3


class StopRequest:
    """Notes SIGTERM/SIGUSR1 (and which); ``requested`` is checked at the next agreement."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def install(self) -> "StopRequest":
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.signal_name = signal.Signals(signum).name

    @property
    def requested(self) -> bool:
        return self.signal_name is not None


@dataclass(frozen=True)
class Verdict:
    stop: bool
    diverged_rank: int | None = None
    diverged_step: int | None = None


def agree(comm, stop_requested: bool, diverged_step: int | None) -> Verdict:
    """Collective: what every rank does next. The first rank (lowest step, then rank) that
    diverged is named; a stop is requested when any rank saw a signal."""
    mine = np.array([int(stop_requested), -1 if diverged_step is None else diverged_step], dtype=np.int64)
    rows = comm.allgather(mine, "control")
    bad = [(int(step), r) for r, (_, step) in enumerate(rows) if step >= 0]
    if bad:
        step, rank = min(bad)
        return Verdict(True, rank, step)
    return Verdict(bool(rows[:, 0].any()))


def stopped(by: str, unit: str, position: int, folder: str | None, checkpoint_dir: str | None) -> tuple[str, int]:
    """The line a run stopped by a signal logs, and its exit code: 0, or 1 when the
    checkpoint it was asked to write failed (the previous one is still there)."""
    if folder is not None:
        where, code = f"checkpoint {folder}; continue with --resume auto --checkpoint-dir {checkpoint_dir}", 0
    elif checkpoint_dir is not None:
        where, code = "the checkpoint failed (see the warning above); the previous one is kept", 1
    else:
        where, code = "no --checkpoint-dir, so nothing to resume from", 0
    return f"fdahpc.train: stopped by {by} at {unit} {position}: {where}", code
