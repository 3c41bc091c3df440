"""One run of ``python -m fdahpc.train``, whatever its mode: the skeleton both modes share.

    setup     the checkpoint folder and the run file's name (agreed by all ranks), the mode's
              :class:`Job` (data, model, roles), the checkpoint to resume, checked against
              this run's options (:func:`fdahpc.checkpoint.open_for_resume`)
    start     the same initial model on every rank, or every rank's checkpointed state
    loop      the mode's own (:meth:`Job.loop`), given a :class:`Session`: the run file, the
              stop request and the collective checkpoint write
    teardown  the result and the final model into the run file, its status, the line a
              stopped run logs and the exit code

A mode is a :class:`Mode` object in a module of its own, named in :data:`MODES` (one line):
it supplies only what differs, its option defaults and checks, its job and its loop. The
synchronous mode is :mod:`fdahpc.sync_loop`, the semi-asynchronous one
:mod:`fdahpc.semiasync.mode`.

Setup errors (bad options, missing data, an unwritable ``--out``, a checkpoint of another
run) are agreed on by all ranks before anyone trains and reported as one line (exit code
2); a NaN or Inf ends every rank with exit code 3; a stop signal's checkpoint that could
not be written, 1.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from . import checkpoint, provenance
from .choices import unknown
from .comm import BACKENDS, DEVICES, env_rank
from .config import COMMON, DEFAULTS_FROM, TrainConfig, one_of, text_options
from .control import Diverged, stopped
from .data import TEXT_DATASETS, check_dataset, load_dataset, parse_partition
from .metrics import open_run_file
from .models import MODELS, TEXT_MODELS, build_model, build_own_model, build_text_model
from .options import option_names, refuse_together
from .renamed import current_options
from .user import REF_FORM, is_ref
from .worker import OPTIMIZERS, check_clip

__all__ = ["MODES", "SETUP_ERRORS", "Mode", "Job", "Outcome", "Session", "Run", "Plan", "resolve", "mode_of", "refuse_unread",
           "layout_of", "load_data",
           "new_model", "build", "run", "execute", "fail_setup"]

log = logging.getLogger("fdahpc")

#: ``--mode`` name → the module whose ``MODE`` object runs it. A new mode is a new module
#: and one line here.
MODES: dict[str, str] = {"sync": "fdahpc.sync_loop", "semiasync": "fdahpc.semiasync.mode"}

SETUP_ERRORS = (ValueError, FileNotFoundError, PermissionError, NotADirectoryError)


class Mode:
    """What a mode supplies; the defaults describe a mode that needs nothing special."""

    name = ""
    #: What a checkpoint's position counts: ``step`` or ``round``.
    unit = "step"
    #: What its ``--strategy`` names, e.g. "a synchronous strategy".
    noun = "a strategy"
    #: Options only this mode reads (not given by default); another mode refuses them.
    options: tuple[str, ...] = ()
    #: A mode defined outside fdahpc may declare its own options in a frozen dataclass (their
    #: defaults and checks); each field that is not a TrainConfig field becomes a flag and a
    #: TOML key (:func:`fdahpc.cli.extension_options`), read as ``cfg.NAME``, and counts
    #: among the options only this mode reads.
    Options: type | None = None

    def strategies(self) -> tuple[str, ...]:
        """The ``--strategy`` names this mode runs."""
        raise NotImplementedError

    def defaults(self, cfg) -> dict[str, Any]:
        """Values for the options whose default is this mode's (they are None in ``cfg``)."""
        return {}

    def reads(self, cfg, options) -> set[str]:
        """The options this run reads beside the ones every run reads
        (:data:`fdahpc.config.COMMON`): the mode's own, its strategy's (``options``: what
        :meth:`check` built)."""
        return self._own()

    def readers(self, name: str) -> list[str]:
        """What in this mode reads option ``name`` (empty: nothing), e.g. ``--strategy fedavgm``."""
        return [f"--mode {self.name}"] if name in self._own() else []

    def _own(self) -> set[str]:
        """The options only this mode reads: :attr:`options` and the fields of :attr:`Options`."""
        return set(self.options) | (set(option_names(self.Options)) if self.Options is not None else set())

    def who(self, cfg) -> str:
        """The run's choice that decides what it reads, e.g. ``--strategy fedavg``."""
        return f"--strategy {cfg.strategy}"

    def check(self, cfg) -> Any:
        """The options against this mode (``ValueError`` with one line): a strategy of its
        own. A mode extends it with its own checks and returns the options its strategy or
        rule runs with, built once (:attr:`Plan.options`); None here."""
        if cfg.strategy not in self.strategies():
            for other in (mode_of(m) for m in MODES if m != self.name):
                if cfg.strategy in other.strategies():
                    raise ValueError(f"--strategy {cfg.strategy}: {other.noun}; add --mode {other.name} or choose one "
                                     f"of {', '.join(self.strategies())}")
        one_of("--strategy", cfg.strategy, self.strategies())
        refuse_together(cfg.given)
        return None

    def layout(self, config: dict, world_size: int) -> dict[str, Any]:
        """What this mode's run file holds, written into it (the ``layout`` attribute) so that
        ``plot``, ``compare`` and ``summary`` read any mode's files without naming one:

        ``x``, ``accuracy``, ``loss``: the scores' series and their x series; ``panels``: the
        plot's [x series, axis label, divisor] per panel; ``events``: one row per model
        synchronization (what ``compare`` lines up, ``summary`` counts); ``bytes``: [series,
        "cumulative" or "sum"]; ``workers`` and ``label``: how a table and a legend name the
        run; ``convergence``: whether the convergence accuracy (mean of the last 20 scores)
        describes it. ``config`` is the run's options as the run file stores them."""
        raise NotImplementedError

    def device(self, cfg) -> str:
        """The device the communicator serves."""
        return cfg.device

    def prepare(self, plan: "Plan", comm) -> None:
        """Collective, before :meth:`build` on every rank (e.g. compile kernels once)."""

    def stem(self, cfg) -> str:
        """The default run file's name: ``runs/STEM-<time>.h5``."""
        return cfg.strategy

    def build(self, plan: "Plan", comm) -> "Job":
        """This rank's job; purely local (the ranks agree on success afterwards)."""
        raise NotImplementedError


