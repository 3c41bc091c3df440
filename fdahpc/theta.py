"""``--theta auto``: a Θ nobody tunes, re-calibrated after every synchronization (pure math).

The rule follows FDA-Opt (Theologitis et al., "FDA-Opt: Communication-Efficient Federated
Fine-Tuning of Language Models", arXiv 2505.04535): after round r, which lasted E_r epochs
and ended with the exact model variance Var_r, the next round's threshold is

    Θ_{r+1} = (E_max / 2) / E_r · Var_r.

Read as: the variance grew about linearly over the round (drifts of independent steps add
up), at Var_r / E_r per epoch, so Θ_{r+1} is the variance a round of E_max/2 epochs would
reach at that rate, and the next round ends near that length, sooner when the drift speeds
up (skewed data, a rising learning rate), later when it slows. The code counts in steps:
``Θ_{r+1} = H / H_r · Var_r`` with H_r the round's steps (on the learning rate's clock, below)
and H the horizon (E_max/2 in steps).

Choices beside the paper's (it fine-tunes pre-trained models, where every round can be
calibrated from the last):

- The first round needs no calibration: it starts from a prior ``Θ_0 = c·d`` (d parameters,
  c = :data:`THETA_PER_PARAM` = 4·10⁻⁵, the middle of the FDA paper's tuned Θ ≈ 3–5·10⁻⁵·d
  across LeNet-5, VGG and DenseNet); a prior off by 10x costs one round of the wrong length,
  then the re-calibration takes over.
- The horizon H: ``--theta-round-epochs E`` (FDA-Opt's E_max/2; default 1 epoch), or, given
  the fabric and the step's compute time (``--theta-fabric GBPS,LATENCY_US,STEP_MS``), the
  shortest round whose model AllReduce costs at most :data:`COMM_SHARE` (10 %) of the round's
  compute: ``H = ⌈T_sync / (0.1 · T_step)⌉`` with the α–β time of a Rabenseifner AllReduce of
  the float32 model, ``T_sync = 2⌈log2 K⌉α + 2(K−1)/K · 4d · 8/bandwidth``. A fast fabric thus
  asks for short rounds (syncing is cheap), a slow one for long rounds.
- A horizon of one step (H = 1: a model AllReduce costs at most 10 % of one step's compute) is
  the synchronous limit: every step synchronizes, and the trigger reduces no state and keeps no
  Θ, since there is nothing left to decide. The run is then Synchronous's (the models averaged
  after every local step), bit for bit, with no monitoring traffic. Before, such a run still
  checked every step and skipped syncs whenever the re-calibrated Θ allowed: it paid a state
  reduction per step to save syncs that cost little, and under label skew it needed up to 2x
  Synchronous's steps (docs/theta_auto.md).
- Var_r is the exact variance ``mean_k ||u_k||² − ||mean_k u_k||²`` of the drifts at the
  synchronization: ``mean_k ||u_k||²`` is LinearFDA's and SketchFDA's own state when the
  decision is on the current step (else one 4-byte AllReduce), and ``mean_k u_k`` is what the
  synchronization's model AllReduce computes anyway.
- FDA-Opt's E_max is also a cap on a round's length: a round that reaches
  :data:`ROUND_CAP` · H steps (2H, i.e. E_max) ends there whatever the estimate.
- The extrapolation is bounded: ``Θ_{r+1} = min(H/H_r, MAX_STRETCH) · Var_r`` with
  :data:`MAX_STRETCH` = 4. FDA-Opt checks once per epoch, so its rounds last at least an
  epoch and its ratio never exceeds E_max/2 (5 with its defaults); checked every step, a
  round can last a handful of steps, and the first one, ended by the prior during the
  steepest drift of training, measured a rate that extrapolated 30x overshot the tuned Θ
  5-8x on skewed data (docs/theta_auto.md, the first rule's figures).
- The check cadence: given the fabric, the trigger's own state reduction (8 bytes for
  LinearFDA, a latency-bound message) is also priced, and the state is reduced every
  ``m = ⌈T_state / (0.05 · T_step)⌉`` steps (:data:`MONITOR_SHARE`), at most H, so that on a
  high-latency link the monitoring costs at most 5 % of the compute instead of one latency
  per step (``--fda-every`` given by hand wins).
- ``--theta-fabric measure`` takes the three times from the job itself instead of a stated
  fabric: at its first step the trigger times a model AllReduce and a state AllReduce (the
  fastest of 3 each), then the compute between its calls over :data:`MEASURE_STEPS` steps;
  the ranks average the three times (one 12-byte AllReduce) and set H and m from them
  (:func:`horizon_from_seconds`, :func:`every_from_seconds`). Until then the round aims at
  the default horizon (1 epoch) and checks every step. Measured times differ from run to
  run, so such a run is not bit-reproducible; its run file records the times
  (``fda_fabric/*``).
- The learning rate's clock. Re-calibrated after every round to that round's variance, Θ
  holds rounds near H whatever the drift, and so cancels what a decaying learning rate should
  earn: drifts that slow as the rate falls. H_r is therefore counted on a clock that runs at
  the rate's square: a step at rate η adds (η/η_max)² to the round, η_max the highest rate so
  far (a constant rate and a warm-up add 1 per step, so such runs are unchanged). Var_r/H_r is
  then the variance per step at the peak rate, as drifts of independent steps of size ∝ η add
  up (the random-walk reading QSR's H ∝ 1/η² rests on, Gu et al., ICLR 2024), and a round
  at rate η lasts about H·(η_max/η)² steps: QSR's law, with H from the fabric instead of a
  tuned α, and the round still ended early when the drift outruns the last round's rate.
  The round cap (2H) is on the same clock. The rate is the schedule's (``--lr-schedule``), or
  a ``ModelAverager`` optimizer's current one; without either, every step counts 1.
- Var_r ≤ 0 (one worker): nothing to average; Θ becomes ∞ and the run never syncs again
  (except at the round cap).
- ``--theta-calibrate estimate`` (not the default): ``Θ_{r+1} = min(H/H_r, 4) · Ĥ_r`` with Ĥ_r
  the trigger's own estimate that ended round r (at the round cap, that step's, from one
  reduction of the whole state). Θ is compared with the estimate, not with the variance, and
  LinearFDA's estimate exceeds the variance by a factor c (mean ||u||² against the variance,
  when ξ explains little of the drift), so calibrated on Var_r its rounds end near H/c;
  calibrated on Ĥ_r they end near H whatever c is. Ĥ_r ≤ 0 (SketchFDA's noise at the cap)
  falls back to Var_r.
"""

