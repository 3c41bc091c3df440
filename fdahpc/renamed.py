"""Names that changed, and the old spellings that still work (docs/glossary.md).

An option renamed keeps its old spelling for a while: on the command line (``--sync``), in a
TOML file (``sync = "linear"``) and as a :class:`fdahpc.averager.ModelAverager` keyword it is
taken for the new name, with one deprecation line; giving both spellings is refused, since
which one was meant cannot be guessed. Run files and checkpoints keep the names of the
version that wrote them (they are records, never rewritten), so every reader of a stored
configuration or byte count passes it through :func:`current_options` or
:func:`current_purposes` first.

Kept at the bottom of the import graph (it imports nothing of fdahpc), so that the
configuration, the checkpoints and the communicators can all read it; the command line
(:mod:`fdahpc.cli`) prints the deprecation lines.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["RENAMED_OPTIONS", "RENAMED_PURPOSES", "note", "take_old", "current_options", "current_purposes"]

#: Old option name → new one. ``sync`` named the trigger while ``--mode sync`` names the
#: synchronous mode; the trigger is now ``trigger``.
RENAMED_OPTIONS: dict[str, str] = {"sync": "trigger"}

#: Old byte-count purpose → new one (:data:`fdahpc.comm.PURPOSES`): the bytes of model
#: exchange were counted under ``sync``, the synchronous mode's name, though the
#: semi-asynchronous coordinator counts its model messages there too.
RENAMED_PURPOSES: dict[str, str] = {"sync": "model"}


def _spell(name: str, form: str) -> str:
    """An option's name as the user wrote it: a ``flag`` (``--fda-every``), a TOML ``key``
    (``fda_every``) or a Python ``keyword`` (``fda_every=``)."""
    return {"flag": "--" + name.replace("_", "-"), "key": repr(name), "keyword": name + "="}[form]


def note(old: str, where: str = "", form: str = "flag") -> str:
    """The deprecation line of option ``old`` spelled as ``form`` (see :func:`_spell`);
    ``where``: what held it, e.g. a TOML file's ``--config PATH``."""
    o, n = _spell(old, form), _spell(RENAMED_OPTIONS[old], form)
    return (f"{where}: " if where else "") + f"{o} is now {n}; {o} will be removed in a later release"


def take_old(values: dict[str, Any], where: str = "", form: str = "flag") -> list[str]:
    """Rename, in place, the old option names among ``values``' keys to the new ones; the
    deprecation lines, one per old name given. ``ValueError`` (one line) when a value is
    given under both names. ``where`` and ``form`` as in :func:`note`."""
    notes = []
    for old, new in RENAMED_OPTIONS.items():
        if old not in values:
            continue
        if new in values:
            o, n = _spell(old, form), _spell(new, form)
            raise ValueError((f"{where}: " if where else "") + f"{o} and {n} both given; {o} is the old name of "
                             f"{n}, keep only {n}")
        values[new] = values.pop(old)
        notes.append(note(old, where, form))
    return notes


def current_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored configuration (a run file's ``config``, a checkpoint's manifest) with its old
    option names renamed; a name stored under both keeps the new one's value."""
    out = dict(config)
    for old, new in RENAMED_OPTIONS.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


def current_purposes(counts: Mapping[str, int]) -> dict[str, int]:
    """Byte counters keyed by purpose (a checkpoint's ``bytes_sent``) with the old purpose
    names renamed."""
    return {RENAMED_PURPOSES.get(k, k): v for k, v in counts.items()}