class Job:
    """One rank's part of a run, as a mode builds it. It has ``flat``, the flat parameters
    (:class:`fdahpc.params.FlatParams`), whose size belongs to the checkpoint's identity."""

    @property
    def attrs(self) -> dict[str, Any]:
        """Run file attributes of this mode's own, beside the ones every run file has."""
        return {}

    def fresh(self) -> None:
        """Collective: a new run; every rank takes rank 0's initial model."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    def check_resume(self, state: dict) -> None:
        """``ValueError`` (one line) when this job cannot continue ``state`` (a checkpoint's),
        checked at setup, before any rank trains; nothing here."""

    @property
    def position(self) -> int:
        """Steps or rounds done (after :meth:`load_state_dict`: the checkpoint's)."""
        raise NotImplementedError

    def loop(self, session: "Session") -> "Outcome":
        raise NotImplementedError

    def final_model(self):
        """What the run file stores as ``final/model`` (a NumPy array)."""
        raise NotImplementedError

    def summary(self, result: dict, out: str) -> str:
        """The line rank 0 logs at the end of a finished run."""
        return f"done -> {out}"


@dataclass
class Outcome:
    """What a mode's loop returns: the result attributes, and how it ended."""

    result: dict
    position: int
    stopped_by: str | None = None  # the signal (or "a signal on another rank") that stopped it
    checkpoint: str | None = None  # the last checkpoint folder written


@dataclass
class Session:
    """What the skeleton hands a mode's loop."""

    cfg: Any
    comm: Any
    out: str
    run_file: Any  # fdahpc.metrics.RunFile on rank 0, NullRunFile elsewhere
    stop: Any  # fdahpc.control.StopRequest or None
    unit: str
    _meta: dict = field(default_factory=dict)

    def save(self, position: int, state: dict) -> str | None:
        """Collective checkpoint of every rank's ``state`` at ``position`` into
        ``--checkpoint-dir``; None (and a warning) when a rank could not write."""
        self.run_file.flush()
        meta = dict(self._meta, run_file=os.path.abspath(self.out), run_rows=self.run_file.rows())
        return checkpoint.save_or_warn(self.comm, self.cfg.checkpoint_dir, position, state, meta, unit=self.unit)


@dataclass
class Run:
    """A built run on one rank: what :func:`run` starts."""

    cfg: Any
    comm: Any
    mode: Mode
    job: Job
    out: str
    resumed: Any = None  # fdahpc.checkpoint.Resumed when continuing a checkpoint


@dataclass(frozen=True)
class Plan:
    """A resolved run: the options with every default filled in, its mode, and the options
    the mode's strategy or rule runs with, built and checked once (:meth:`Mode.check`) and
    handed down to :meth:`Mode.build`."""

    cfg: TrainConfig
    mode: Mode
    options: Any = None


def resolve(cfg: TrainConfig) -> Plan:
    """The run ``cfg`` describes, checked (``ValueError`` with one line): the defaults of the
    options not given filled in once (from where each is declared, then the mode's), names
    checked against their registries, the mode's checks, and every given option read."""
    mode = mode_of(cfg.mode)
    filled = {name: default_value(spec) for name, spec in DEFAULTS_FROM.items()
              if isinstance(spec, str) and name not in cfg.given}
    filled.update({name: value for name, value in mode.defaults(cfg.filled(filled)).items() if name not in cfg.given})
    cfg = cfg.filled(filled)
    check_names(cfg)
    options = mode.check(cfg)
    plan = Plan(cfg, mode, options)
    refuse_unread(plan)
    return plan


def default_value(spec: str):
    """The value ``spec`` of :data:`fdahpc.config.DEFAULTS_FROM` names: ``module:Name.attr`` or
    ``module:Class(param)`` (a signature default)."""
    module, _, path = spec.partition(":")
    if path.endswith(")"):
        owner, _, param = path[:-1].partition("(")
        return inspect.signature(getattr(importlib.import_module(module), owner)).parameters[param].default
    value = importlib.import_module(module)
    for attr in path.split("."):
        value = getattr(value, attr)
    return value


def check_names(c: TrainConfig) -> None:
    """The options that name something in a registry (a model, a dataset, an optimizer, a
    backend), and the model against the data's kind; ``ValueError`` with one line. Own code
    (``module.path:function``) is only named here; it is imported and called at setup, on
    every rank (:mod:`fdahpc.user`), never when a run file's options are read back."""
    if c.model not in MODELS and not is_ref(c.model):
        raise unknown("--model", c.model, MODELS, f" or your own {REF_FORM} (docs/own-model.md)")
    try:
        check_dataset(c.dataset)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    if c.optimizer is not None:
        one_of("--optimizer", c.optimizer, OPTIMIZERS)
    parse_partition(c.partition)
    _check_text(c)
    check_clip(c.clip_grad_norm)
    one_of("--backend", c.backend, BACKENDS)
    one_of("--device", c.device, DEVICES)


def _check_text(c: TrainConfig) -> None:
    """Character models go with a text dataset, image models with images; no flag of the
    other kind is ignored."""
    text = check_dataset(c.dataset)[0] in TEXT_DATASETS
    if text and c.model not in TEXT_MODELS and not is_ref(c.model):  # an own model may read character codes
        raise ValueError(f"--dataset {c.dataset}: character samples; use --model gpt or --model lstm, or your own "
                         "module.path:function")
    if not text and c.model in TEXT_MODELS:
        raise ValueError(f"--model {c.model}: a character model; use --dataset shakespeare")
    if not text and "roles" in c.partition:
        raise ValueError(f"--partition {c.partition}: roles are a text's speakers; use --dataset shakespeare or "
                         "another partition")
    for name in ("context", "gpt_layers", "gpt_heads", "gpt_width"):
        users = TEXT_MODELS if name == "context" else ("gpt",)
        own_text = name == "context" and text and is_ref(c.model)  # an own model's window on a text
        if getattr(c, name) is not None and c.model not in users and not own_text:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag}: only used with --model {' or '.join(users)}; drop {flag}")
    if text:
        text_options(c)


def refuse_unread(plan: Plan) -> None:
    """``ValueError`` with one line for the first option the user gave that this run does
    not read: the flag, what reads it and the fix. Nothing given is silently ignored."""
    cfg, mode = plan.cfg, plan.mode
    unread = sorted(cfg.given - COMMON - mode.reads(cfg, plan.options))
    if not unread:
        return
    name = unread[0]
    flag = "--" + name.replace("_", "-")
    here = mode.readers(name)
    if here:
        raise ValueError(f"{flag}: {mode.who(cfg)} does not read it (read by {' or '.join(here)}); drop {flag} or "
                         "choose one of those")
    for other in (mode_of(m) for m in MODES if m != mode.name):
        there = other.readers(name)
        if there:
            parts = [r for r in there if r != f"--mode {other.name}"]
            raise ValueError(f"{flag}: only used with --mode {other.name}" + (f" ({' or '.join(parts)})" if parts else "")
                             + f"; add --mode {other.name} or drop {flag}")
    raise ValueError(f"{flag}: nothing in --mode {mode.name} reads it; drop {flag}")


def mode_of(name: str) -> Mode:
    """The :class:`Mode` object of ``--mode name``."""
    if name not in MODES:
        raise unknown("--mode", name, MODES)
    return importlib.import_module(MODES[name]).MODE


def evenly_spaced(n: int, k: int) -> np.ndarray:
    """``min(k, n)`` distinct rows of ``0..n-1`` spread evenly from the first to the last:
    every part of an ordered set (every role of a text, every class of a sorted one) keeps
    its share."""
    return np.unique(np.linspace(0, n - 1, min(k, n)).round().astype(np.int64)) if n else np.zeros(0, dtype=np.int64)


def load_data(cfg, train_indices: Callable, test_indices: Callable | None = None):
    """The dataset of ``cfg``, with the training rows ``train_indices(labels)`` picks for this
    rank (and the test rows ``test_indices(labels)`` picks; all when None, or ``--eval-samples``
    rows spread evenly over the test set). ``--train-samples N`` keeps N training rows spread
    evenly over the training set first; ``train_indices`` then partitions those (its indices
    are into them). ``--dataset module.path:function`` is called here, on every rank, through
    the same readers (:func:`fdahpc.data.load_dataset`)."""
    text = {}
    if check_dataset(cfg.dataset)[0] in TEXT_DATASETS:
        text = dict(context=text_options(cfg).context, targets="sequence" if cfg.model == "gpt" else "last")
    if test_indices is None and cfg.eval_samples is not None:
        def test_indices(labels):
            return evenly_spaced(len(labels), cfg.eval_samples)
    if cfg.train_samples is not None:
        partition_of = train_indices

        def train_indices(labels):
            kept = evenly_spaced(len(labels), cfg.train_samples)
            return kept[np.asarray(partition_of(labels[kept]), dtype=np.int64)]
    return load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed, train_indices=train_indices,
                        test_indices=test_indices, **text)


