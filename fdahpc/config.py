"""Run configuration: the options a user gives, one frozen dataclass; the bottom layer.

Every flag of ``python -m fdahpc.train`` (:mod:`fdahpc.cli`) is a field below
(``--batch-size`` ↔ ``batch_size``), and a ``--config run.toml`` file uses the same names
(dashes or underscores). A :class:`TrainConfig` holds what was given (strategy-, rule- and
mode-specific options are None when not given) and checks each value on its own;
:func:`fdahpc.run.resolve` fills in the defaults from where each is declared
(:data:`DEFAULTS_FROM`, the mode's), has the mode, strategy and rule check and build their
options once, and refuses an option the run does not read. This module imports only
:mod:`fdahpc.options` (no mode, no strategy, not torch).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from .choices import unknown
from .options import HELP, TextModelOptions, betas_value, theta_value
from .renamed import RENAMED_OPTIONS

__all__ = ["TrainConfig", "RESUMABLE", "COMMON", "OPTION_FIELDS", "FAMILIES", "DEFAULTS_FROM", "load_toml", "text_options"]

def _f(default, help: str, *, resumable: bool = False, **extra):
    """A field with its ``--help`` line. ``resumable``: the option may change on ``--resume``
    and takes effect there (recorded in the run file); every other option belongs to the
    checkpoint's identity, and a resume that changes it is refused."""
    return field(default=default, metadata={"help": help, "resumable": resumable, **extra})


