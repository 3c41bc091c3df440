"""The options of the synchronous mode's triggers and rules: one frozen dataclass per part,
with its defaults and its checks, at the bottom of the import graph.

A field is named like its command-line flag (``theta`` ↔ ``--theta``). The command line and
TOML files (:class:`fdahpc.config.TrainConfig`, whose defaults are read from here) and
``ModelAverager(model, comm, "linearfda", theta=...)`` all build these classes with
:func:`options_from`; a trigger or rule sees only its own.

Θ is parsed once, here: ``theta`` is a number, or ``"auto"`` with the calibration length
``theta_auto_epochs`` (see :class:`ThresholdOptions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

__all__ = ["NoOptions", "ThresholdOptions", "FDAOptions", "SketchFDAOptions", "PeriodicOptions", "MeanOptions",
           "FedAvgMOptions", "FedAdamOptions", "FedAdpOptions", "SamplingOptions", "SketchShape", "options_from",
           "theta_value", "betas_value", "option_names", "TextModelOptions"]


def _require(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def _positive(name: str, value, example) -> None:
    _require(isinstance(value, (int, float)) and value > 0 and math.isfinite(value),
             f"--{name.replace('_', '-')} {value!r}: must be > 0, e.g. {example}")


def theta_value(text: str | float) -> float | str:
    """``--theta``: a number or the word auto."""
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ValueError(f"--theta {text!r}: not a number; give a variance threshold such as 1.0, or auto") from None


@dataclass(frozen=True)
class NoOptions:
    """A part with no options of its own."""


@dataclass(frozen=True)
class ThresholdOptions:
    """A Θ-driven trigger's threshold: a number ≥ 0, or ``auto`` (Θ becomes the exact model
    variance at the end of a first round ``theta_auto_epochs`` long)."""

    theta: float | str = 1.0
    theta_auto_epochs: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "theta", theta_value(self.theta))
        if not self.auto:
            _require(self.theta >= 0, f"--theta {self.theta}: must be >= 0 (0 averages every step) or auto, e.g. 1.0")
        _positive("theta_auto_epochs", self.theta_auto_epochs, 1)

    @property
    def auto(self) -> bool:
        return self.theta == "auto"


@dataclass(frozen=True)
class FDAOptions(ThresholdOptions):
    """LinearFDA's (and SketchFDA's) options beside Θ."""

    fda_lag: int = 0
    fda_log_every: int = 1
    log_variance: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.fda_lag in (0, 1), f"--fda-lag {self.fda_lag}: must be 0 (decide on this step's state) or 1 "
                 "(on the last step's)")
        _require(not (self.fda_lag and self.theta == 0), "--fda-lag 1: theta 0 averages every step, so there is no "
                 "state to wait for; drop --fda-lag")
        _require(isinstance(self.fda_log_every, int) and self.fda_log_every >= 1,
                 f"--fda-log-every {self.fda_log_every}: must be >= 1")


@dataclass(frozen=True)
class SketchFDAOptions(FDAOptions):
    """SketchFDA: ε of its estimate (None: 1/sqrt(sketch columns))."""

    sketch_eps: float | None = None

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

    sketch_rows: int | None = None
    sketch_cols: int | None = None

    # Its ranges are the sketch's own to check (:class:`fdahpc.sketch.AmsSketch`).


@dataclass(frozen=True)
class PeriodicOptions:
    """A fixed round: ``tau`` local steps, or ``local_epochs`` worth of them."""

    tau: int | None = None
    local_epochs: float = 1.0

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

    weighting: str = "uniform"

    def __post_init__(self) -> None:
        _require(self.weighting in WEIGHTINGS,
                 f"--weighting {self.weighting!r}: unknown; choose one of {', '.join(WEIGHTINGS)}")


@dataclass(frozen=True)
class FedAvgMOptions(MeanOptions):
    """Server momentum; ``server_lr`` None: the optimizer's own (:class:`fdahpc.aggregate.FedAvgM`)."""

    server_lr: float | None = None
    server_momentum: float = 0.9

    # Its ranges are the server optimizer's own to check (:class:`fdahpc.aggregate.FedAvgM`).


@dataclass(frozen=True)
class FedAdamOptions(MeanOptions):
    """Server Adam; ``server_lr`` None: the optimizer's own (:class:`fdahpc.aggregate.FedAdam`)."""

    server_lr: float | None = None
    server_betas: tuple[float, float] = (0.9, 0.999)
    server_tau: float = 1e-7
    server_bias_correction: bool = False

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

    fedadp_alpha: float = 5.0
    fedadp_angles: str = "exact"

    def __post_init__(self) -> None:  # α's range is FedAdpWeights' own to check
        _require(self.fedadp_angles in ANGLE_MODES,
                 f"--fedadp-angles {self.fedadp_angles!r}: unknown; choose one of {', '.join(ANGLE_MODES)}")


@dataclass(frozen=True)
class SamplingOptions:
    """Client sampling: this many of the K workers train each round (None: all)."""

    clients_per_round: int | None = None

    def __post_init__(self) -> None:
        _require(self.clients_per_round is None or (isinstance(self.clients_per_round, int) and self.clients_per_round >= 1),
                 f"--clients-per-round {self.clients_per_round}: must be >= 1")


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
