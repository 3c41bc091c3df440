"""A user's own code named on the command line: ``--model module.path:function`` and
``--dataset module.path:function`` (the same strings in TOML).

This module does only the naming, the import and the call; what the call must return is
checked by its reader (:func:`fdahpc.models.build_own_model` for a model,
:mod:`fdahpc.data.readers` for a dataset), so both paths share one convention and one
wording of their errors.

Call convention (chosen so that a function written for plain PyTorch needs no change, and
so that nothing fdahpc offers is passed to a function that cannot take it): fdahpc offers
a few values by keyword, and the function receives those it names as parameters (all of
them when it takes ``**kwargs``). A function without parameters is called with none. A
parameter fdahpc does not offer must have a default; one without is refused at setup,
since guessing a value would train something the user did not write. A value the user
gave on the command line (``--data-dir``) that the function does not take is refused, so
no flag is silently ignored. A class (e.g. an ``nn.Module`` subclass) is called the same
way: its ``__init__`` parameters are read.

Where the module is looked for: the folder the job starts in (``mpiexec``/``srun``
start every rank there) and ``PYTHONPATH``. ``python -m`` puts the starting folder first
on ``sys.path`` already; any other start gets it appended, after the installed packages,
so a file in the job's folder never shadows one of them.

Every failure is a ``ValueError`` with one line naming the flag, the problem and the fix,
which :mod:`fdahpc.run` reports once for all ranks (exit code 2).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from typing import Any, Callable

__all__ = ["REF_FORM", "is_ref", "split_ref", "resolve", "call", "one_line"]

#: How a reference is written, for error lines.
REF_FORM = "module.path:function"

_REF = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def is_ref(text: Any) -> bool:
    """Whether ``text`` names a function as ``module.path:function`` (``synthetic:1000``
    does not: a function's name cannot start with a digit)."""
    return isinstance(text, str) and _REF.fullmatch(text) is not None


def split_ref(text: str) -> tuple[str, str]:
    """``(module path, function name)`` of a reference."""
    module, _, name = text.rpartition(":")
    return module, name


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (a multi-line message is joined), for an error line."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _import(flag: str, ref: str, module_name: str):
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)  # after the installed packages: a job folder's file shadows none of them
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            file = module_name.replace(".", "/") + ".py"
            raise ValueError(f"{flag} {ref}: no module {module_name!r} in {cwd} or on PYTHONPATH; start the job in "
                             f"the folder that holds {file} or add that folder to PYTHONPATH") from None
        raise ValueError(f"{flag} {ref}: importing {module_name} failed ({one_line(exc)}); install what it "
                         "imports or fix the module") from None
    except Exception as exc:  # a SyntaxError, or whatever its top level raised
        raise ValueError(f"{flag} {ref}: importing {module_name} raised {one_line(exc)}; fix the module "
                         f"(python -c 'import {module_name}' shows the traceback)") from None


def resolve(flag: str, ref: str) -> Callable:
    """The function (or class) ``ref`` names, imported; ``ValueError`` with one line otherwise."""
    if not is_ref(ref):
        raise ValueError(f"{flag} {ref!r}: not of the form {REF_FORM}, e.g. mymodels:net")
    module_name, name = split_ref(ref)
    module = _import(flag, ref, module_name)
    if not hasattr(module, name):
        where = getattr(module, "__file__", None) or module_name
        raise ValueError(f"{flag} {ref}: {where} has no {name!r}; define {name} there or name one of its functions")
    fn = getattr(module, name)
    if not callable(fn):
        raise ValueError(f"{flag} {ref}: {module_name}.{name} is not callable (its type: {type(fn).__name__}); name "
                         "a function that returns what you need")
    return fn


def _accepted(flag: str, ref: str, fn: Callable, offered: dict[str, Any]) -> dict[str, Any]:
    """The offered keywords ``fn`` takes; ``ValueError`` when it needs one fdahpc lacks."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: call it bare
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(offered)
    take = {}
    for p in params:
        if p.name in offered and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            take[p.name] = offered[p.name]
        elif p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"{flag} {ref}: its parameter {p.name!r} has no default and fdahpc passes only "
                             f"{', '.join(offered)} (by keyword); give {p.name} a default or drop it")
    return take


def call(flag: str, ref: str, offered: dict[str, Any], given: dict[str, str] | None = None) -> Any:
    """Import ``ref`` and call it with the keywords of ``offered`` it takes (the module
    docstring's convention); what it returns. ``given``: offered names the user set, with
    their flag, which the function must take (else the flag would be ignored)."""
    fn = resolve(flag, ref)
    kwargs = _accepted(flag, ref, fn, offered)
    for name, user_flag in (given or {}).items():
        if name not in kwargs:
            raise ValueError(f"{user_flag}: {ref} takes no {name!r} parameter, so it would be ignored; add a "
                             f"{name} parameter to {split_ref(ref)[1]} or drop {user_flag}")
    try:
        return fn(**kwargs)
    except Exception as exc:
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ValueError(f"{flag} {ref}: calling {split_ref(ref)[1]}({shown}) raised {one_line(exc)}; fix the "
                         "function (calling it in python shows the traceback)") from None