@dataclass(frozen=True)
class TrainConfig:
    # What to run.
    mode: str = _f("sync", "sync (every rank a worker, in lockstep) or semiasync (rank 0 serves, the others host --clients)")
    strategy: str | None = _f(None, "strategy (sync mode, default sketchfda) or aggregation rule (semiasync, default fedqs-avg); see --help")
    trigger: str | None = _f(None, "sync: override the strategy's trigger with a registered one (listed at the end of "
                             "--help; once --sync)")
    model: str = _f("lenet5", "lenet5, lenet5bn (with BatchNorm), mlr, cnn, vgg16star, resnet18; on a text: gpt or lstm; or your own "
                    "module.path:function returning an nn.Module (docs/own-model.md)")
    dataset: str = _f("mnist5k", "mnist5k (bundled), mnist, fashion-mnist, cifar10, synthetic or synthetic:N (N training images), "
                      "shakespeare (text; python -m fdahpc.data fetch shakespeare); or your own module.path:function "
                      "returning (x_train, y_train, x_test, y_test) (docs/own-model.md)")
    data_dir: str | None = _f(None, "folder with the dataset files (IDX or CIFAR-10 python batches)", resumable=True)
    partition: str = _f("iid", "iid, sorted:X, label:Y, dirichlet:ALPHA, classes:C, roles (a text's speaking roles) or mix:...")
    # Character models (--dataset shakespeare); defaults in fdahpc.models.TextModelOptions.
    context: int | None = _f(None, "gpt, lstm: characters per sample (default: gpt 64, lstm 80 as LEAF)")
    gpt_layers: int | None = _f(None, f"gpt: transformer blocks (default {TextModelOptions.gpt_layers})")
    gpt_heads: int | None = _f(None, f"gpt: attention heads (default {TextModelOptions.gpt_heads})")
    gpt_width: int | None = _f(None, f"gpt: embedding width, a multiple of --gpt-heads (default {TextModelOptions.gpt_width})")
    # Local training. The FDA paper trains LeNet-5 with Adam (lr 1e-3), batch 32.
    batch_size: int = _f(32, "minibatch size of a local step (per worker; semiasync: per client)")
    optimizer: str | None = _f(None, "local optimizer: adam, adamw, sgd, momentum (SGD, heavy ball 0.9) or nesterov (default: the strategy's, adam for FDA; semiasync: sgd)")
    lr: float | None = _f(None, "local learning rate (default: the strategy's, 1e-3 for FDA; semiasync: 0.1)")
    weight_decay: float = _f(0.0, "local weight decay")
    epochs: float | None = _f(None, "sync: training length in epochs of the mean partition (fractions allowed; semiasync: --rounds)", resumable=True)
    max_steps: int | None = _f(None, "sync: stop after this many local steps (overrides --epochs when smaller)", resumable=True)
    target_accuracy: float | None = _f(None, "stop as soon as the held model (what the method hands back at that step) reaches this test accuracy", resumable=True)
    target_loss: float | None = _f(None, "stop as soon as the held model's test loss (mean cross-entropy) is <= this", resumable=True)
    eval_samples: int | None = _f(None, "score the model on this many test samples, evenly spaced through the test set and the "
                                  "same at every evaluation (e.g. for the Shakespeare LSTM's costly test); all when omitted")
    train_samples: int | None = _f(None, "train on this many training samples, evenly spaced through the training set (every "
                                   "class or role keeps its share) and taken before the partition; all when omitted")
    eval_every: int | None = _f(None, "sync: also evaluate every N steps (always at each epoch end); semiasync: every N rounds (default 1)", resumable=True)
    seed: int = _f(0, "run seed: model init, partition, shuffling and sketch hashes derive from it")
    drop_last: bool = _f(False, "drop each pass's last partial minibatch (every rule, both modes): semiasync jobs take "
                         "E·⌊n/B⌋ steps and a client with fewer than B samples none (the FedQS authors' loader); "
                         "sync epochs are ⌊n/B⌋ steps of the mean partition")
    clip_grad_norm: float | None = _f(None, "clip each local step's gradient to this total L2 norm (every method; the "
                                      "FedQS authors use 20); off when omitted")
    lr_schedule: str | None = _f(None, HELP["lr_schedule"])
    lr_warmup_steps: int | None = _f(None, HELP["lr_warmup_steps"])
    lr_floor: float | None = _f(None, HELP["lr_floor"])
    # FDA and schedules.
    theta: float | str | None = _f(None, HELP["theta"], parse="theta")
    theta_auto_epochs: float | None = _f(None, HELP["theta_auto_epochs"])
    theta_round_epochs: float | None = _f(None, HELP["theta_round_epochs"])
    theta_fabric: str | None = _f(None, HELP["theta_fabric"])
    theta_calibrate: str | None = _f(None, HELP["theta_calibrate"])
    fda_lag: int | None = _f(None, HELP["fda_lag"])
    fda_every: int | None = _f(None, HELP["fda_every"])
    tau: int | None = _f(None, HELP["tau"])
    local_epochs: float | None = _f(None, HELP["local_epochs"])
    warmup_steps: int | None = _f(None, HELP["warmup_steps"])
    qsr_h_base: int | None = _f(None, HELP["qsr_h_base"])
    qsr_alpha: float | None = _f(None, HELP["qsr_alpha"])
    sketch_rows: int | None = _f(None, HELP["sketch_rows"])
    sketch_cols: int | None = _f(None, HELP["sketch_cols"])
    sketch_eps: float | None = _f(None, HELP["sketch_eps"])
    log_variance: bool = _f(False, HELP["log_variance"], resumable=True)
    fda_log_every: int | None = _f(None, HELP["fda_log_every"], resumable=True)
    # Server optimizers, client sampling, FedAdp.
    server_lr: float | None = _f(None, "server learning rate η_s of fedavgm, fedadam, diloco (its outer lr; sync) and fedbuff, mstep, wkafl (semiasync); by default each rule's own")
    server_momentum: float | None = _f(None, HELP["server_momentum"])
    server_betas: tuple[float, float] | None = _f(None, HELP["server_betas"])
    server_tau: float | None = _f(None, HELP["server_tau"])
    server_bias_correction: bool = _f(False, HELP["server_bias_correction"])
    weighting: str | None = _f(None, HELP["weighting"])
    clients_per_round: int | None = _f(None, HELP["clients_per_round"])
    fedadp_alpha: float | None = _f(None, HELP["fedadp_alpha"])
    fedadp_angles: str | None = _f(None, HELP["fedadp_angles"])
    # Semi-asynchronous mode (FedQS paper defaults).
    clients: int | None = _f(None, "semiasync: number of virtual clients N, spread over ranks 1..R-1 (default 100)")
    buffer: int | None = _f(None, "semiasync: aggregate when this many updates are buffered (the paper's K; default min(10, --clients); --buffer N = synchronous FL)")
    rounds: int | None = _f(None, "semiasync: number of aggregations (default 400)", resumable=True)
    speed_ratio: int | None = _f(None, "semiasync: client i needs r_i ~ U{1..RATIO} virtual time units per local job")
    clock: str | None = _f(None, "semiasync: events (default: jobs finish in virtual-time order, K updates per "
                           "aggregation) or ticks (the FedQS authors' simulator: index-order ticks, an aggregation "
                           "reads each queued client's latest result; docs/tick-clock.md)")
    scenario: str | None = _f(None, "semiasync: shift@ROUND:RATIO, fluctuate:A, dropout@ROUND:FRACTION (comma-separated)")
    aggregate: str | None = _f(None, "semiasync: who adds the buffered updates: server (every update travels to rank 0) or "
                               "hosts (each host adds its own clients' terms, one exact reduction to rank 0, one broadcast "
                               "back; the same model bit for bit; not wkafl)")
    model_cache_gb: float | None = _f(None, "semiasync: GB of models each rank keeps in memory (a host's global versions, the "
                                      "server's early updates; default 1); the others wait in --spill-dir (results unchanged)",
                                      resumable=True)
    spill_dir: str | None = _f(None, "semiasync: local folder for the models beyond --model-cache-gb (default: the "
                               "system's temporary folder, e.g. $TMPDIR)", resumable=True)
    fedqs_a: float | None = _f(None, "semiasync, FedQS learning-rate change rate a")
    fedqs_m0: float | None = _f(None, "semiasync, FedQS initial momentum m0")
    fedqs_k: float | None = _f(None, "semiasync, FedQS momentum change speed k")
    fedqs_lr_min: float | None = _f(None, "semiasync, FedQS lower bound of a client's learning rate")
    fedqs_lr_max: float | None = _f(None, "semiasync, FedQS upper bound of a client's learning rate")
    fedqs_variant: str | None = _f(None, "semiasync, FedQS end to end: paper (cosine with w^t-w^(t-1), flagged weight replaced by "
                            "(e/2)^(φ-F)(1+G)²/K) or authors (their code: per-layer angle, n_i/n·(e/2)^(φ-F)(1+min(G,2)²), "
                            "no momentum, flags reset each aggregation)")
    fedqs_similarity: str | None = _f(None, "semiasync, FedQS Mod1 similarity of the paper variant: cosine, euclidean or manhattan")
    fedqs_feedback: str | None = _f(None, "semiasync, FedQS Mod3 feedback weight, by default the variant's own: paper, authors "
                                    "(code is its old name), authors-per-round (ablation: theirs with F = (n_i+1)/(t+1), the share of "
                                    "aggregations) or misread (ablation: the old exp(φ-F)/(2φ-F)·(1+G)/2K)")
    fedqs_authors_momentum: bool = _f(False, "semiasync, FedQS authors variant: their other files' momentum m0 + min(2(1/G-1), 0.4) "
                                      "instead of none")
    fedqs_sketch_similarity: bool = _f(False, "semiasync, FedQS paper variant: estimate Mod1's cosine from AMS "
                                       "sketches (5x250) of the client's last update and of the global step: a client "
                                       "keeps 5 KB instead of its whole update (its error: benchmarks/fedqs_sketch.py)")
    fedqs_no_momentum: bool = _f(False, "semiasync, FedQS ablation: no momentum for any client type")
    fedqs_no_feedback: bool = _f(False, "semiasync, FedQS ablation: no feedback weights (base weights n_i/n only)")
    # Output and runtime.
    out: str | None = _f(None, "HDF5 run file (default runs/<strategy>-<timestamp>.h5; semiasync: runs/semiasync-<rule>-<timestamp>.h5)", resumable=True)
    checkpoint_dir: str | None = _f(None, "folder for checkpoints (the newest two complete ones are kept); also written on SIGTERM/SIGUSR1 and at the end", resumable=True)
    checkpoint_every: int | None = _f(None, "write a checkpoint every N steps (semiasync: rounds) into --checkpoint-dir", resumable=True)
    resume: str | None = _f(None, "continue from a checkpoint folder, or auto: the newest in --checkpoint-dir (a fresh start when there is none)", resumable=True)
    stop_check_every: int | None = _f(None, "sync: steps between the ranks' agreement on signals and divergence (semiasync: the server checks after every round)", resumable=True)
    backend: str = _f("auto", "communicator: auto (torch under torchrun or a plain srun, MPI under mpirun/srun --mpi, "
                      "else local), mpi, torch (NCCL on GPUs, gloo on CPUs), nccl, gloo or local", resumable=True)
    device: str = _f("auto", "where the model trains: cpu, cuda (one GPU per local rank; needs a torch backend) or auto "
                     "(cuda when GPUs are visible and the backend is not mpi); semiasync: cuda trains each host's clients on a GPU "
                     "of its node (the coordinator stays on CPU and MPI)", resumable=True)
    comm_timeout: float = _f(600.0, "torch backends: seconds a collective may wait for the other ranks before the job fails", resumable=True)
    threads: int = _f(1, "torch/numba threads per rank (1 avoids oversubscription under MPI)", resumable=True)
    log_every: int = _f(50, "print progress every N steps (semiasync: rounds), on rank 0", resumable=True)

    # The options of parts registered outside fdahpc (a trigger's, a buffer rule's or a mode's
    # own options dataclass, whose fields are not above): name -> value. Each reads as an
    # attribute (cfg.plateau_steps), counts as given and is stored with the others.
    extra: dict | None = field(default=None, metadata={"internal": True})
    # What this object filled in for the options not given (below), so that a copy made with
    # dataclasses.replace knows them apart from the options given; not an option.
    _filled: dict | None = field(default=None, repr=False, compare=False, metadata={"internal": True})

    def __post_init__(self) -> None:
        # In a copy made by dataclasses.replace a filled-in value the copy did not change is
        # not given: the copy is the user's options again, to be resolved afresh.
        for name, value in (self._filled or {}).items():
            if getattr(self, name) == value:
                object.__setattr__(self, name, None)
        object.__setattr__(self, "_filled", None)
        #: The options the user gave (a flag, a TOML key, a keyword): every one must be read.
        # (by identity: a given 0, such as --theta 0, is given; a flag left off is False)
        object.__setattr__(self, "given", frozenset(f.name for f in OPTION_FIELDS
                                                    if getattr(self, f.name) is not None and getattr(self, f.name) is not False)
                           | frozenset(self.extra or {}))
        if self.server_betas is not None:
            object.__setattr__(self, "server_betas", betas_value(self.server_betas))
        if self.theta is not None:
            object.__setattr__(self, "theta", theta_value(self.theta))
        check_values(self)

    def filled(self, defaults: dict[str, Any]) -> "TrainConfig":
        """This configuration with ``defaults`` for options not given, as :func:`fdahpc.run.resolve`
        fills them in: every reader and the run file see the value that ran, and ``given``
        stays the user's."""
        defaults = {name: value for name, value in defaults.items() if name not in self.given}
        out = dataclasses.replace(self, **defaults)
        object.__setattr__(out, "given", self.given)
        object.__setattr__(out, "_filled", defaults)
        return out

    def __getattr__(self, name: str):  # only for names that are not fields: an extension's option
        extra = self.__dict__.get("extra") or {}
        if name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_json(self) -> str:
        return json.dumps({**{f.name: getattr(self, f.name) for f in OPTION_FIELDS}, **(self.extra or {})}, sort_keys=True)


