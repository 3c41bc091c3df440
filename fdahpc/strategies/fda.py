"""Federated Dynamic Averaging: synchronize only when the models have drifted apart.

Theologitis, Frangias, Anestis, Samoladas, Deligiannakis, "Communication-Efficient
Distributed Deep Learning via Federated Dynamic Averaging", EDBT 2025, arXiv 2405.20988.

Every local step each worker reduces a small state ``S_k`` computed from its drift
``u_k = w_k - w_t0``; every worker evaluates the same ``H(mean S_k)``, an over-estimate of
the model variance ``Var = mean ||u_k||^2 - ||mean u_k||^2``, and the full models are
averaged only when ``H > Θ``. The trigger is independent of the aggregation rule, so it
can drive a plain mean, FedAvgM, FedAdam or FedAdp alike.

- LinearFDA: ``S_k = (||u_k||^2, <ξ, u_k>)``, ``H = mean ||u||^2 - (mean <ξ,u>)^2``;
  a deterministic bound for any unit ξ (Cauchy–Schwarz). ξ points from the previous
  synchronized model to the last one, or is a seeded random unit vector until two
  synchronizations have happened.
- SketchFDA: ``S_k = (||u_k||^2, sk(u_k))`` with an AMS sketch (:mod:`fdahpc.sketch`),
  ``H = mean ||u||^2 - M2(mean sk(u)) / (1 + ε)``; holds with probability ≥ 1 - δ.

Θ = 0 is the synchronous limit: every step synchronizes, even when the sketch's noise
makes the estimate non-positive.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from ..comm import Communicator
from ..comm.base import Done, Request
from ..options import CALIBRATIONS, FDAOptions, SketchFDAOptions
from ..theta import (MEASURE, MEASURE_STEPS, ROUND_CAP, check_every, every_from_seconds, horizon_from_seconds,
                     horizon_steps, prior, recalibrate, sync_seconds)
from .base import BuildContext, Trigger, trigger

log = logging.getLogger("fdahpc")

if TYPE_CHECKING:  # fdahpc.sketch imports Numba: only the sketch trigger needs it, at its construction
    from ..sketch import AmsSketch

__all__ = ["LinearFDATrigger", "SketchFDATrigger", "exact_variance"]


def exact_variance(comm: Communicator, u: torch.Tensor) -> float:
    """Var = mean ||u_k||^2 - ||mean u_k||^2, with one full AllReduce (counted as evaluation)."""
    local = np.array([float(torch.dot(u, u))])
    comm.allreduce_mean_(local, "eval")
    mean_u = u.clone()
    comm.allreduce_mean_(mean_u, "eval")
    return float(local[0] - torch.dot(mean_u, mean_u))


class _FDATrigger(Trigger):
    """The part both variants share: drift, the one state AllReduce, the decision, records.

    ``lag=1`` (``--fda-lag 1``) starts the state's AllReduce without waiting for it and
    decides at the next step, from the state of the step before: the reduction overlaps
    one local step, and every decision is the blocking one, one step late.

    ``every=m`` (``--fda-every m``) reduces the state, and decides, only at steps that are
    multiples of m (with ``lag=1``: decides at the step after each of them): 1/m of the
    monitoring AllReduces. The estimate is computed from that step's drift, so at every
    checked step it is the same bound on the variance as with m = 1; between checks the
    variance is not watched and may pass Θ for up to m - 1 steps (FDA-Opt checks once
    per local epoch for the same reason). ``every=None``: 1, or with a ``fabric``
    (``--theta-fabric``) the cadence :func:`fdahpc.theta.check_every` prices for this
    trigger's state (at most ``horizon``).

    ``horizon`` (``--theta auto``, :mod:`fdahpc.theta`) re-calibrates Θ after every
    synchronization the trigger decided: Θ = min(horizon / H_r, 4) · Var_r, H_r the round's
    steps (a round of 2·horizon steps ends there; a horizon of one step syncs every step and
    reduces no state: Synchronous's schedule, see :mod:`fdahpc.theta`) and
    Var_r the exact variance at the sync, ``mean ||u_k||^2`` (this step's reduced state; with
    ``lag=1`` one 4-byte AllReduce more) minus ``||mean u_k||^2`` (from the rule's model
    AllReduce, :meth:`~.base.Rule.mean_drift_sq`). It starts from the Θ given (the prior).

    ``auto_steps`` (``--theta auto-once``) picks Θ itself: the first round has that fixed
    length (no monitoring traffic), and at its synchronization Θ becomes the exact model
    variance the round produced, ``mean ||u_k||^2 - ||w_new - w_t0||^2`` (one extra
    4-byte AllReduce, once). Later rounds end when the estimate passes it: rounds stay
    near that length while the drift grows as it did at the start and shorten when it
    grows faster (e.g. on skewed data), at any model size, learning rate or K.
    """

    needs_anchor = True
    theta_driven = True
    round_based = False  # rounds end when the workers' drifts say so
    _state: tuple[str, ...] = ("theta", "calibrating", "round_start", "trigger_step", "horizon", "every", "_probe",
                               "round_clock", "peak_lr")

    def __init__(self, comm: Communicator, dim: int, theta: float, *, state_len: int, lag: int = 0,
                 every: int | None = None, auto_steps: int | None = None, horizon: int | None = None,
                 fabric: tuple[float, float, float] | None = None, log_every: int = 1,
                 log_variance: bool = False, calibrate: str | None = None,
                 lr_at: Callable[[int], float] | None = None) -> None:
        # The options' checks, one wording for the command line, ModelAverager and this class.
        FDAOptions(theta="auto-once" if auto_steps is not None else theta, fda_lag=lag, fda_every=every,
                   fda_log_every=log_every)
        if calibrate not in (None, *CALIBRATIONS) or (calibrate is not None and horizon is None):
            raise ValueError(f"theta auto: calibrate is one of {', '.join(CALIBRATIONS)} and needs the round horizon, "
                             f"got {calibrate!r}")
        if horizon is not None and (horizon < 1 or auto_steps is not None):
            raise ValueError(f"theta auto: the round horizon must be >= 1 step (got {horizon}) and excludes auto-once")
        if auto_steps is not None and auto_steps < 1:
            raise ValueError(f"theta auto-once: the calibration round must be >= 1 step, got {auto_steps}; raise --theta-auto-epochs")
        if fabric is not None and horizon is None:
            raise ValueError("theta auto: a fabric sets the round horizon and the check cadence; give the horizon too")
        # --theta-fabric measure: (H, m) set from times taken in the first steps (_probe); until then the given
        # horizon and every step. --fda-every by hand always wins.
        self._probe: dict | None = self._new_probe(every) if fabric == MEASURE else None
        if every is None:  # by hand, else from the fabric's price of this trigger's state reduction, else every step
            every = 1 if fabric in (None, MEASURE) else check_every(4 * state_len, comm.world_size, fabric, horizon)
        self.comm = comm
        self.lag = lag
        self.every = every
        self.calibrating = auto_steps is not None
        self.auto_steps = auto_steps
        self.theta = float("inf") if self.calibrating else float(theta)
        self.horizon = horizon
        self.round_start = 0  # the trigger step of the last synchronization
        # theta auto's H_r: the round's steps, each counted at (its rate / the highest rate so far)^2 (fdahpc.theta)
        self.round_clock = 0.0
        self.lr_at = lr_at if horizon is not None else None
        self.peak_lr = 0.0
        self.trigger_step = 0
        self._sync_mean_sq: float | None = None  # theta auto: mean ||u_k||^2 at the sync being decided
        self.calibrate = calibrate or "variance"  # theta auto: Θ re-calibrated on the variance or on the estimate
        self._estimate: float | None = None  # the estimate of the last decision (theta auto's estimate calibration)
        self.log_every = log_every
        self.log_variance = log_variance
        self.state = torch.zeros(state_len, dtype=torch.float32)  # what goes on the wire, moved beside w
        self.state_bytes = 4 * state_len
        self._u: torch.Tensor | None = None  # drift scratch, allocated beside w on first use
        self._pending: Request | None = None  # lag 1: the state reduction in flight
        self._pending_variance: dict = {}  # lag 1 with --log-variance: the exact variance of that state's step
        self._mean_sq: torch.Tensor | None = None  # theta auto: mean ||u_k||^2 at the calibration sync
        if fabric not in (None, MEASURE):  # a stated fabric: what it prices, said once at the start
            gbps, latency_us, step_ms = fabric
            self._announce("stated", sync_seconds(dim, comm.world_size, gbps, latency_us),
                           sync_seconds(0, comm.world_size, gbps, latency_us, nbytes=4 * state_len), step_ms * 1e-3)
        elif fabric == MEASURE:
            self._say(f"theta auto: timing the model AllReduce, the state reduction and {MEASURE_STEPS} local steps "
                      f"before setting H and m (until then H = {horizon} steps, checked every step)")
        elif horizon is not None:  # no fabric: the horizon in epochs (--theta-round-epochs, default 1)
            self._say(f"theta auto: H = {horizon} steps from the round's epochs (no fabric given: add --theta-fabric "
                      f"measure to set H from the AllReduce's cost), m = {self.every}")

    def _say(self, line: str) -> None:
        if self.comm.is_root:
            log.info("%s", line)

    def _announce(self, source: str, sync_s: float, state_s: float, step_s: float) -> None:
        """One line on rank 0: the times the cadence was set from and the (H, m) they gave."""
        what = ("every step: Synchronous (a round of one step; no state reduced)" if self.horizon == 1 else
                f"H = {self.horizon} steps (a model AllReduce <= 10 % of a round's compute), m = {self.every} (the "
                f"state reduced every {self.every} step{'s' if self.every > 1 else ''}, <= 5 %)")
        self._say(f"theta auto, fabric {source}: model AllReduce {sync_s * 1e3:.3g} ms, state reduction "
                  f"{state_s * 1e3:.3g} ms, local step {step_s * 1e3:.3g} ms on K = {self.comm.world_size} -> {what}")

    def _allocate(self, w: torch.Tensor) -> None:
        self._u = torch.empty_like(w)
        self.state = self.state.to(w.device)

    def should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor, loss: float | None = None) -> bool:
        if self._u is None:
            self._allocate(w)
        if self._probe is None:
            return self._should_sync(step, w, anchor)
        probe = self._probe
        if probe["last"] is None:  # the first step: time the two collectives the fabric is priced by
            probe["sync_s"], probe["state_s"] = self._time_allreduce(self._u), self._time_allreduce(self.state)
        else:  # the local step since this trigger's last call (a model sync in between excluded: on_sync)
            probe["steps"].append(time.perf_counter() - probe["last"])
            if len(probe["steps"]) == MEASURE_STEPS:
                self._set_cadence(probe)
        sync = self._should_sync(step, w, anchor)
        if self._probe is not None:
            probe["last"] = time.perf_counter()
        return sync

    @staticmethod
    def _new_probe(every: int | None) -> dict:
        """--theta-fabric measure's timing state: the --fda-every given (None: from the times), the
        local steps timed so far, and when this trigger's last call returned."""
        return {"every": every, "steps": [], "last": None}

    def _time_allreduce(self, buf: torch.Tensor, repeats: int = 3) -> float:
        """The fastest of ``repeats`` AllReduces of a buffer like ``buf`` (zeros), in seconds."""
        scratch, best = torch.zeros_like(buf), math.inf
        for _ in range(repeats):
            start = time.perf_counter()
            self.comm.allreduce_mean_(scratch, "monitor")
            if scratch.is_cuda:
                torch.cuda.synchronize(scratch.device)
            best = min(best, time.perf_counter() - start)
        return best

    def _set_cadence(self, probe: dict) -> None:
        """--theta-fabric measure, after MEASURE_STEPS steps: the ranks' mean times (each rank's
        median step) set H and m."""
        step = float(np.median(probe["steps"]))
        times = torch.tensor([probe["sync_s"], probe["state_s"], step], dtype=torch.float64)
        sync_s, state_s, step_s = (float(x) for x in self.comm.allreduce_mean_(times, "monitor"))
        self.horizon = horizon_from_seconds(sync_s, step_s * 1e3)
        self.every = probe["every"] or every_from_seconds(state_s, step_s * 1e3, self.horizon)
        self.record("fda_fabric", sync_seconds=sync_s, state_seconds=state_s, step_seconds=step_s, horizon=self.horizon,
                    every=self.every)
        self._probe = None
        self._announce(f"measured in steps 1-{MEASURE_STEPS + 1}", sync_s, state_s, step_s)

    def _should_sync(self, step: int, w: torch.Tensor, anchor: torch.Tensor) -> bool:
        self.trigger_step = step
        if self.calibrating:
            return self._end_of_calibration(step, w, anchor)
        if self.horizon == 1:  # theta auto's synchronous limit: every step ends its round, nothing to estimate
            return True
        if self.horizon is not None:
            self.round_clock += self._clock_tick(step)
            if self.round_clock >= ROUND_CAP * self.horizon:
                return self._end_of_round(w, anchor)
        checked = step % self.every == 0
        if self.lag == 0:
            if not checked:
                return False
            self._reduce(w, anchor).wait()
            sync = self._decide(step, {"variance": exact_variance(self.comm, self._u)} if self.log_variance else {})
            if sync and self.horizon is not None:
                self._sync_mean_sq = float(self.state[0])  # this step's mean ||u_k||^2, reduced already
            return sync
        if self._pending is not None:  # the state of the step before, reduced meanwhile
            self._pending.wait()
            self._pending = None
            if self._decide(step, self._pending_variance):
                if self.horizon is not None:  # the state is a step old: this step's mean ||u_k||^2, 4 bytes
                    self._sync_mean_sq = float(self._reduce_mean_sq(w, anchor)[0])
                return True  # the drift restarts from zero: no state of this step to send
        if not checked:
            return False
        self._pending = self._reduce(w, anchor)
        if self.log_variance:
            self._pending_variance = {"variance": exact_variance(self.comm, self._u)}
        return False

    def _clock_tick(self, step: int) -> float:
        """What ``step`` adds to the round's clock: (η_step / η_max)², η_max the highest rate
        so far (1 without a learning rate to read, or while the rate has not fallen)."""
        if self.lr_at is None:
            return 1.0
        rate = float(self.lr_at(step))
        self.peak_lr = max(self.peak_lr, rate)
        return (rate / self.peak_lr) ** 2 if rate < self.peak_lr else 1.0

    def _reduce(self, w: torch.Tensor, anchor: torch.Tensor) -> Request:
        """Start the AllReduce of this step's state ``S_k`` (computed where w lives)."""
        u = torch.sub(w, anchor, out=self._u)
        return self.comm.iallreduce_mean_(self.local_state(u), "monitor")

    def _decide(self, step: int, extra: dict) -> bool:
        # Only the reduced state (8 bytes for LinearFDA, 5 KB for SketchFDA) comes to the host.
        h = self._estimate = self.estimate(self.state.cpu().numpy())
        if step % self.log_every == 0:
            self.record("fda", h=h, **extra)
        return h > self.theta or self.theta == 0.0

    def _end_of_calibration(self, step: int, w: torch.Tensor, anchor: torch.Tensor) -> bool:
        if step < self.auto_steps:
            return False
        self._mean_sq = self._reduce_mean_sq(w, anchor)
        return True

    def _reduce_mean_sq(self, w: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """mean_k ||w_k - anchor||^2 now: one 4-byte AllReduce, counted as monitoring."""
        u = torch.sub(w, anchor, out=self._u)
        return self.comm.allreduce_mean_(torch.dot(u, u).reshape(1), "monitor")

    def on_sync(self, old_anchor: torch.Tensor, new_anchor: torch.Tensor) -> None:
        if self._pending is not None:  # a synchronization the trigger did not call: drop the stale state
            self._pending.wait()
            self._pending = None
        if self.horizon is not None:
            self._recalibrate(old_anchor, new_anchor)
        if self._probe is not None and self._probe["last"] is not None:  # the sync's AllReduce is not compute
            self._probe["last"] = time.perf_counter()
        if self.calibrating and self._mean_sq is not None:
            variance = float(self._mean_sq[0]) - self.mean_drift_sq(old_anchor, new_anchor)
            # K = 1 has no variance to bound: nothing to average, never synchronize again.
            self.theta = variance if variance > 0 else float("inf")
            self.calibrating, self._mean_sq = False, None
            self.record("fda_auto", theta=self.theta, calibration_steps=self.auto_steps)

    def _end_of_round(self, w: torch.Tensor, anchor: torch.Tensor) -> bool:
        """theta auto's round cap (FDA-Opt's E_max): sync now; this step's mean ||u_k||^2 in 4 bytes."""
        if self._pending is not None:  # a state in flight is stale once the round ends
            self._pending.wait()
            self._pending = None
        if self.calibrate == "estimate":  # this step's whole state: its estimate, and mean ||u_k||^2 as its first entry
            self._reduce(w, anchor).wait()
            self._estimate = self.estimate(self.state.cpu().numpy())
            self._sync_mean_sq = float(self.state[0])
        else:
            self._sync_mean_sq = float(self._reduce_mean_sq(w, anchor)[0])
        return True

    def _recalibrate(self, old_anchor: torch.Tensor, new_anchor: torch.Tensor) -> None:
        """theta auto after a synchronization: Θ = horizon / H_r · Var_r (H_r the round's clock), or with
        ``calibrate="estimate"`` horizon / H_r · Ĥ_r, the estimate that ended the round (at lag 1
        the state a step old that decided it; at the round cap this step's). A sync the trigger
        did not decide (a warm-up step) only restarts the round."""
        if self._sync_mean_sq is not None:
            variance = self._sync_mean_sq - self.mean_drift_sq(old_anchor, new_anchor)
            on = variance  # no variance (one worker): nothing to average, Θ = ∞ whatever the estimate
            if self.calibrate == "estimate" and variance > 0 and self._estimate > 0:
                on = self._estimate
            self.theta = recalibrate(on, self.round_clock, self.horizon)
            self.record("fda_auto", theta=self.theta, round_steps=self.trigger_step - self.round_start,
                        round_clock=self.round_clock, variance=variance,
                        **({"estimate": self._estimate} if self.calibrate == "estimate" else {}))
        self._sync_mean_sq = None
        self.round_start = self.trigger_step
        self.round_clock = 0.0

    def finish(self) -> None:
        """Complete a state reduction still in flight (collective under ``lag=1``)."""
        if self._pending is not None:
            self._pending.wait()
            self._pending = Done()  # reduced, not yet decided on

    def local_state(self, u: torch.Tensor) -> torch.Tensor:
        """``S_k`` of drift ``u`` (float32, what goes on the wire, on ``u``'s device); reuses one buffer."""
        self.state[0] = torch.dot(u, u)
        self._fill_state(u, self.state[1:])
        return self.state

    def state_dict(self) -> dict[str, Any]:
        self.finish()
        return {**super().state_dict(), "reduced_state": self.state.clone() if self._pending is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # checkpoints from before --theta-fabric measure lack the cadence: the options' own stays; from before the
        # learning rate's clock, the round's steps are its clock (a constant rate's) and the peak is re-learned
        clock = state.get("trigger_step", 0) - state.get("round_start", 0)
        super().load_state_dict({"horizon": self.horizon, "every": self.every, "_probe": self._probe,
                                 "round_clock": float(clock), "peak_lr": 0.0, **state})
        if self._probe is not None:  # the timing restarts with the resumed job (a probe's last call was another process's)
            self._probe = self._new_probe(self._probe["every"])
        reduced = state.get("reduced_state")
        self._pending = None
        if reduced is not None:
            self.state = reduced.to(self.state.device)
            self._pending = Done()

    @staticmethod
    def keywords(ctx: BuildContext, o: FDAOptions) -> dict[str, Any]:
        """The keyword arguments both variants take from their options: Θ (a number; ``auto``:
        the prior and the round horizon in steps; ``auto-once``: its calibration round's
        steps), the lag, the check interval and the records."""
        auto_steps = horizon = None
        theta = o.theta
        stated = o.theta_fabric if o.theta_fabric != MEASURE else None  # measured: the default horizon until then
        if o.auto and ctx.steps_per_epoch is None and stated is None:
            raise ValueError(f"theta {o.theta}: its round is counted in epochs and needs the epoch length; give "
                             "steps_per_epoch= (or a number for theta)")
        if o.theta == "auto-once":
            auto_steps, theta = max(1, round(o.calibration_epochs * ctx.steps_per_epoch)), 0.0
        elif o.theta == "auto":
            horizon = horizon_steps(ctx.steps_per_epoch or 1, ctx.dim, ctx.comm.world_size, o.theta_round_epochs, stated)
            theta = prior(ctx.dim)
        return dict(theta=theta, lag=o.fda_lag, every=o.fda_every, auto_steps=auto_steps, horizon=horizon,
                    fabric=o.theta_fabric if o.theta == "auto" else None, log_every=o.fda_log_every,
                    log_variance=o.log_variance, calibrate=o.theta_calibrate, lr_at=ctx.lr_at)


@trigger("linear")
class LinearFDATrigger(_FDATrigger):
    """8 bytes per step: the squared drift and its projection on ξ."""

    Options = FDAOptions
    _state = _FDATrigger._state + ("xi", "syncs_seen")

    def __init__(self, comm: Communicator, dim: int, theta: float, *, seed: int = 0, **kw) -> None:
        super().__init__(comm, dim, theta, state_len=2, **kw)
        gen = torch.Generator().manual_seed(seed)
        self.xi = torch.randn(dim, generator=gen, dtype=torch.float32)
        self.xi /= torch.linalg.vector_norm(self.xi)
        self.syncs_seen = 0

    @classmethod
    def build(cls, ctx: BuildContext, options: FDAOptions) -> "LinearFDATrigger":
        return cls(ctx.comm, ctx.dim, seed=ctx.seed, **cls.keywords(ctx, options))

    def _fill_state(self, u: torch.Tensor, out: torch.Tensor) -> None:
        if self.xi.device != u.device:
            self.xi = self.xi.to(u.device)
        out[0] = torch.dot(self.xi, u)

    @staticmethod
    def estimate(state: np.ndarray) -> float:
        """H(S̄) = mean ||u||^2 - (mean <ξ, u>)^2, from the averaged state."""
        sq_norm, proj = float(state[0]), float(state[1])
        return sq_norm - proj * proj

    def on_sync(self, old_anchor: torch.Tensor, new_anchor: torch.Tensor) -> None:
        super().on_sync(old_anchor, new_anchor)
        # ξ needs two synchronized models; the initial model is not one of them.
        self.syncs_seen += 1
        if self.syncs_seen < 2:
            return
        direction = new_anchor - old_anchor
        norm = torch.linalg.vector_norm(direction)
        if norm > 0:
            torch.div(direction, norm, out=self.xi)


@trigger("sketch")
class SketchFDATrigger(_FDATrigger):
    """4 + 4·l·m bytes per step: the squared drift and an AMS sketch of the drift."""

    Options = SketchFDAOptions
    _state = _FDATrigger._state + ("eps",)

    def __init__(self, comm: Communicator, dim: int, theta: float, *, eps: float | None = None,
                 sketcher: AmsSketch | None = None, **kw) -> None:
        """``sketcher``: an existing AmsSketch of dimension ``dim`` to share; without one, an
        AmsSketch of its own defaults (seed 0)."""
        from ..sketch import AmsSketch, estimate_sq_norm

        if sketcher is None:
            sketcher = AmsSketch(dim)
        elif sketcher.dim != dim:
            raise ValueError(f"SketchFDATrigger: the sketcher hashes {sketcher.dim} coordinates, the model has {dim}")
        rows, cols = sketcher.rows, sketcher.cols
        super().__init__(comm, dim, theta, state_len=1 + rows * cols, **kw)
        SketchFDAOptions(sketch_eps=eps)  # its check
        self.eps = 1.0 / np.sqrt(cols) if eps is None else float(eps)
        self.sketcher = sketcher
        self._sk = np.empty((rows, cols), dtype=np.float64)
        self._sq_norm = estimate_sq_norm

    @classmethod
    def needs_sketch(cls, options) -> bool:
        return True

    @classmethod
    def build(cls, ctx: BuildContext, options: SketchFDAOptions) -> "SketchFDATrigger":
        return cls(ctx.comm, ctx.dim, sketcher=ctx.sketch, eps=options.sketch_eps, **cls.keywords(ctx, options))

    def _fill_state(self, u: torch.Tensor, out: torch.Tensor) -> None:
        if u.device.type == "cpu":  # the Numba kernel
            self.sketcher.sketch_into(u, self._sk)
            out.copy_(torch.from_numpy(self._sk).ravel())
        else:
            out.copy_(self.sketcher.sketch_torch(u).ravel())

    def estimate(self, state: np.ndarray) -> float:
        """H(S̄) = mean ||u||^2 - M2(mean sk(u)) / (1 + ε), from the averaged state."""
        mean_sk = state[1:].reshape(self._sk.shape).astype(np.float64)
        return float(state[0]) - self._sq_norm(mean_sk) / (1.0 + self.eps)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "sketch": self.sketcher.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.sketcher.load_state_dict(state["sketch"])
