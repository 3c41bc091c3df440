"""Name registries filled by class decorators: ``@trigger`` and ``@rule`` (sync strategies,
:mod:`fdahpc.strategies.base`) and ``@buffer_rule`` (semi-async buffer rules,
:mod:`fdahpc.semiasync.rules`). The name sits on the class it names, so a new part is its
own file plus one decorator line, and a taken name or a class of the wrong kind is refused
when it is registered, not when it is first used."""

from __future__ import annotations

from typing import Callable

__all__ = ["registrar"]


def registrar(registry: dict, base: type, kind: str) -> Callable[[str], Callable[[type], type]]:
    """A decorator factory: ``@kind("name")`` above a ``base`` subclass sets its ``name`` and
    enters it in ``registry``."""

    def register(name: str) -> Callable[[type], type]:
        def add(cls: type) -> type:
            if not isinstance(cls, type) or not issubclass(cls, base):
                raise TypeError(f"@{kind}({name!r}): {getattr(cls, '__name__', cls)} must subclass {base.__name__}")
            if name in registry:
                raise ValueError(f"@{kind}({name!r}): the name is taken by {registry[name].__name__}")
            cls.name = name
            registry[name] = cls
            return cls

        return add

    return register