#: The options (every field but the bookkeeping of :meth:`TrainConfig.__post_init__`).
OPTION_FIELDS = tuple(f for f in fields(TrainConfig) if not f.metadata.get("internal"))

#: The options every run reads, whatever its mode and strategy; each of the others is read
#: by some modes, strategies, triggers or rules only (:meth:`fdahpc.run.Mode.reads`), and a
#: run that does not read one the user gave refuses it (:func:`fdahpc.run.refuse_unread`).
COMMON = frozenset((
    "mode", "strategy", "model", "dataset", "data_dir", "partition", "context", "gpt_layers", "gpt_heads", "gpt_width",
    "batch_size", "optimizer", "lr", "weight_decay", "target_accuracy", "target_loss", "eval_samples", "train_samples",
    "eval_every", "seed", "drop_last", "clip_grad_norm", "out", "checkpoint_dir", "checkpoint_every", "resume", "backend", "device",
    "comm_timeout", "threads", "log_every"))


#: The flags by family: ``--help`` shows one group each, and a TOML file may nest a
#: family's keys in a table of its name (``[fda]`` ``theta = 2``). Every field is in one.
FAMILIES: dict[str, tuple[str, ...]] = {
    "run": ("mode", "strategy", "trigger", "model", "dataset", "data_dir", "partition"),
    "text": ("context", "gpt_layers", "gpt_heads", "gpt_width"),
    "training": ("batch_size", "optimizer", "lr", "weight_decay", "epochs", "max_steps", "target_accuracy", "target_loss",
                 "eval_samples", "train_samples", "eval_every", "seed", "drop_last", "clip_grad_norm", "lr_schedule",
                 "lr_warmup_steps", "lr_floor"),
    "fda": ("theta", "theta_auto_epochs", "theta_round_epochs", "theta_fabric", "theta_calibrate", "fda_lag", "fda_every", "log_variance", "fda_log_every"),
    "sketch": ("sketch_rows", "sketch_cols", "sketch_eps"),
    "schedule": ("tau", "local_epochs", "warmup_steps", "qsr_h_base", "qsr_alpha"),
    "server": ("server_lr", "server_momentum", "server_betas", "server_tau", "server_bias_correction", "weighting"),
    "sampling": ("clients_per_round",),
    "fedadp": ("fedadp_alpha", "fedadp_angles"),
    "semiasync": ("clients", "buffer", "rounds", "speed_ratio", "clock", "scenario", "aggregate", "model_cache_gb", "spill_dir"),
    "fedqs": tuple(f.name for f in OPTION_FIELDS if f.name.startswith("fedqs_")),
    "output": ("out", "checkpoint_dir", "checkpoint_every", "resume", "stop_check_every", "log_every"),
    "runtime": ("backend", "device", "comm_timeout", "threads"),
}


