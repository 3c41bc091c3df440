"""--theta auto: Θ_0 = 4e-5·d, then after every synchronization Θ = H/H_r · Var_r (the exact
variance of the round, scaled to a round of H steps). The pieces against hand numbers, and
the trigger's re-calibration against a hand computation of the variance (rank-dependent
drifts, in one process and under mpiexec), with the mean, a server optimizer and the lag."""

import math

import numpy as np
import pytest
import torch

from conftest import train_cli
from fdahpc.config import TrainConfig
from fdahpc.run import resolve
from fdahpc.strategies import build_strategy, strategy_options
from fdahpc.theta import check_every, horizon_steps, prior, recalibrate, sync_seconds

D = 1000


def test_prior_horizon_and_recalibration_by_hand():
    assert prior(61706) == pytest.approx(2.46824)  # LeNet-5: inside the tuned grid 2..64
    assert horizon_steps(469, 61706, 4) == 469  # one epoch by default
    assert horizon_steps(469, 61706, 4, round_epochs=2.5) == 1172
    # 10 Gb/s, 25 µs, 20 ms steps, K = 4: 2·2·25 µs + 1.5·246 824 B·0.8 ns = 0.396 ms <= 10 % of one step
    assert sync_seconds(61706, 4, 10, 25) == pytest.approx(1e-4 + 1.5 * 246824 * 8e-10)
    assert horizon_steps(469, 61706, 4, fabric=(10, 25, 20)) == 1
    # 1 Gb/s across sites (10 ms), 5 ms steps: 40 ms + 2.96 ms = 42.96 ms, / 0.5 ms -> 86 steps
    assert horizon_steps(469, 61706, 4, fabric=(1, 10_000, 5)) == 86
    assert horizon_steps(469, 61706, 1, fabric=(1, 10_000, 5)) == 1  # one rank never syncs over a wire
    # The check cadence: LinearFDA's 8 bytes on the 1 Gb/s / 10 ms link cost 40 ms (latency), 160x 5 % of a 5 ms
    # step: checked once per horizon (86), not every step.
    assert check_every(8, 4, (1, 10_000, 5), 86) == 86
    assert check_every(8, 4, (1, 10_000, 100), 5) == 5  # 40 ms / 5 ms -> 9, capped at H
    # 10 Gb/s, 25 µs, 1 ms steps: 100 µs + 9.6 ns over 50 µs -> 3 steps (H = 4)
    assert horizon_steps(469, 61706, 4, fabric=(10, 25, 1)) == 4 and check_every(8, 4, (10, 25, 1), 4) == 3
    # 1 Gb/s, 2 µs, 1 ms: LinearFDA 8 µs + 96 ns -> every step; SketchFDA's 5 004 B, 8 µs + 60 µs -> every 2nd
    assert check_every(8, 4, (1, 2, 1), 100) == 1 and check_every(4 * (1 + 5 * 250), 4, (1, 2, 1), 100) == 2
    assert check_every(8, 1, (1, 10_000, 5), 1) == 1  # one rank: nothing on a wire
    assert recalibrate(0.5, 10, 40) == 2.0  # (40/10)·0.5
    assert recalibrate(0.5, 20, 40) == 1.0
    assert recalibrate(0.5, 2, 40) == 2.0  # a 2-step round: its rate stretched 4x at most, not 20x
    assert recalibrate(0.0, 10, 40) == math.inf and recalibrate(-1e-9, 3, 4) == math.inf


def drive(comm, strategy, steps, **options):
    """Rank k's model moves 0.01·(k+1) along the first coordinate every step: a round of s
    steps ends with drifts u_k = 0.01·(k+1)·s·e_0, so Var = 1e-4·s²·(K²−1)/12 exactly."""
    w = torch.zeros(D)
    strat = build_strategy(strategy_options(strategy, options.pop("trigger", None), options), comm, w,
                           steps_per_epoch=10, num_samples=10)
    strat.reset()
    records = {}
    strat.sink = lambda name, value: records.setdefault(name, []).append(value)
    monitor0 = comm.bytes_sent["monitor"]
    assert strat.trigger.theta == pytest.approx(4e-5 * D)  # the prior, before any round
    for _ in range(steps):
        w[0] += 0.01 * (comm.rank + 1)
        strat.after_step()
    strat.finish()
    return strat, records, comm.bytes_sent["monitor"] - monitor0