def new_model(cfg, data):
    """The run's initial model, the same on every rank and device (built on the CPU from the seed):
    a built-in one, or ``--model module.path:function``'s, checked on the data's sample shape."""
    torch.manual_seed(cfg.seed)
    shape = tuple(data.x_train.shape[1:])
    if is_ref(cfg.model):
        dtype = torch.int64 if np.issubdtype(data.x_train.dtype, np.integer) else torch.float32
        return build_own_model(cfg.model, shape, dtype, data.num_classes)
    if data.vocab:
        return build_text_model(cfg.model, data.num_classes, text_options(cfg))
    if data.own and (len(shape) != 3 or shape[1] != shape[2] or data.x_train.dtype != np.float32):
        raise ValueError(f"--model {cfg.model}: takes square float images (N, C, H, H); --dataset {cfg.dataset} "
                         f"has {data.x_train.dtype} samples of shape {shape}; use your own --model module.path:function")
    return build_model(cfg.model, data.x_train.shape[1], data.x_train.shape[2], data.num_classes)


def build(plan: Plan, comm) -> Run:
    """Setup on this rank: checkpoint folder, run file name, the mode's job, the checkpoint
    to resume. Collective (the run file's name is agreed), then purely local."""
    cfg, mode = plan.cfg, plan.mode
    found, out = checkpoint.prepare(cfg, comm, mode.stem(cfg))
    job = mode.build(plan, comm)
    resumed = checkpoint.open_for_resume(cfg, found, comm.rank, comm.world_size, job.flat.dim) if found else None
    if resumed is not None:
        job.check_resume(resumed.state)
    return Run(cfg, comm, mode, job, out, resumed)