from __future__ import annotations

import math

__all__ = ["THETA_PER_PARAM", "COMM_SHARE", "MAX_STRETCH", "ROUND_CAP", "MONITOR_SHARE", "MEASURE", "MEASURE_STEPS",
           "prior", "sync_seconds", "horizon_steps", "horizon_from_seconds", "check_every", "every_from_seconds",
           "recalibrate", "fabric_value"]

#: Θ_0 per trainable parameter: the FDA paper's tuned Θ ≈ 3–5·10⁻⁵·d, its middle.
THETA_PER_PARAM = 4e-5
#: The largest share of a round's compute its synchronization may cost (the fabric horizon).
COMM_SHARE = 0.1
#: The largest share of a step's compute the trigger's state reduction may cost (the fabric cadence).
MONITOR_SHARE = 0.05
#: The most a round's variance is scaled up: Θ_{r+1} <= 4·Var_r, however short round r was.
MAX_STRETCH = 4.0
#: ``--theta-fabric measure``: the steps whose compute is timed before H and m are set.
MEASURE_STEPS = 10
MEASURE = "measure"
#: FDA-Opt's E_max in horizons: a round of ROUND_CAP·H steps ends whatever the estimate.
ROUND_CAP = 2


def prior(dim: int) -> float:
    """Θ_0 = 4·10⁻⁵·d."""
    return THETA_PER_PARAM * dim


