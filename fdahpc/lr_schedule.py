"""Learning-rate schedules as language-model recipes write them: a linear warm-up, then a
constant, cosine or linear course from the peak down to a floor.

With peak η (``--lr``), warm-up W (``--lr-warmup-steps``), floor f (``--lr-floor``, a
fraction of the peak) and horizon T (the run's steps), the step numbered s (0-based: the
run's step s+1) trains at η·factor(s)::

    s < W:       (s + 1) / W                                  (reaches the peak at step W)
    s >= W:      p = (s − W) / (T − W)                         (0 at the warm-up's end)
      constant:  1
      cosine:    f + (1 − f) · (1 + cos(π p)) / 2
      linear:    f + (1 − f) · (1 − p)

the factors of torch's ``LinearLR(start_factor=1/W, total_iters=W−1)`` for the warm-up and of
``CosineAnnealingLR(T_max=T−W, eta_min=f·η)`` / ``LinearLR(1, f, T−W)`` after it
(``tests/test_lr_schedule.py`` checks them step by step). A schedule is a pure function of
the step: a resumed run picks it up from its step counter, and the horizon is part of the
checkpoint's identity.

Named apart from ``--warmup-steps``, post-local SGD's *synchronization* warm-up (the first
steps all average the models); the two are independent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .choices import unknown

__all__ = ["SCHEDULES", "LRSchedule", "check_kind", "decays"]

#: ``--lr-schedule``'s choices.
SCHEDULES = ("constant", "cosine", "linear")


def check_kind(kind: str) -> None:
    """``ValueError`` (one line, the near name) unless ``kind`` is one of :data:`SCHEDULES`."""
    if kind not in SCHEDULES:
        raise unknown("--lr-schedule", kind, SCHEDULES)


def decays(kind: str, floor: float) -> bool:
    """Whether a schedule of ``kind`` ending at ``floor`` lowers the rate after its warm-up (what QSR needs)."""
    return kind != "constant" and floor < 1


@dataclass(frozen=True)
class LRSchedule:
    """The factor of the peak learning rate at each step of a run of ``total_steps``."""

    kind: str = "constant"
    warmup_steps: int = 0
    floor: float = 0.0
    total_steps: int | None = None  # the horizon; None only for a constant schedule without warm-up

    def __post_init__(self) -> None:
        check_kind(self.kind)
        if self.total_steps is not None and self.warmup_steps > self.total_steps:
            raise ValueError(f"--lr-warmup-steps {self.warmup_steps}: longer than the run's {self.total_steps} steps "
                             f"(semiasync: --rounds); give at most {self.total_steps} or lengthen the run")
        if self.changes and self.total_steps is None:
            raise ValueError(f"--lr-schedule {self.kind}: needs the run's length to decay over; give total_steps=")

    @property
    def changes(self) -> bool:
        """Whether the learning rate ever differs from the peak."""
        return self.warmup_steps > 0 or self.decays

    @property
    def decays(self) -> bool:
        """Whether the learning rate falls after the warm-up (:func:`decays`)."""
        return decays(self.kind, self.floor)

    def factor(self, s: int) -> float:
        """η_s / η for the 0-based step ``s``."""
        if s < self.warmup_steps:
            return (s + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        span = max(1, self.total_steps - self.warmup_steps)
        p = min(1.0, (s - self.warmup_steps) / span)
        shape = (1 + math.cos(math.pi * p)) / 2 if self.kind == "cosine" else 1 - p
        return self.floor + (1 - self.floor) * shape

    def rate_at(self, peak: float, step: int) -> float:
        """The rate of the run's step ``step`` (counted from 1, as the loops count) at ``peak``."""
        return peak * self.factor(step - 1)

    def apply(self, optimizer, peaks, s: int) -> None:
        """Set each parameter group of ``optimizer`` to its peak (``peaks``, in group order)
        times ``factor(s)``, for the 0-based step ``s`` it is about to take."""
        f = self.factor(s)
        for group, peak in zip(optimizer.param_groups, peaks, strict=True):
            group["lr"] = peak * f
