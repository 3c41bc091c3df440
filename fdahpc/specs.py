"""Numbers inside spec strings (``--partition``, ``--scenario``): one parser, and each
caller words its own error around it."""

from __future__ import annotations

__all__ = ["at_least"]


def at_least(text: str, kind: type, low):
    """``text`` as a ``kind`` (int or float) when it parses and is >= ``low``, else None."""
    try:
        value = kind(text)
    except ValueError:
        return None
    return value if value >= low else None