def run(r: Run, stop=None) -> dict:
    """Start (fresh or from the checkpoint), the mode's loop, teardown; the result, with its
    ``exit_code``. ``stop``: a :class:`fdahpc.control.StopRequest`."""
    cfg, comm, job = r.cfg, r.comm, r.job
    changed = checkpoint.changed_options(cfg, r.resumed)
    if r.resumed is None:
        job.fresh()
    else:
        job.load_state_dict(r.resumed.state)
        if comm.is_root:
            log.info("resumed from %s at %s %d%s", r.resumed.folder, r.mode.unit, job.position,
                     "".join(f"; --{k.replace('_', '-')} now {new} (was {old})" for k, (old, new) in changed.items()))
    segments = provenance.start(comm, r.resumed, changed)
    attrs = dict(mode=r.mode.name, strategy=cfg.strategy, model=cfg.model, dataset=cfg.dataset, partition=cfg.partition,
                 world_size=comm.world_size, params=job.flat.dim, target_accuracy=cfg.target_accuracy or -1.0,
                 target_loss=cfg.target_loss or -1.0,
                 config=cfg.to_json(), provenance=json.dumps(segments),
                 layout=json.dumps(r.mode.layout(json.loads(cfg.to_json()), comm.world_size)), **job.attrs)
    run_file = open_run_file(r.out, comm.is_root, attrs, r.resumed)
    meta = dict(checkpoint.identity(cfg, comm.world_size, job.flat.dim), config=json.loads(cfg.to_json()),
                provenance=segments)
    session = Session(cfg, comm, r.out, run_file, stop, r.mode.unit, meta)
    status = "failed"
    try:
        try:
            outcome = job.loop(session)
        except Diverged:
            status = "diverged"
            raise
        run_file.set_attrs(**outcome.result)
        run_file.write_array("final/model", job.final_model())
        status = "stopped" if outcome.stopped_by else "finished"
    finally:
        run_file.close(status)
    exit_code = 0
    if outcome.stopped_by:
        line, exit_code = stopped(outcome.stopped_by, r.mode.unit, outcome.position, outcome.checkpoint, cfg.checkpoint_dir)
        if comm.is_root:
            log.info(line)
    elif comm.is_root:
        log.info(job.summary(outcome.result, r.out))
    return dict(outcome.result, exit_code=exit_code)


