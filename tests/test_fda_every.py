"""--fda-every m: the FDA state is reduced (and the decision taken) only every m steps. At
the checked steps the estimate is the one of m = 1, bit for bit, and stays a bound on the
exact variance; the monitoring AllReduces are steps/m. In one process and under mpiexec."""

import numpy as np
import pytest
import torch

from conftest import run_python
from fdahpc.config import TrainConfig
from fdahpc.run import resolve
from fdahpc.strategies import build_strategy, strategy_options

D = 300


def drive(comm, strategy, steps, **options):
    """Rank-dependent random drifts; (sync steps, {step: h}, {step: exact variance}, monitoring bytes sent)."""
    before = comm.bytes_sent["monitor"]
    w = torch.zeros(D)
    strat = build_strategy(strategy_options(strategy, None, options), comm, w, steps_per_epoch=10, num_samples=10)
    strat.reset()
    records = {}
    strat.sink = lambda name, value: records.setdefault(name, []).append(value)
    synced = []
    for t in range(1, steps + 1):
        g = np.random.default_rng([comm.rank, t])
        w.add_(torch.from_numpy(g.normal(size=D).astype(np.float32)) * 0.1 + 0.02 * (comm.rank + 1))
        if strat.after_step():
            synced.append(t)
    strat.finish()
    h = dict(zip(records.get("fda/step", []), records.get("fda/h", [])))
    var = dict(zip(records.get("fda/step", []), records.get("fda/variance", [])))
    return synced, h, var, comm.bytes_sent["monitor"] - before


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["linearfda", "sketchfda"])
@pytest.mark.parametrize("lag", [0, 1])
def test_checked_steps_keep_the_estimate_and_the_bound(comm, strategy, lag):
    extra = {}
    _, h1, var1, one = drive(comm, strategy, 24, theta=1e9, fda_lag=lag, log_variance=True, **extra)
    synced, h5, var5, five = drive(comm, strategy, 24, theta=1e9, fda_lag=lag, fda_every=5, log_variance=True, **extra)
    assert synced == []
    # Recorded (decided) at the checked steps only; with lag 1 one step after each.
    assert sorted(h5) == [s + lag for s in (5, 10, 15, 20) if s + lag <= 24]
    for s in h5:
        assert h5[s] == h1[s]  # the same estimate as checking every step, bit for bit
        assert var5[s] == var1[s]
        if comm.world_size > 1:
            # LinearFDA is a deterministic bound; the sketch's holds w.p. 1 - δ (these seeds: always)
            assert h5[s] >= var5[s] * (1 - 1e-5), (s, h5[s], var5[s])
    # The monitoring AllReduces: steps/m of them (state bytes each), against every step.
    state = 8 if strategy == "linearfda" else 4 + 4 * 5 * 250
    assert (one, five) == (24 * state, 4 * state)


@pytest.mark.distributed
@pytest.mark.parametrize("lag", [0, 1])
def test_decisions_wait_for_the_checked_step(comm, lag):
    """A Θ that every-step checking passes at some step s syncs at the next multiple of m
    (plus the lag) whose estimate passes it."""
    _, h1, _, _ = drive(comm, "linearfda", 30, theta=1e9)
    theta = h1[7] * 0.999 if h1[7] > 0 else 1e-12  # passed by step 7 (the drift grows steadily)
    first = min(s for s in h1 if h1[s] > theta)
    synced, _, _, _ = drive(comm, "linearfda", 30, theta=theta, fda_lag=lag, fda_every=4)
    checked = min(s for s in range(4, 31, 4) if h1[s] > theta)
    assert checked >= first
    assert synced[0] == checked + lag


