"""The options of the synchronous mode's triggers and rules: one frozen dataclass per part,
with its defaults and its checks, at the bottom of the import graph.

A field is named like its command-line flag (``theta`` ↔ ``--theta``) and holds the option's
default, its check (``__post_init__``) and its ``--help`` line (:data:`HELP`), each declared
here once. The command line and TOML files (:class:`fdahpc.config.TrainConfig`, whose
defaults and help lines are read from here) and
``ModelAverager(model, comm, "linearfda", theta=...)`` all build these classes with
:func:`options_from`; a trigger or rule sees only its own.

Θ is parsed once, here: ``theta`` is a number, ``"auto"`` (re-calibrated every round, with
its horizon ``theta_round_epochs`` or ``theta_fabric``) or ``"auto-once"`` (with the
calibration length ``theta_auto_epochs``); see :class:`ThresholdOptions`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .choices import unknown
from .lr_schedule import LRSchedule, check_kind, decays
from .theta import fabric_value

__all__ = ["NoOptions", "ThresholdOptions", "FDAOptions", "SketchFDAOptions", "PeriodicOptions", "MeanOptions",
           "FedAvgMOptions", "DiLoCoOptions", "FedAdamOptions", "FedAdpOptions", "SamplingOptions", "WarmupOptions",
           "LRScheduleOptions", "QSROptions", "SketchShape", "options_from", "EXCLUSIVE", "refuse_together",
           "theta_value", "THETA_AUTO", "betas_value", "option_names", "TextModelOptions", "HELP"]


def _o(default, help: str):
    """An option's field: its default and its ``--help`` line, declared here once
    (:class:`fdahpc.config.TrainConfig` shows the line, :func:`help_of`)."""
    return field(default=default, metadata={"help": help})


def _require(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def _positive(name: str, value, example) -> None:
    _require(isinstance(value, (int, float)) and value > 0 and math.isfinite(value),
             f"--{name.replace('_', '-')} {value!r}: must be > 0, e.g. {example}")


#: ``--theta``'s words: ``auto`` re-calibrates Θ after every round (:mod:`fdahpc.theta`);
#: ``auto-once`` is the earlier rule (Θ = the exact variance of one calibration round, kept).
THETA_AUTO = ("auto", "auto-once")


def theta_value(text: str | float) -> float | str:
    """``--theta``: a number, auto or auto-once."""
    if isinstance(text, str) and text.strip().lower() in THETA_AUTO:
        return text.strip().lower()
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ValueError(f"--theta {text!r}: not a number; give a variance threshold such as 1.0, or auto "
                         "(or auto-once)") from None


@dataclass(frozen=True)
class NoOptions:
    """A part with no options of its own."""


#: What ``--theta auto`` re-calibrates Θ on (``--theta-calibrate``; :func:`fdahpc.theta.recalibrate`).
CALIBRATIONS = ("variance", "estimate")


@dataclass(frozen=True)
class ThresholdOptions:
    """A Θ-driven trigger's threshold: a number ≥ 0; ``auto``: Θ_0 = 4·10⁻⁵·d, then after every
    synchronization Θ = H/H_r · Var_r (the round's exact variance scaled to a round of H steps:
    ``theta_round_epochs``, or from ``theta_fabric``; :mod:`fdahpc.theta`); or ``auto-once``: Θ
    becomes the exact model variance at the end of a first round ``theta_auto_epochs`` long."""

    theta: float | str = _o(1.0, "sync, FDA triggers: variance threshold Θ (model sync when the estimate exceeds it);"
                                 " auto: Θ_0 = 4e-5·d, re-calibrated after every sync to H/H_r·Var_r (the round's "
                                 "exact variance scaled to a round of H steps, its steps counted (η/η_max)² each "
                                 "under a falling learning rate); auto-once: Θ = the exact variance of "
                                 "a first round --theta-auto-epochs long")
    theta_auto_epochs: float | None = _o(None, "--theta auto-once: length of the first (calibration) round, in epochs"
                                               " (default 1)")
    theta_round_epochs: float | None = _o(None, "--theta auto: the round length H Θ aims at, in epochs (FDA-Opt's "
                                                "E_max/2; default 1, or from --theta-fabric)")
    theta_fabric: tuple[float, float, float] | str | None = _o(None, "--theta auto: GBPS,LATENCY_US,STEP_MS "
                                                                     "(bandwidth per rank, per-message latency, one "
                                                                     "step's compute): H = the shortest round whose "
                                                                     "model AllReduce costs <= 10 %% of its compute, "
                                                                     "e.g. 10,25,20; measure: the three timed in the "
                                                                     "job's first steps (not bit-reproducible)")
    theta_calibrate: str | None = _o(None, "--theta auto: what Θ is re-calibrated on after a sync: variance (default: "
                                           "the exact model variance Var_r) or estimate (the trigger's own estimate at "
                                           "the sync, the quantity Θ is compared with, so a round lasts about H steps "
                                           "however far the estimate exceeds the variance)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "theta", theta_value(self.theta))
        if not self.auto:
            _require(self.theta >= 0, f"--theta {self.theta}: must be >= 0 (0 averages every step) or auto, e.g. 1.0")
        if self.theta_auto_epochs is not None:
            _positive("theta_auto_epochs", self.theta_auto_epochs, 1)
            _require(self.theta == "auto-once", f"--theta-auto-epochs: the calibration round of --theta auto-once; "
                     f"with --theta {self.theta} drop it" + (" (or give --theta-round-epochs)" if self.theta == "auto" else ""))
        if self.theta_round_epochs is not None:
            _positive("theta_round_epochs", self.theta_round_epochs, 1)
        if self.theta_fabric is not None:
            object.__setattr__(self, "theta_fabric", fabric_value(self.theta_fabric))
            _require(self.theta_round_epochs is None, "--theta-fabric and --theta-round-epochs: both set the round "
                     "horizon of --theta auto; give one")
        for name in ("theta_round_epochs", "theta_fabric"):
            _require(getattr(self, name) is None or self.theta == "auto",
                     f"--{name.replace('_', '-')}: sets the round horizon of --theta auto; with --theta {self.theta} drop it")
        if self.theta_calibrate is not None:
            _require(self.theta_calibrate in CALIBRATIONS, f"--theta-calibrate {self.theta_calibrate!r}: unknown; choose "
                     f"one of {', '.join(CALIBRATIONS)}")
            _require(self.theta == "auto", f"--theta-calibrate: what --theta auto re-calibrates on; with --theta "
                     f"{self.theta} drop it")

    @property
    def auto(self) -> bool:
        return self.theta in THETA_AUTO

    @property
    def calibration_epochs(self) -> float:
        """auto-once's first round, in epochs."""
        return 1.0 if self.theta_auto_epochs is None else self.theta_auto_epochs