@pytest.mark.distributed
@pytest.mark.parametrize("strategy,lag", [("linearfda", 0), ("sketchfda", 0), ("linearfda", 1), ("fedadam", 0)])
def test_recalibration_matches_the_hand_computed_variance(comm, strategy, lag):
    k = comm.world_size
    extra = dict(trigger="linear", server_lr=0.01) if strategy == "fedadam" else {}
    strat, rec, monitor = drive(comm, strategy, 60, theta="auto", theta_round_epochs=2, fda_lag=lag, **extra)
    horizon = 20  # 2 epochs of 10 steps
    syncs = rec.get("sync/step", [])
    if k == 1 and strategy == "sketchfda":  # one rank: the sketch's estimate stays below ε·||u||² < the prior,
        assert syncs == [40]  # so the round cap 2H ends the round, and with no variance Θ = ∞
        assert rec["fda_auto/theta"] == [math.inf]
        assert monitor == 59 * strat.trigger.state_bytes + 4  # the capped step reduces 4 bytes instead of its state
        return
    assert syncs, "the prior 0.04 is passed within 60 steps"
    assert rec["fda_auto/step"] == syncs  # one re-calibration per synchronization
    assert rec["fda_auto/round_steps"] == np.diff([0] + syncs).tolist()
    assert rec["fda_auto/round_clock"] == rec["fda_auto/round_steps"]  # no learning rate read: one per step
    for s, var, theta in zip(rec["fda_auto/round_steps"], rec["fda_auto/variance"], rec["fda_auto/theta"]):
        exact = 1e-4 * s * s * (k * k - 1) / 12
        assert var == pytest.approx(exact, rel=1e-4, abs=1e-9)
        assert theta == (math.inf if k == 1 else pytest.approx(min(horizon / s, 4) * exact, rel=1e-4))
    if k == 1:
        assert len(syncs) == 1  # no variance on one rank: Θ = ∞ after the first round
    # The variance costs nothing at lag 0 (this step's state holds mean ||u||²); at lag 1 one float per sync.
    state = strat.trigger.state_bytes
    reductions = 60 - (len(syncs) if lag else 0)
    assert monitor == reductions * state + lag * 4 * len(syncs)
    # Θ and the round's start are checkpoint state.
    saved = strat.trigger.state_dict()
    assert saved["theta"] == strat.trigger.theta and saved["round_start"] == syncs[-1]