def fabric_value(text) -> tuple[float, float, float] | str:
    """``--theta-fabric GBPS,LATENCY_US,STEP_MS`` (or a 3-sequence) as three positive floats, or
    ``measure`` (:data:`MEASURE`) as it is."""
    if isinstance(text, str) and text.strip() == MEASURE:
        return MEASURE
    parts = text.split(",") if isinstance(text, str) else text
    try:
        values = tuple(float(x) for x in parts)
    except (TypeError, ValueError):
        values = ()
    if len(values) != 3 or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"--theta-fabric {text}: give bandwidth Gb/s, latency µs and step compute ms, three positive "
                         "numbers, e.g. 10,25,20, or measure")
    return values


def sync_seconds(dim: int, workers: int, gbps: float, latency_us: float, nbytes: float | None = None) -> float:
    """α–β time of one AllReduce of the float32 model, 2⌈log2 K⌉α + 2(K−1)/K·4d·8/bandwidth
    (or of ``nbytes`` per rank when given: the trigger's state)."""
    if workers <= 1:
        return 0.0
    rounds = 2 * math.ceil(math.log2(workers))
    n = 4.0 * dim if nbytes is None else nbytes
    return rounds * latency_us * 1e-6 + 2.0 * (workers - 1) / workers * n * 8.0 / (gbps * 1e9)


def horizon_steps(steps_per_epoch: int, dim: int, workers: int, round_epochs: float | None = None,
                  fabric: tuple[float, float, float] | None = None) -> int:
    """H, the round length (steps) Θ aims at: from the fabric when given, else ``round_epochs`` (default 1) epochs."""
    if fabric is not None:
        gbps, latency_us, step_ms = fabric
        return horizon_from_seconds(sync_seconds(dim, workers, gbps, latency_us), step_ms)
    return max(1, round((1.0 if round_epochs is None else round_epochs) * steps_per_epoch))


def horizon_from_seconds(sync_s: float, step_ms: float) -> int:
    """H from times: the fewest steps whose compute (``step_ms`` each) a model AllReduce of
    ``sync_s`` seconds costs at most 10 % of."""
    return max(1, math.ceil(sync_s / (COMM_SHARE * step_ms * 1e-3))) if step_ms > 0 else 1


def every_from_seconds(state_s: float, step_ms: float, horizon: int) -> int:
    """m from times: the fewest steps whose compute a state reduction of ``state_s`` seconds
    costs at most 5 % of, and at most H."""
    return max(1, min(horizon, math.ceil(state_s / (MONITOR_SHARE * step_ms * 1e-3)))) if step_ms > 0 else 1


def check_every(state_bytes: int, workers: int, fabric: tuple[float, float, float], horizon: int) -> int:
    """m, the steps between two reductions of the trigger's state on ``fabric``: the fewest
    whose reduction costs at most 5 % of their compute, ``⌈T(state) / (0.05·T_step)⌉``, and
    at most the horizon H (a round is checked at least once per H steps)."""
    gbps, latency_us, step_ms = fabric
    return every_from_seconds(sync_seconds(0, workers, gbps, latency_us, nbytes=state_bytes), step_ms, horizon)


def recalibrate(variance: float, round_steps: float, horizon: int) -> float:
    """Θ_{r+1} = min(H / H_r, 4) · Var_r (or · Ĥ_r, ``--theta-calibrate estimate``), H_r the
    round's clock (its steps under a constant rate); ∞ when there is no variance (nothing to
    average)."""
    if not variance > 0:
        return math.inf
    stretch = horizon / round_steps if round_steps > 0 else math.inf
    return min(stretch, MAX_STRETCH) * variance