@dataclass(frozen=True)
class FDAOptions(ThresholdOptions):
    """LinearFDA's (and SketchFDA's) options beside Θ."""

    fda_lag: int = _o(0, "sync, FDA triggers: 1 reduces the state during the next local step and decides one step "
                         "late (overlaps the AllReduce)")
    fda_every: int | None = _o(None, "sync, FDA triggers: reduce the state and decide only every N steps (1/N of the "
                                     "monitoring traffic; the estimate stays a bound at the checked steps); default 1, "
                                     "or with --theta-fabric the fewest steps whose state reduction costs <= 5 %% of "
                                     "their compute (at most the round horizon)")
    fda_log_every: int = _o(1, 'sync, FDA triggers: store the estimate H every N steps')
    log_variance: bool = _o(False, "sync, FDA triggers: also compute the exact model variance every step (costs a "
                                   "full AllReduce)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.fda_lag in (0, 1), f"--fda-lag {self.fda_lag}: must be 0 (decide on this step's state) or 1 "
                 "(on the last step's)")
        _require(not (self.fda_lag and self.theta == 0), "--fda-lag 1: theta 0 averages every step, so there is no "
                 "state to wait for; drop --fda-lag")
        _require(self.fda_every is None or isinstance(self.fda_every, int) and not isinstance(self.fda_every, bool)
                 and self.fda_every >= 1,
                 f"--fda-every {self.fda_every}: must be an integer >= 1 (1 checks the variance every step), e.g. 10")
        _require(isinstance(self.fda_log_every, int) and self.fda_log_every >= 1,
                 f"--fda-log-every {self.fda_log_every}: must be >= 1")


@dataclass(frozen=True)
class SketchFDAOptions(FDAOptions):
    """SketchFDA: ε of its estimate (None: 1/sqrt(sketch columns))."""

    sketch_eps: float | None = _o(None, 'sync, SketchFDA: ε of the estimate (default 1/sqrt(sketch_cols))')

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sketch_eps is not None:
            _require(0 <= self.sketch_eps < 1, f"--sketch-eps {self.sketch_eps}: must be in [0, 1), e.g. 0.04")


#: :class:`fdahpc.sketch.AmsSketch`'s default shape, here so that the flags' help can show
#: it without importing the sketch module (which imports Numba).
SKETCH_ROWS, SKETCH_COLS = 5, 250


@dataclass(frozen=True)
class SketchShape:
    """The run's one AMS sketch (shared by SketchFDA and sketched FedAdp angles); None: the
    sketch's own default (:class:`fdahpc.sketch.AmsSketch`: ``SKETCH_ROWS`` x ``SKETCH_COLS``)."""

    sketch_rows: int | None = _o(None, 'sync: AMS sketch rows l (SketchFDA, sketched FedAdp angles)')
    sketch_cols: int | None = _o(None, 'sync: AMS sketch columns m (SketchFDA, sketched FedAdp angles)')

    # Its ranges are the sketch's own to check (:class:`fdahpc.sketch.AmsSketch`).


@dataclass(frozen=True)
class PeriodicOptions:
    """A fixed round: ``tau`` local steps, or ``local_epochs`` worth of them."""

    tau: int | None = _o(None, "a local job in steps: what a worker trains between two averages (sync, periodic "
                               "trigger) or a client between receiving a model and sending its update (semiasync); "
                               "not given: --local-epochs")
    local_epochs: float = _o(1.0, "a local job in epochs when --tau is not given: of the mean partition (sync, "
                                  "periodic trigger) or of the client's own data (semiasync)")

    def __post_init__(self) -> None:
        _require(self.tau is None or (isinstance(self.tau, int) and self.tau >= 1),
                 f"--tau {self.tau}: must be >= 1 local steps")
        _positive("local_epochs", self.local_epochs, 1)

    def steps(self, steps_per_epoch: int | None) -> int:
        """τ in local steps."""
        if self.tau is not None:
            return self.tau
        if steps_per_epoch is None:  # a loop of the user's own (fdahpc.ModelAverager) that gave neither
            raise ValueError("local_epochs: the round length in steps needs the epoch length; give tau=STEPS "
                             "(the round length) or steps_per_epoch=")
        return max(1, round(self.local_epochs * steps_per_epoch))


#: How the mean weighs the workers' models (``--weighting``).
WEIGHTINGS = ("uniform", "samples")


@dataclass(frozen=True)
class MeanOptions:
    """The (participants') mean: uniform, or weighted by sample counts n_i/n."""

    weighting: str = _o("uniform", "how the mean weighs the workers' models: uniform, or samples (n_i/n, McMahan's "
                                   "FedAvg); semiasync: fedavg and fedsgd only")

    def __post_init__(self) -> None:
        if self.weighting not in WEIGHTINGS:
            raise unknown("--weighting", self.weighting, WEIGHTINGS)


@dataclass(frozen=True)
class FedAvgMOptions(MeanOptions):
    """Server momentum; ``server_lr`` None: the optimizer's own (:class:`fdahpc.aggregate.FedAvgM`)."""

    server_lr: float | None = None
    server_momentum: float = _o(0.9, 'sync, fedavgm and diloco (its outer Nesterov momentum): server momentum β')

    # Its ranges are the server optimizer's own to check (:class:`fdahpc.aggregate.FedAvgM`).


@dataclass(frozen=True)
class DiLoCoOptions(FedAvgMOptions):
    """DiLoCo's outer Nesterov step reads the server flags: ``server_lr`` is its outer
    learning rate (None: :class:`fdahpc.aggregate.DiLoCoOuter`'s own, 0.7) and
    ``server_momentum`` its outer momentum (0.9, DiLoCo's too). One word, one meaning: the
    outer optimizer is the server optimizer of FedOpt, replicated on every rank."""

    # Its ranges are the outer optimizer's own to check (:class:`fdahpc.aggregate.DiLoCoOuter`).


@dataclass(frozen=True)
class FedAdamOptions(MeanOptions):
    """Server Adam; ``server_lr`` None: the optimizer's own (:class:`fdahpc.aggregate.FedAdam`)."""

    server_lr: float | None = None
    server_betas: tuple[float, float] = _o((0.9, 0.999), 'sync, fedadam: server β1,β2 (on the command line 0.9,0.999)')
    server_tau: float = _o(1e-7, "sync, fedadam: adaptivity floor τ (not --tau, a local job's steps)")
    server_bias_correction: bool = _o(False, "sync, fedadam: Adam's bias correction of m and v (as Keras' Adam; off "
                                             "in Reddi et al.)")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "server_betas", betas_value(self.server_betas))
        # Their ranges are the server optimizer's own to check (:class:`fdahpc.aggregate.FedAdam`).