def test_fda_every_refusals(tmp_path):
    with pytest.raises(ValueError, match=r"--fda-every: --strategy fedavg does not read it \(read by --strategy linearfda, sketchfda or --trigger linear, sketch\)"):
        resolve(TrainConfig(strategy="fedavg", fda_every=2))
    with pytest.raises(ValueError, match="--fda-every: only used with --mode sync"):
        resolve(TrainConfig(mode="semiasync", fda_every=3))
    from fdahpc import ModelAverager

    avg = ModelAverager(torch.nn.Linear(3, 1), None, "linearfda", theta=1e9, fda_every=3)
    for _ in range(7):
        avg.step()
    assert avg.comm.bytes_sent["monitor"] == 2 * 8
    out = tmp_path / "r.h5"
    proc = run_python(["-m", "fdahpc.train", "--strategy", "linearfda", "--fda-every", "0", "--out", str(out)], timeout=120)
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip().splitlines() == [
        "fdahpc.train: error: --fda-every 0: must be an integer >= 1 (1 checks the variance every step), e.g. 10"]


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["linearfda", "sketchfda"])
def test_the_fabric_sets_the_cadence_unless_given(comm, strategy):
    """--theta auto --theta-fabric without --fda-every: the state is reduced every m steps, m what
    fdahpc.theta.check_every prices for this trigger's state on that fabric; --fda-every wins."""
    from fdahpc.theta import check_every, horizon_steps

    fabric = (1.0, 10_000.0, 5.0)
    w = torch.zeros(D)
    opts = dict(theta="auto", theta_fabric="1,10000,5")
    trig = build_strategy(strategy_options(strategy, None, opts), comm, w, steps_per_epoch=10, num_samples=10).trigger
    assert trig.horizon == horizon_steps(10, D, comm.world_size, fabric=fabric)
    assert trig.every == check_every(trig.state_bytes, comm.world_size, fabric, trig.horizon)
    assert trig.every == (1 if comm.world_size == 1 else trig.horizon)  # a 10 ms latency: once per horizon
    trig = build_strategy(strategy_options(strategy, None, dict(opts, fda_every=2)), comm, w, steps_per_epoch=10,
                          num_samples=10).trigger
    assert trig.every == 2
    plain = build_strategy(strategy_options(strategy, None, dict(theta="auto")), comm, w, steps_per_epoch=10,
                           num_samples=10).trigger
    assert plain.every == 1


@pytest.mark.distributed
@pytest.mark.parametrize("given", [None, 3])
def test_a_measured_fabric_sets_the_cadence_after_the_timed_steps(comm, given):
    """--theta-fabric measure: the first MEASURE_STEPS steps aim at the default horizon and check
    every step (or every --fda-every); then H and m come from the recorded times, the same on
    every rank, and travel with a checkpoint."""
    from fdahpc.theta import MEASURE_STEPS, every_from_seconds, horizon_from_seconds

    w = torch.zeros(D)
    opts = dict(theta="auto", theta_fabric="measure", **({"fda_every": given} if given else {}))
    strat = build_strategy(strategy_options("linearfda", None, opts), comm, w, steps_per_epoch=10, num_samples=10)
    strat.reset()
    records = {}
    strat.sink = lambda name, value: records.setdefault(name, []).append(value)
    trig = strat.trigger
    assert (trig.horizon, trig.every) == (10, given or 1)
    for t in range(1, MEASURE_STEPS + 2):
        w.add_(0.01 * (comm.rank + 1))
        strat.after_step()
        if t <= MEASURE_STEPS:
            assert trig.every == (given or 1)
    sync_s, state_s, step_s = (records[f"fda_fabric/{n}_seconds"][0] for n in ("sync", "state", "step"))
    assert step_s > 0 and sync_s >= 0 and state_s >= 0
    assert trig.horizon == horizon_from_seconds(sync_s, step_s * 1e3) == records["fda_fabric/horizon"][0]
    assert trig.every == (given or every_from_seconds(state_s, step_s * 1e3, trig.horizon))
    same = comm.allgather_obj((trig.horizon, trig.every, step_s))
    assert all(x == same[0] for x in same)
    state = trig.state_dict()
    fresh = build_strategy(strategy_options("linearfda", None, opts), comm, torch.zeros(D), steps_per_epoch=10,
                           num_samples=10).trigger
    fresh.load_state_dict(state)
    assert (fresh.horizon, fresh.every, fresh._probe) == (trig.horizon, trig.every, None)