@pytest.mark.distributed
@pytest.mark.parametrize("lag", [0, 1])
def test_a_falling_rate_slows_the_rounds_clock(comm, lag):
    """Under a learning rate that falls, a step adds (η/η_max)² to the round's clock, η_max the
    highest rate so far (a warm-up, rising, adds 1 per step), and Θ = min(H / clock, 4) · Var.
    With drifts proportional to the rate (rank k moves 0.01·(k+1)·η per step), rounds at the
    peak last about H steps and rounds at half the rate about 4H, where Θ re-calibrated on the
    round's steps would have held them near H. The round cap 2H is on the clock too."""
    k, horizon, steps = comm.world_size, 20, 300

    def lr_at(step):
        return step / 5 if step <= 5 else 1.0 if step <= 60 else 0.5  # warm-up, held, halved from step 61

    w = torch.zeros(D)
    options = dict(theta="auto", theta_round_epochs=2, fda_lag=lag)
    strat = build_strategy(strategy_options("linearfda", None, options), comm, w, steps_per_epoch=10,
                           num_samples=10, lr_at=lr_at)
    strat.reset()
    rec = {}
    strat.sink = lambda name, value: rec.setdefault(name, []).append(value)
    for step in range(1, steps + 1):
        w[0] += 0.01 * (comm.rank + 1) * lr_at(step)
        strat.after_step()
    strat.finish()
    syncs = rec["sync/step"]
    for start, end, clock, var, theta in zip([0] + syncs, syncs, rec["fda_auto/round_clock"], rec["fda_auto/variance"],
                                             rec["fda_auto/theta"]):
        assert clock == pytest.approx(sum(1.0 if t <= 60 else 0.25 for t in range(start + 1, end + 1)))
        moved = sum(lr_at(t) for t in range(start + 1, end + 1))  # Var = 1e-4·(Σ η)²·(K²−1)/12
        assert var == pytest.approx(1e-4 * moved ** 2 * (k * k - 1) / 12, rel=1e-4, abs=1e-9)
        assert theta == (math.inf if k == 1 else pytest.approx(min(horizon / clock, 4) * var, rel=1e-6))
    if k == 1:  # no variance: Θ = ∞ after the first round; the cap ends each later one at a clock of exactly 2H
        assert rec["fda_auto/round_clock"][1:] and set(rec["fda_auto/round_clock"][1:]) == {2 * horizon}
        assert syncs[-1] - syncs[-2] == 4 * 2 * horizon  # 160 steps at half the rate
        return
    lengths = np.diff([0] + syncs)
    at_peak = [n for n, end in zip(lengths, syncs) if 25 < end <= 60]
    halved = [n for n, end in zip(lengths, syncs) if end - n >= 60]  # rounds wholly at rate 0.5
    # These drifts are straight lines, so the variance grows as the square of a round's steps, not linearly as
    # the rule reads it: each round moves the length L to √(H'·L), H' = 4H here, and the rounds approach 4H.
    assert len(halved) >= 3 and max(at_peak) <= 1.5 * horizon, (syncs, lengths)
    assert all(a < b for a, b in zip(halved, halved[1:])) and halved[0] > 1.5 * horizon and halved[-1] >= 3 * horizon
    assert strat.trigger.state_dict()["peak_lr"] == 1.0


@pytest.mark.distributed
@pytest.mark.parametrize("strategy,lag", [("linearfda", 0), ("sketchfda", 0), ("linearfda", 1)])
def test_estimate_calibration_scales_the_estimate_that_ended_the_round(comm, strategy, lag):
    """--theta-calibrate estimate: Θ_{r+1} = min(H/H_r, 4) · Ĥ_r, Ĥ_r the trigger's estimate that
    decided the sync (the logged ``fda/h`` of that step; at lag 1 from the state a step old), for the same
    drifts as above; the variance is still logged beside it."""
    k = comm.world_size
    strat, rec, monitor = drive(comm, strategy, 60, theta="auto", theta_round_epochs=2, fda_lag=lag,
                                theta_calibrate="estimate")
    syncs, horizon = rec.get("sync/step", []), 20
    if k == 1:  # no variance: Θ = ∞ after the first round, whatever the estimate; then the cap 2H ends each
        # round, and its step reduces the trigger's whole state (its estimate) where the variance takes 4 bytes
        strat, rec, monitor = drive(comm, strategy, 110, theta="auto", theta_round_epochs=2, fda_lag=lag,
                                    theta_calibrate="estimate")
        syncs = rec["sync/step"]
        assert set(rec["fda_auto/theta"]) == {math.inf} and np.diff(syncs[1:]).tolist() == [40] * (len(syncs) - 2)
        assert monitor == (110 - lag * len(syncs[:1])) * strat.trigger.state_bytes + lag * 4 * len(syncs[:1])
        return
    h_at = dict(zip(rec["fda/step"], rec["fda/h"]))
    assert syncs and rec["fda_auto/step"] == syncs
    for step, s, est, var, theta in zip(syncs, rec["fda_auto/round_steps"], rec["fda_auto/estimate"],
                                        rec["fda_auto/variance"], rec["fda_auto/theta"]):
        assert est == h_at[step]  # the estimate that crossed the last Θ (logged at the step it decided)
        assert theta == pytest.approx(min(horizon / s, 4) * est, rel=1e-6)
        assert var == pytest.approx(1e-4 * s * s * (k * k - 1) / 12, rel=1e-4, abs=1e-9)
    assert all(t > 0 for t in rec["fda_auto/theta"])
    with pytest.raises(ValueError, match="--theta-calibrate: what --theta auto re-calibrates on"):
        resolve(TrainConfig(strategy="linearfda", theta=1.0, theta_calibrate="estimate"))
    with pytest.raises(ValueError, match="--theta-calibrate 'bound': unknown; choose one of variance, estimate"):
        resolve(TrainConfig(strategy="linearfda", theta="auto", theta_calibrate="bound"))