def betas_value(raw) -> tuple[float, ...]:
    """``--server-betas 0.9,0.999`` (or a list) as a tuple of floats."""
    parts = raw.split(",") if isinstance(raw, str) else raw
    try:
        pair = tuple(float(b) for b in parts)
    except (TypeError, ValueError):
        pair = ()
    _require(len(pair) == 2, f"--server-betas {raw}: give two numbers, e.g. 0.9,0.999")
    return pair


#: FedAdp's ways to get the angles (``--fedadp-angles``).
ANGLE_MODES = ("exact", "sketch")


@dataclass(frozen=True)
class FedAdpOptions:
    """FedAdp: the Gompertz α and how the angles are had (exact or from sketches)."""

    fedadp_alpha: float = _o(5.0, 'sync, fedadp: Gompertz α')
    fedadp_angles: str = _o("exact", 'sync, fedadp: angles exact (2 full AllReduces a round) or sketch (1)')

    def __post_init__(self) -> None:  # α's range is FedAdpWeights' own to check
        if self.fedadp_angles not in ANGLE_MODES:
            raise unknown("--fedadp-angles", self.fedadp_angles, ANGLE_MODES)


@dataclass(frozen=True)
class SamplingOptions:
    """Client sampling: this many of the K workers train each round (None: all)."""

    clients_per_round: int | None = _o(None, "sync: sample this many of the workers (ranks) per round; semiasync: "
                                             "sample this many of the --clients per round and wait for all of them "
                                             "(cross-device FedAvg as McMahan et al. run it); all when omitted")

    def __post_init__(self) -> None:
        _require(self.clients_per_round is None or (isinstance(self.clients_per_round, int) and self.clients_per_round >= 1),
                 f"--clients-per-round {self.clients_per_round}: must be >= 1")


