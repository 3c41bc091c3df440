"""The one wording of a refused name: ``--strategy 'dilocco': unknown; did you mean diloco?
choose one of ...``. Imports nothing of fdahpc, so every layer may use it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["unknown"]


def unknown(flag: str, value, choices: Iterable[str], tail: str = "", scope: str = "") -> ValueError:
    """The ``ValueError`` for ``value`` not among ``choices`` of ``flag``, suggesting the
    closest choice when one is close; ``tail``: more ways out (", or your own ..."); ``scope``:
    where it is unknown (" for fedavg")."""
    choices = [str(c) for c in choices]
    near = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
    hint = f" did you mean {near[0]}?" if near else ""
    return ValueError(f"{flag} {value!r}: unknown{scope};{hint} choose one of {', '.join(choices)}{tail}")