#: The options that may change on ``--resume`` (and take effect there); the others are
#: the checkpoint's identity.
RESUMABLE = frozenset(f.name for f in OPTION_FIELDS if f.metadata["resumable"])


def one_of(name: str, value: str, choices) -> None:
    """``ValueError`` naming the flag and the choices unless ``value`` is one of them."""
    if value not in choices:
        raise unknown(name, value, choices)


def _require(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def check_values(c: TrainConfig) -> None:
    """Each given value on its own (``ValueError`` with one line). What needs a registry (a
    model, dataset or optimizer name) or the other options is checked when the run is
    resolved (:func:`fdahpc.run.resolve`), by the part that reads it."""
    _require(c.batch_size >= 1, f"--batch-size {c.batch_size}: must be >= 1, e.g. --batch-size 32")
    if c.lr is not None:
        _require(c.lr > 0 and math.isfinite(c.lr), f"--lr {c.lr}: must be a positive number, e.g. --lr 0.001")
    # The strategies' options (Θ, τ, the sketch, the server optimizers, FedAdp, client
    # sampling) are checked by their own classes (fdahpc.options), when the mode builds them.
    _require(c.weight_decay >= 0, f"--weight-decay {c.weight_decay}: must be >= 0")
    if c.epochs is not None:
        _require(c.epochs > 0, f"--epochs {c.epochs}: must be > 0, e.g. --epochs 5")
    if c.max_steps is not None:
        _require(c.max_steps >= 1, f"--max-steps {c.max_steps}: must be >= 1 (omit it to train for --epochs)")
    if c.target_accuracy is not None:
        _require(0 < c.target_accuracy <= 1, f"--target-accuracy {c.target_accuracy}: must be in (0, 1], e.g. 0.95")
    if c.target_loss is not None:
        _require(c.target_loss > 0 and math.isfinite(c.target_loss),
                 f"--target-loss {c.target_loss}: must be a positive cross-entropy, e.g. 1.6")
    if c.eval_samples is not None:
        _require(c.eval_samples >= 1, f"--eval-samples {c.eval_samples}: must be >= 1 (omit it to score the whole test set)")
    if c.train_samples is not None:
        _require(c.train_samples >= 1, f"--train-samples {c.train_samples}: must be >= 1 (omit it to train on every sample)")
    if c.eval_every is not None:
        _require(c.eval_every >= 1, f"--eval-every {c.eval_every}: must be >= 1")
    if c.checkpoint_every is not None:
        _require(c.checkpoint_every >= 1, f"--checkpoint-every {c.checkpoint_every}: must be >= 1, e.g. --checkpoint-every 500")
        _require(c.checkpoint_dir is not None, "--checkpoint-every: needs --checkpoint-dir DIR to write into; add it")
    if c.resume == "auto":
        _require(c.checkpoint_dir is not None, "--resume auto: needs --checkpoint-dir DIR to look in; add it")
    if c.stop_check_every is not None:
        _require(c.stop_check_every >= 1, f"--stop-check-every {c.stop_check_every}: must be >= 1, e.g. 10")
    _require(c.threads >= 1, f"--threads {c.threads}: must be >= 1")
    _require(c.log_every >= 1, f"--log-every {c.log_every}: must be >= 1")
    _require(c.comm_timeout > 0, f"--comm-timeout {c.comm_timeout}: must be > 0 seconds, e.g. 600")


def text_options(c: TrainConfig) -> TextModelOptions:
    """The character model's shape: the flags given, the model's defaults for the rest."""
    given = {name: getattr(c, name) for name in ("gpt_layers", "gpt_heads", "gpt_width") if getattr(c, name) is not None}
    return TextModelOptions(context=c.context or (80 if c.model == "lstm" else TextModelOptions.context), **given)


#: Where the default of an option that is None in :class:`TrainConfig` ("not given") is
#: declared, so that it is declared once. ``"module:Name.attr"``: filled in when the option
#: is not given, so that every reader and the run file see the value that ran;
#: ``{user: "module:Class(param)"}``: each user applies its own, ``--help`` shows them.
DEFAULTS_FROM: dict[str, str | dict[str, str]] = {
    **{name: f"fdahpc.options:FDAOptions.{name}" for name in ("theta", "fda_lag", "fda_every", "fda_log_every")},
    "local_epochs": "fdahpc.options:PeriodicOptions.local_epochs",
    "warmup_steps": "fdahpc.options:WarmupOptions.warmup_steps",
    **{name: f"fdahpc.options:LRScheduleOptions.{name}" for name in ("lr_schedule", "lr_warmup_steps", "lr_floor")},
    "server_momentum": "fdahpc.options:FedAvgMOptions.server_momentum",
    "server_betas": "fdahpc.options:FedAdamOptions.server_betas",
    "server_tau": "fdahpc.options:FedAdamOptions.server_tau",
    "weighting": "fdahpc.options:MeanOptions.weighting",
    "fedadp_alpha": "fdahpc.options:FedAdpOptions.fedadp_alpha",
    "fedadp_angles": "fdahpc.options:FedAdpOptions.fedadp_angles",
    **{f"fedqs_{name}": f"fdahpc.semiasync.fedqs:FedQSParams.{name}"
       for name in ("a", "m0", "k", "lr_min", "lr_max", "variant", "similarity")},
    "epochs": "fdahpc.sync_loop:DEFAULT_EPOCHS",
    "stop_check_every": "fdahpc.sync_loop:DEFAULT_STOP_CHECK_EVERY",
    "speed_ratio": "fdahpc.semiasync.mode:DEFAULT_SPEED_RATIO",
    "server_lr": {"fedavgm": "fdahpc.aggregate:FedAvgM(eta_s)", "fedadam": "fdahpc.aggregate:FedAdam(eta_s)",
                  "diloco": "fdahpc.aggregate:DiLoCoOuter(eta)", "fedbuff": "fdahpc.semiasync.rules:FedBuff(server_lr)",
                  "mstep": "fdahpc.semiasync.rules:MStep(server_lr)", "wkafl": "fdahpc.semiasync.rules:WKAFL(server_lr)"},
    "sketch_rows": {"": "fdahpc.options:SKETCH_ROWS"},  # AmsSketch's, kept where importing it is cheap
    "sketch_cols": {"": "fdahpc.options:SKETCH_COLS"},
}


def load_toml(path: str, extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The options of a ``--config`` TOML file (flat, or nested in a family's table);
    ``extra``: the names of the options registered parts declare beside the fields."""
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise FileNotFoundError(f"--config {path}: no such file; pass the path of a TOML run file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--config {path}: not valid TOML ({exc})") from None
    names = {f.name for f in OPTION_FIELDS} | set(extra)
    out = {}
    for key, value in raw.items():
        if key in FAMILIES and isinstance(value, dict):  # [fda] theta = 2
            for inner, v in value.items():
                name = inner.replace("-", "_")
                removed(name)
                _require(name in FAMILIES[key] or RENAMED_OPTIONS.get(name) in FAMILIES[key],
                         f"--config {path}: [{key}] has no key {inner!r}; "
                         f"it holds {', '.join(n.replace('_', '-') for n in FAMILIES[key])}")
                out[name] = v
            continue
        name = key.replace("-", "_")
        removed(name)
        _require(name in names or name in RENAMED_OPTIONS,
                 f"--config {path}: unknown key {key!r}; keys are the flag names, e.g. batch-size")
        out[name] = value
    return out  # an old name (RENAMED_OPTIONS) stays as given: the command line renames it and says so


#: Flags that existed once: a run file or TOML file that still names one gets this line.
REMOVED = {"fedqs_val_fraction": "removed: the FedQS label test now uses up to 20 of each client's own training "
                                 "samples per label and holds nothing out; drop it"}


def removed(name: str) -> None:
    name = name.lstrip("-").split("=")[0].replace("-", "_")
    if name in REMOVED:
        raise ValueError(f"--{name.replace('_', '-')}: {REMOVED[name]}")