@dataclass(frozen=True)
class WarmupOptions:
    """Post-local SGD's warm-up (Lin, Stich, Patel, Jaggi, "Don't Use Large Mini-Batches,
    Use Local SGD", ICLR 2020, arXiv 1808.07217): the first ``warmup_steps`` steps all
    synchronize, whatever the trigger; from then on the trigger decides, counting its steps
    from the warm-up's end (a periodic round of τ ends at steps W+τ, W+2τ, ...; an FDA
    trigger's drift starts at the warm-up's last average)."""

    warmup_steps: int = _o(0, "sync, every strategy: the first N steps all average the models (post-local SGD's "
                              "warm-up; not --lr-warmup-steps); then the trigger decides, its rounds counted from "
                              "step N")

    def __post_init__(self) -> None:
        _require(isinstance(self.warmup_steps, int) and not isinstance(self.warmup_steps, bool) and self.warmup_steps >= 0,
                 f"--warmup-steps {self.warmup_steps}: must be an integer >= 0 (0: no warm-up), e.g. 100")


@dataclass(frozen=True)
class LRScheduleOptions:
    """The local learning rate's course over the run (:class:`fdahpc.lr_schedule.LRSchedule`):
    a linear warm-up of ``lr_warmup_steps``, then constant, cosine or linear down to
    ``lr_floor`` times the peak (``--lr``) at the run's last step."""

    lr_schedule: str = _o("constant", "the local learning rate's course: constant, cosine or linear (from --lr down to "
                                      "--lr-floor x --lr at the run's last step; semiasync: over --rounds, a job "
                                      "training at the rate of the global version it starts from); --strategy qsr: "
                                      "cosine")
    lr_warmup_steps: int = _o(0, "a linear learning-rate warm-up from --lr/N to --lr over the first N steps "
                                 "(semiasync: aggregations); not --warmup-steps, post-local SGD's sync warm-up")
    lr_floor: float = _o(0.0, "the learning rate --lr-schedule cosine or linear ends at, as a fraction of --lr "
                              "(nanoGPT: 0.1)")

    def __post_init__(self) -> None:
        check_kind(self.lr_schedule)
        _require(isinstance(self.lr_warmup_steps, int) and not isinstance(self.lr_warmup_steps, bool)
                 and self.lr_warmup_steps >= 0,
                 f"--lr-warmup-steps {self.lr_warmup_steps}: must be an integer >= 0 (0: no warm-up), e.g. 100")
        _require(isinstance(self.lr_floor, (int, float)) and not isinstance(self.lr_floor, bool)
                 and 0 <= self.lr_floor <= 1,
                 f"--lr-floor {self.lr_floor}: must be a fraction of --lr in [0, 1], e.g. 0.1")
        _require(self.lr_floor == 0 or self.lr_schedule != "constant",
                 f"--lr-floor {self.lr_floor}: where --lr-schedule cosine or linear ends; with a constant schedule "
                 "drop it (or give --lr-schedule cosine)")

    @property
    def decays(self) -> bool:
        """Whether the rate falls after the warm-up (:func:`fdahpc.lr_schedule.decays`)."""
        return decays(self.lr_schedule, self.lr_floor)

    def schedule(self, total_steps: int | None) -> LRSchedule:
        """The :class:`~fdahpc.lr_schedule.LRSchedule` of a run of ``total_steps``."""
        return LRSchedule(self.lr_schedule, self.lr_warmup_steps, float(self.lr_floor), total_steps)


