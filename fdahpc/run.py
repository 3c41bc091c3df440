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
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["MODES", "SETUP_ERRORS", "Mode", "Job", "Outcome", "Session", "Run", "mode_of", "refuse_unread", "load_data",
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

    def strategies(self) -> tuple[str, ...]:
        """The ``--strategy`` names this mode runs."""
        raise NotImplementedError

    def resolve(self, cfg) -> dict[str, Any]:
        """Values for the options whose default is this mode's (they are None in ``cfg``)."""
        return {}

    def reads(self, cfg) -> set[str]:
        """The options this run reads beside the ones every run reads
        (:data:`fdahpc.config.COMMON`): the mode's own, its strategy's."""
        return set(self.options)

    def readers(self, name: str) -> list[str]:
        """What in this mode reads option ``name`` (empty: nothing), e.g. ``--strategy fedavgm``."""
        return [f"--mode {self.name}"] if name in self.options else []

    def who(self, cfg) -> str:
        """The run's choice that decides what it reads, e.g. ``--strategy fedavg``."""
        return f"--strategy {cfg.strategy}"

    def check(self, cfg) -> None:
        """The options against this mode (``ValueError`` with one line): a strategy of its
        own. A mode extends it with its own checks."""
        from .config import one_of

        if cfg.strategy not in self.strategies():
            for other in (mode_of(m) for m in MODES if m != self.name):
                if cfg.strategy in other.strategies():
                    raise ValueError(f"--strategy {cfg.strategy}: {other.noun}; add --mode {other.name} or choose one "
                                     f"of {', '.join(self.strategies())}")
        one_of("--strategy", cfg.strategy, self.strategies())

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

    def prepare(self, cfg, comm) -> None:
        """Collective, before :meth:`build` on every rank (e.g. compile kernels once)."""

    def stem(self, cfg) -> str:
        """The default run file's name: ``runs/STEM-<time>.h5``."""
        return cfg.strategy

    def build(self, cfg, comm) -> "Job":
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
        from . import checkpoint

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

    def __getattr__(self, name: str):  # the job's parts (flat, strategy, ...) read as the run's
        if name == "job":
            raise AttributeError(name)
        return getattr(self.job, name)


def refuse_unread(cfg, mode: Mode) -> None:
    """``ValueError`` with one line for the first option the user gave that this run does
    not read: the flag, what reads it and the fix. Nothing given is silently ignored."""
    from .config import COMMON

    unread = sorted(cfg.given - COMMON - mode.reads(cfg))
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
        raise ValueError(f"--mode {name!r}: unknown; choose one of {', '.join(MODES)}")
    return importlib.import_module(MODES[name]).MODE


def load_data(cfg, train_indices: Callable, test_indices: Callable | None = None):
    """The dataset of ``cfg``, with the training rows ``train_indices(labels)`` picks for this
    rank (and the test rows ``test_indices(labels)`` picks; all when None, or ``--eval-samples``
    rows spread evenly over the test set). ``--dataset module.path:function`` is called here,
    on every rank, through the same readers (:func:`fdahpc.data.load_dataset`)."""
    import numpy as np

    from .config import text_options
    from .data import TEXT_DATASETS, check_dataset, load_dataset

    text = {}
    if check_dataset(cfg.dataset)[0] in TEXT_DATASETS:
        text = dict(context=text_options(cfg).context, targets="sequence" if cfg.model == "gpt" else "last")
    if test_indices is None and cfg.eval_samples is not None:
        def test_indices(labels):  # evenly spaced: every part of the test set (every role, every class) is seen
            n = len(labels)
            return np.unique(np.linspace(0, n - 1, min(cfg.eval_samples, n)).round().astype(np.int64)) if n else labels[:0]
    return load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed, train_indices=train_indices,
                        test_indices=test_indices, **text)


def new_model(cfg, data):
    """The run's initial model, the same on every rank and device (built on the CPU from the seed):
    a built-in one, or ``--model module.path:function``'s, checked on the data's sample shape."""
    import numpy as np
    import torch

    from .config import text_options
    from .models import build_model, build_own_model, build_text_model
    from .user import is_ref

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


def build(cfg, comm) -> Run:
    """Setup on this rank: checkpoint folder, run file name, the mode's job, the checkpoint
    to resume. Collective (the run file's name is agreed), then purely local."""
    from . import checkpoint

    mode = mode_of(cfg.mode)
    found, out = checkpoint.prepare(cfg, comm, mode.stem(cfg))
    job = mode.build(cfg, comm)
    resumed = checkpoint.open_for_resume(cfg, found, comm.rank, comm.world_size, job.flat.dim) if found else None
    return Run(cfg, comm, mode, job, out, resumed)


def run(r: Run, stop=None) -> dict:
    """Start (fresh or from the checkpoint), the mode's loop, teardown; the result, with its
    ``exit_code``. ``stop``: a :class:`fdahpc.control.StopRequest`."""
    from . import checkpoint, provenance
    from .control import Diverged, stopped
    from .metrics import open_run_file

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
    from .comm import env_rank

    first = next(e for e in errors if e is not None)
    if comm is not None:
        show = comm.is_root
    else:
        rank, local_rank = env_rank()
        show = rank in (None, 0) or (per_node and local_rank in (None, 0))
    if show:
        print(f"fdahpc.train: error: {first}", file=sys.stderr)
    return 2


def execute(cfg, comm, stop) -> int:
    """Set up (the ranks agree on success), run; the exit code."""
    from .control import Diverged

    logging.basicConfig(level=logging.INFO if comm.is_root else logging.WARNING, format="%(message)s", stream=sys.stdout)
    mode = mode_of(cfg.mode)
    try:
        mode.prepare(cfg, comm)
        setup, error = build(cfg, comm), None
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