def test_theta_auto_options():
    cfg = TrainConfig(strategy="linearfda", theta="auto", theta_fabric="1,10000,5")
    assert cfg.theta == "auto" and cfg.theta_fabric == "1,10000,5"
    assert TrainConfig(strategy="sketchfda", theta="AUTO-once").theta == "auto-once"
    for bad, msg in [(dict(theta="auto", theta_auto_epochs=2), "--theta-auto-epochs: the calibration round of --theta auto-once"),
                     (dict(theta=1.0, theta_round_epochs=2), "--theta-round-epochs: sets the round horizon of --theta auto"),
                     (dict(theta="auto", theta_fabric="10,25"), "--theta-fabric 10,25: give bandwidth"),
                     (dict(theta="auto", theta_fabric="1,2,3", theta_round_epochs=1), "both set the round horizon")]:
        with pytest.raises(ValueError, match=msg):
            resolve(TrainConfig(strategy="linearfda", **bad))


def test_model_averager_takes_theta_auto():
    from fdahpc import ModelAverager
    from fdahpc.comm import LocalCommunicator

    avg = ModelAverager(torch.nn.Linear(10, 10), LocalCommunicator(), "linearfda", theta="auto", steps_per_epoch=5,
                        theta_round_epochs=2)
    assert avg.strategy.trigger.horizon == 10 and avg.strategy.trigger.theta == pytest.approx(4e-5 * 110)
    # The fabric alone sets the horizon: no epoch length needed.
    avg = ModelAverager(torch.nn.Linear(10, 10), LocalCommunicator(), "sketchfda", theta="auto", theta_fabric="1,10000,5")
    assert avg.strategy.trigger.horizon == 1  # one rank: no AllReduce to amortize
    with pytest.raises(ValueError, match="theta auto-once: its round is counted in epochs"):
        ModelAverager(torch.nn.Linear(10, 10), LocalCommunicator(), "linearfda", theta="auto-once")


def test_a_tuning_free_run_says_what_it_decided(tmp_path):
    """One line at the start: the times the fabric gave (stated here) and the H and m they set;
    with a fabric whose AllReduce a step hides, 'every step: Synchronous'."""
    common = ["--strategy", "linearfda", "--theta", "auto", "--max-steps", "3", "--dataset", "mnist5k"]
    slow = train_cli(tmp_path / "slow.h5", *common, "--theta-fabric", "1,10000,5", ranks=2)
    assert slow.returncode == 0, slow.stderr[-2000:]
    line = next(x for x in slow.stdout.splitlines() if x.startswith("theta auto, fabric stated"))
    assert "on K = 2 -> H = " in line and ", m = " in line
    fast = train_cli(tmp_path / "fast.h5", *common, "--theta-fabric", "100,2,1000", ranks=2)
    assert "-> every step: Synchronous" in fast.stdout, fast.stdout[-2000:]


def test_a_checkpoint_from_before_the_clock_resumes_on_the_rounds_steps():
    from fdahpc.comm import LocalCommunicator

    w = torch.zeros(D)
    options = dict(theta="auto", theta_round_epochs=2)
    strat = build_strategy(strategy_options("linearfda", None, options), LocalCommunicator(), w, steps_per_epoch=10,
                           num_samples=10, lr_at=lambda step: 1.0)
    old = {k: v for k, v in strat.trigger.state_dict().items() if k not in ("round_clock", "peak_lr")}
    old.update(trigger_step=17, round_start=5)
    strat.trigger.load_state_dict(old)
    assert strat.trigger.round_clock == 12.0 and strat.trigger.peak_lr == 0.0