@dataclass(frozen=True)
class QSROptions:
    """The Quadratic Synchronization Rule's constants; None: the paper's for the local
    optimizer's family (:class:`fdahpc.strategies.qsr.QSRTrigger`)."""

    qsr_h_base: int | None = _o(None, "sync, --trigger qsr: the shortest round H_base in steps (default: the QSR "
                                      "paper's, 4 for Adam-family local optimizers, 2 for the SGD family)")
    qsr_alpha: float | None = _o(None, "sync, --trigger qsr: alpha of H = max(H_base, floor((alpha/lr)^2)) (default: "
                                       "the QSR paper's, 0.0175 for Adam-family local optimizers, 0.2 for the SGD "
                                       "family)")

    def __post_init__(self) -> None:
        _require(self.qsr_h_base is None or isinstance(self.qsr_h_base, int) and not isinstance(self.qsr_h_base, bool)
                 and self.qsr_h_base >= 1, f"--qsr-h-base {self.qsr_h_base}: must be an integer >= 1, e.g. 4")
        if self.qsr_alpha is not None:
            _positive("qsr_alpha", self.qsr_alpha, 0.0175)


#: Options that set the same thing: given together, they are refused (:func:`refuse_together`).
#: (Pairs whose defaults are both None are checked by their options class instead.)
EXCLUSIVE = {("tau", "local_epochs"): "a local job's length, in steps or in epochs"}


def refuse_together(given) -> None:
    """``ValueError`` (one line) when ``given`` (the option names a user gave) holds both of
    an :data:`EXCLUSIVE` pair."""
    for (a, b), what in EXCLUSIVE.items():
        if a in given and b in given:
            raise ValueError(f"--{a.replace('_', '-')} and --{b.replace('_', '-')}: both set {what}; give one")


def option_names(cls: type) -> tuple[str, ...]:
    """The option names an options class reads."""
    return tuple(f.name for f in fields(cls))


def options_from(cls: type, values: Any) -> Any:
    """``cls`` built from ``values``: a mapping or an object with the options as attributes
    (a :class:`fdahpc.config.TrainConfig`); a name it lacks, or None where the default is
    not None, keeps the default."""
    get = values.get if isinstance(values, Mapping) else (lambda name, default=None: getattr(values, name, default))
    given = {}
    for f in fields(cls):
        value = get(f.name, None)
        if value is not None:
            given[f.name] = value
    return cls(**given)


@dataclass(frozen=True)
class TextModelOptions:
    """A character model's shape. ``context``: characters a sample holds (the GPT's block
    size; the LSTM's sequence, 80 in LEAF). The GPT's defaults (4 layers, 4 heads, width
    64, context 64) give 0.21 M parameters on Shakespeare's 77 characters: a few hundred
    steps a minute on one CPU core; ``--gpt-layers 8 --gpt-width 320`` is 9.9 M."""

    context: int = 64
    gpt_layers: int = 4
    gpt_heads: int = 4
    gpt_width: int = 64

    def __post_init__(self) -> None:
        for name in ("context", "gpt_layers", "gpt_heads", "gpt_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')} {value!r}: must be an integer >= 1")
        if self.gpt_width % self.gpt_heads:
            raise ValueError(f"--gpt-width {self.gpt_width}: must be a multiple of --gpt-heads {self.gpt_heads}, "
                             f"e.g. --gpt-width {self.gpt_heads * max(1, round(self.gpt_width / self.gpt_heads))}")


def _help_lines() -> dict[str, str]:
    """Each option's ``--help`` line, from the field of the options class that declares it."""
    out: dict[str, str] = {}
    for cls in (ThresholdOptions, FDAOptions, SketchFDAOptions, SketchShape, PeriodicOptions, MeanOptions, FedAvgMOptions,
                FedAdamOptions, FedAdpOptions, SamplingOptions, WarmupOptions, LRScheduleOptions, QSROptions):
        for f in fields(cls):
            if "help" in f.metadata:
                out.setdefault(f.name, f.metadata["help"])
    return out


#: The options' ``--help`` lines, by name (what :class:`fdahpc.config.TrainConfig` shows).
HELP: dict[str, str] = _help_lines()
