"""Nothing given is silently ignored: every option × every strategy × both modes.

Each option that not every run reads (``fdahpc.config.COMMON``) is given, with a valid value
(and what it needs beside it: ``--theta auto`` for ``--theta-round-epochs``), to every
strategy of every mode. The run either accepts it, and then the value reaches what the run
builds its parts from, or refuses it with one line naming the flag and what reads it.
"""

import dataclasses

import pytest
import torch

from fdahpc.config import COMMON, OPTION_FIELDS, TrainConfig
from fdahpc.options import LRScheduleOptions, option_names, options_from
from fdahpc.run import MODES, mode_of, resolve
from test_resume_options import CHANGED, REQUIRES

#: The options the walk gives (the others every run reads; mode and strategy are the walk's axes).
WALKED = [f.name for f in OPTION_FIELDS if f.name not in COMMON]


def _consumed_sync(plan, name):
    """Whether the value of ``name`` reaches the sync run: a field of an options object its
    trigger, rule, warm-up, sampling or sketch is built with (as the run hands them down), or
    an option of the mode itself."""
    cfg, o = plan.cfg, plan.options
    if name in mode_of("sync").options:
        return True
    parts = [o.trigger_options, o.rule_options, o.sampling, o.warmup, o.sketch, o.lr]
    # The part's value is the given one as its class parses it (--theta-fabric's text as a tuple).
    return any(name in {f.name for f in dataclasses.fields(p)}
               and getattr(p, name) == getattr(dataclasses.replace(p, **{name: getattr(cfg, name)}), name) != getattr(type(p)(), name, None)
               for p in parts)


def _consumed_semiasync(plan, name):
    """Whether the value of ``name`` reaches the semi-async run: the mode's own option, the
    built buffer rule's parameter, or FedQS's parameters (as the run hands them down)."""
    from fdahpc.semiasync.rules import build_rule

    cfg = plan.cfg
    if name in mode_of("semiasync").options:
        return True
    if name == "server_lr":
        rule = build_rule(cfg.strategy, server_lr=cfg.server_lr)
        return any(v == cfg.server_lr for v in vars(rule).values() if isinstance(v, float))
    if name == "weighting":
        return build_rule(cfg.strategy, weighting=cfg.weighting).weighting == cfg.weighting
    if name in option_names(LRScheduleOptions):  # the hosts' schedule, built from these
        return getattr(options_from(LRScheduleOptions, cfg), name) == getattr(cfg, name)
    if name.startswith("fedqs_"):
        params = plan.options.fedqs
        short = {"fedqs_authors_momentum": "authors_momentum", "fedqs_sketch_similarity": "sketch",
                 "fedqs_no_momentum": "momentum"}.get(name, name[len("fedqs_"):])
        if short == "momentum":
            return params.momentum is not cfg.fedqs_no_momentum
        if hasattr(params, short):
            return getattr(params, short) == getattr(cfg, name)
        rule = build_rule(cfg.strategy, feedback=not cfg.fedqs_no_feedback, variant=cfg.fedqs_variant,
                          feedback_weight=cfg.fedqs_feedback)
        return cfg.strategy.startswith("fedqs") and rule is not None  # feedback, no_feedback: the rule's arguments
    return False


CONSUMED = {"sync": _consumed_sync, "semiasync": _consumed_semiasync}


def _cases():
    for mode in MODES:
        for strategy in mode_of(mode).strategies():
            yield mode, strategy


@pytest.mark.parametrize("mode,strategy", list(_cases()))
def test_every_option_is_read_or_refused(mode, strategy):
    accepted = refused = 0
    for name in WALKED:
        given = dict(REQUIRES.get(name, {}), **{name: CHANGED[name]})
        flags = {"--" + n.replace("_", "-") for n in given}
        try:
            plan = resolve(TrainConfig(mode=mode, strategy=strategy, **given))
        except ValueError as exc:
            line = str(exc)
            assert "\n" not in line and any(line.startswith(f + ":") or line.startswith(f + " ") for f in flags), \
                f"{mode} {strategy} {sorted(flags)}: the refusal names no given flag: {line}"
            refused += 1
            continue
        accepted += 1
        assert set(given) <= plan.cfg.given
        assert name in plan.mode.reads(plan.cfg, plan.options), f"{mode} {strategy}: --{name} accepted but not among what it reads"
        assert CONSUMED[mode](plan, name), f"{mode} {strategy}: --{name} {CHANGED[name]!r} accepted but its value reaches nothing"
    assert accepted and refused


def test_every_walked_option_is_read_somewhere():
    """No option is unreadable everywhere (a flag nothing reads would be refused in every run)."""
    readers = {name: [m for m in MODES if mode_of(m).readers(name)] for name in WALKED}
    assert [n for n, m in readers.items() if not m] == []


def test_the_reported_combination_is_refused_and_a_copy_keeps_what_was_not_given():
    with pytest.raises(ValueError, match=r"^--server-momentum: --strategy fedavg does not read it \(read by --strategy "
                                         r"fedavgm, diloco\); drop --server-momentum"):
        resolve(TrainConfig(strategy="fedavg", server_momentum=0.5))
    with pytest.raises(ValueError, match=r"^--fedqs-a: only used with --mode semiasync \(--strategy fedqs-avg, fedqs-sgd\)"):
        resolve(TrainConfig(strategy="fedavg", fedqs_a=0.9))
    with pytest.raises(ValueError, match=r"^--theta: --strategy fedavg does not read it"):
        resolve(TrainConfig(strategy="fedavg", theta=3.0))
    with pytest.raises(ValueError, match=r"^--theta: --strategy fedavg does not read it"):
        resolve(TrainConfig(strategy="fedavg", theta=0.0))  # a given 0 is given
    with pytest.raises(ValueError, match=r"^--warmup-steps: only used with --mode sync"):
        resolve(TrainConfig(mode="semiasync", warmup_steps=0))
    # Filled-in defaults are not given: a copy with fewer clients gets a buffer that fits them,
    # and a copy into the other mode carries no option of the first one's defaults.
    semi = resolve(TrainConfig(mode="semiasync")).cfg
    assert (semi.clients, semi.buffer, "buffer" in semi.given) == (100, 10, False)
    five = resolve(dataclasses.replace(semi, clients=5)).cfg
    assert (five.clients, five.buffer, five.given >= {"clients"}) == (5, 5, True)
    assert dataclasses.replace(semi, clients=5).buffer is None  # a copy is the user's options again
    fedavg = resolve(TrainConfig(strategy="fedavg", tau=5)).cfg
    sync = resolve(dataclasses.replace(fedavg, strategy="linearfda", tau=None, theta=2.0)).cfg
    assert (sync.theta, sync.tau, sync.given >= {"theta"}) == (2.0, None, True)


def test_model_averager_refuses_an_option_its_strategy_does_not_read():
    from fdahpc import ModelAverager

    with pytest.raises(ValueError, match="option 'theta': unknown for fedavg"):
        ModelAverager(torch.nn.Linear(3, 1), None, "fedavg", tau=5, theta=3.0)
    assert ModelAverager(torch.nn.Linear(3, 1), None, "linearfda", theta=3.0) is not None


def test_toml_is_walked_like_the_command_line(tmp_path):
    from fdahpc.cli import parse_args

    f = tmp_path / "run.toml"
    f.write_text('strategy = "fedavg"\n[fedqs]\nfedqs-a = 0.9\n')
    with pytest.raises(ValueError, match=r"^--fedqs-a: only used with --mode semiasync"):
        parse_args(["--config", str(f)])
