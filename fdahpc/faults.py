"""Fault injection for the failure tests: ``FDAHPC_FAULT`` makes one rank fail on purpose.

    FDAHPC_FAULT=nan@STEP:RANK              rank RANK's parameters become NaN after local step STEP
    FDAHPC_FAULT=kill-checkpoint@POS:RANK   rank RANK is SIGKILLed part-way through writing
                                            its file of the checkpoint at step (or round) POS

Several faults are separated by commas. Unset (the normal case), every query is a dict
lookup that answers None. The failures themselves are real: a real NaN in the model, a
real SIGKILL of the process while its file is half written.
"""

from __future__ import annotations

import os
import signal

__all__ = ["KINDS", "parse", "nan_at", "poison", "checkpoint_kill_offset", "kill_self"]

KINDS = ("nan", "kill-checkpoint")
#: Bytes of a checkpoint file written before an injected kill: past the archive header,
#: well before its end.
KILL_OFFSET = 4096


def parse(text: str | None) -> dict[tuple[str, int], int]:
    """``"nan@40:1,kill-checkpoint@20:0"`` -> ``{("nan", 1): 40, ("kill-checkpoint", 0): 20}``."""
    out: dict[tuple[str, int], int] = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        try:
            kind, where = item.split("@")
            at, rank = where.split(":")
            if kind not in KINDS:
                raise ValueError
            out[(kind, int(rank))] = int(at)
        except ValueError:
            raise ValueError(f"FDAHPC_FAULT {item!r}: expected KIND@STEP:RANK with KIND one of {', '.join(KINDS)}; "
                             "unset it for a normal run") from None
    return out


_FAULTS = parse(os.environ.get("FDAHPC_FAULT"))


def nan_at(rank: int) -> int | None:
    """The step after which ``rank`` poisons its model, if any."""
    return _FAULTS.get(("nan", rank))


def poison(model) -> None:
    """The fault ``nan`` injects: every parameter of ``model`` becomes NaN."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))


def checkpoint_kill_offset(position: int, rank: int) -> int | None:
    """Bytes after which writing this rank's file of checkpoint ``position`` kills the process."""
    return KILL_OFFSET if _FAULTS.get(("kill-checkpoint", rank)) == position else None


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
