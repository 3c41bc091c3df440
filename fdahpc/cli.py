"""The command line of ``python -m fdahpc.train``: flags (and a ``--config`` TOML file) →
the resolved run (:class:`fdahpc.run.Plan`).

Every flag is a field of :class:`fdahpc.config.TrainConfig` (``--batch-size`` ↔
``batch_size``), grouped by :data:`fdahpc.config.FAMILIES`; ``--help`` shows each default
from where it is declared (:data:`fdahpc.config.DEFAULTS_FROM`). Precedence: the command
line, then the TOML file, then the defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from .comm import env_rank
from .config import DEFAULTS_FROM, FAMILIES, OPTION_FIELDS, TrainConfig, load_toml, removed
from .renamed import RENAMED_OPTIONS, take_old
from .run import MODES, Plan, default_value, mode_of, resolve
from .semiasync.rules import BUFFER_RULES
from .strategies import RULES, STRATEGY_HELP, TRIGGERS

__all__ = ["build_parser", "parse_args", "extension_options"]


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage and exits on every rank; we want the one line that matters,
    printed once by rank 0, so a parse error becomes the same ValueError as a bad value."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(f"{message} (see --help)")


def _arg_type(f: dataclasses.Field):
    if f.metadata.get("parse") == "theta":
        return str  # a number or auto: TrainConfig parses it, once
    t = str(f.type)
    for name, conv in (("int", int), ("float", float)):
        if t.startswith(name):
            return conv
    return str


def _shown_default(f: dataclasses.Field):
    """What ``--help`` shows as a flag's default."""
    spec = DEFAULTS_FROM.get(f.name)
    if spec is None:
        return f.default
    if isinstance(spec, str):
        return default_value(spec)
    return ", ".join(f"{user} {default_value(s)}".strip() for user, s in spec.items())


def extension_options() -> dict[str, tuple[dataclasses.Field, list[str]]]:
    """The options that registered parts declare and :class:`TrainConfig` has no field for
    (a trigger, rule, buffer rule or mode added outside fdahpc, with its own ``Options``
    dataclass): name → (its field, who reads it). Each becomes a flag and a TOML key."""
    fields = {f.name for f in OPTION_FIELDS}
    owners = ([(f"--trigger {name}", cls.Options) for name, cls in TRIGGERS.items()]
              + [(f"rule {name}", cls.Options) for name, cls in RULES.items()]
              + [(f"--strategy {name}", cls.Options) for name, cls in BUFFER_RULES.items()]
              + [(f"--mode {name}", mode_of(name).Options) for name in MODES])
    out: dict[str, tuple[dataclasses.Field, list[str]]] = {}
    for owner, cls in owners:
        for f in dataclasses.fields(cls) if cls is not None else ():
            if f.name not in fields:
                out.setdefault(f.name, (f, []))[1].append(owner)
    return out


def build_parser(prog: str = "python -m fdahpc.train", extensions: dict | None = None) -> argparse.ArgumentParser:
    """The flags; ``extensions``: :func:`extension_options` when the caller has it already."""
    p = _OneLineParser(
        prog=prog,
        description="Train one model replica per MPI rank with a communication-efficient strategy.",
        epilog="strategies (--mode sync): " + "; ".join(f"{k}: {v}" for k, v in STRATEGY_HELP.items())
        + ". Triggers (--trigger): " + ", ".join(TRIGGERS)
        + ". Rules (--mode semiasync): " + ", ".join(BUFFER_RULES) + ".",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--config", help="TOML file whose keys equal the flags (command line wins)")
    by_name = {f.name: f for f in OPTION_FIELDS}
    for family, names in FAMILIES.items():
        group = p.add_argument_group(family)
        for f in (by_name[n] for n in names):
            flag = "--" + f.name.replace("_", "-")
            shown = _shown_default(f)  # None: the help says where the default comes from
            helptext = f.metadata["help"] + ("" if shown is None else f" (default: {shown})")
            if f.type in ("bool", bool):
                group.add_argument(flag, action="store_true", help=helptext)
            else:
                group.add_argument(flag, type=_arg_type(f), help=helptext, metavar=f.name.upper())
    for old, new in RENAMED_OPTIONS.items():  # the old spellings, hidden; parse_args renames them
        p.add_argument("--" + old.replace("_", "-"), type=_arg_type(by_name[new]), help=argparse.SUPPRESS)
    extensions = extension_options() if extensions is None else extensions
    if extensions:
        group = p.add_argument_group("extensions", "options of the registered parts that fdahpc does not ship")
        for name, (f, owners) in extensions.items():
            flag = "--" + name.replace("_", "-")
            helptext = f"{f.metadata.get('help', 'read by ' + ', '.join(owners))} (default: {f.default})"
            if isinstance(f.default, bool):
                group.add_argument(flag, action="store_true", help=helptext)
            else:
                kind = type(f.default) if isinstance(f.default, (int, float)) else str
                group.add_argument(flag, type=kind, help=helptext, metavar=name.upper())
    return p


def _say(notes: list[str]) -> None:
    """Each deprecation line on stderr, from the launcher's rank 0 only (or when no launcher
    set a rank): every rank parses the same flags, one line is enough."""
    if env_rank()[0] in (None, 0):
        for line in notes:
            print(f"fdahpc.train: note: {line}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> Plan:
    """Command line (and optional TOML file) → the resolved, checked run."""
    for arg in sys.argv[1:] if argv is None else argv:
        if arg.startswith("--"):
            removed(arg)
    extensions = extension_options()  # imports every registered mode: once per parse
    ns = vars(build_parser(extensions=extensions).parse_args(argv))
    notes = take_old(ns)
    merged = {}
    if "config" in ns:
        path = ns.pop("config")
        merged = load_toml(path, frozenset(extensions))
        notes = take_old(merged, f"--config {path}", "key") + notes
    merged.update(ns)
    _say(notes)
    extra = {name: merged.pop(name) for name in sorted(extensions.keys() & set(merged))}
    try:
        cfg = TrainConfig(**merged, extra=extra or None)
    except TypeError as exc:  # a TOML value of the wrong type
        raise ValueError(f"configuration: {exc}") from None
    return resolve(cfg)