def fail_setup(comm, errors: list, per_node: bool = False) -> int:
    """One line from rank 0 (every rank failed the same way), exit code 2. Before the
    communicator exists the launcher's rank decides; ``per_node``: a node's own problem
    (its GPUs), said by local rank 0 of each node."""
    first = next(e for e in errors if e is not None)
    if comm is not None:
        show = comm.is_root
    else:
        rank, local_rank = env_rank()
        show = rank in (None, 0) or (per_node and local_rank in (None, 0))
    if show:
        print(f"fdahpc.train: error: {first}", file=sys.stderr)
    return 2


def execute(plan: Plan, comm, stop) -> int:
    """Set up (the ranks agree on success), run; the exit code."""
    logging.basicConfig(level=logging.INFO if comm.is_root else logging.WARNING, format="%(message)s", stream=sys.stdout)
    try:
        plan.mode.prepare(plan, comm)
        setup, error = build(plan, comm), None
    except SETUP_ERRORS as exc:
        setup, error = None, str(exc)
    errors = comm.allgather_obj(error)  # all ranks agree before anyone trains
    if any(e is not None for e in errors):
        return fail_setup(comm, errors)
    try:
        return run(setup, stop)["exit_code"]
    except Diverged as exc:  # every rank raises it at the same point
        if comm.is_root:
            print(f"fdahpc.train: {exc}", file=sys.stderr, flush=True)
        return Diverged.exit_code


def layout_of(attrs: dict) -> dict[str, Any]:
    """What a run file holds (:meth:`Mode.layout`): its ``layout`` attribute; for a file
    written before the attribute existed, what its mode writes today."""
    def text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    if "layout" in attrs:
        return json.loads(text(attrs["layout"]))
    try:
        config = json.loads(text(attrs.get("config", "{}")))
    except json.JSONDecodeError:
        config = {}
    # (a file written before an option was renamed names it the old way)
    config = dict(current_options(config) if isinstance(config, dict) else {}, strategy=text(attrs["strategy"]))
    for name in ("partition", "clients", "buffer"):  # the attributes win, as they always did
        if name in attrs:
            config[name] = attrs[name].item() if hasattr(attrs[name], "item") else text(attrs[name])
    world_size = attrs.get("world_size")
    return mode_of(text(attrs.get("mode", "sync"))).layout(config, None if world_size is None else int(world_size))
