"""FDA triggers: the variance bounds, ξ, Θ = 0 ≡ synchronous, and identical decisions on every rank."""

import numpy as np
import pytest
import torch

from conftest import run_python
from fdahpc.comm import LocalCommunicator
from fdahpc.config import TrainConfig
from fdahpc.sketch import AmsSketch
from fdahpc.strategies.fda import LinearFDATrigger, SketchFDATrigger
from fdahpc.run import build, resolve

D = 2000


def simulated_h(trigger, drifts):
    """H over K simulated workers: average the states each would put on the wire."""
    mean_state = np.mean([trigger.local_state(u).numpy().copy() for u in drifts], axis=0, dtype=np.float64)
    return trigger.estimate(mean_state)


def exact_var(drifts):
    u = torch.stack(drifts).double()
    return float((u * u).sum(1).mean() - (u.mean(0) ** 2).sum())


def random_drifts(rng, k, kind):
    common = torch.from_numpy(rng.normal(size=D).astype(np.float32))
    out = []
    for _ in range(k):
        if kind == "spread":
            u = rng.normal(size=D)
        elif kind == "shared":  # workers drift together: small variance, large drift
            u = 3 * common.numpy() + 0.1 * rng.normal(size=D)
        else:  # sparse
            u = np.zeros(D)
            idx = rng.choice(D, 20, replace=False)
            u[idx] = rng.normal(size=20) * 5
        out.append(torch.from_numpy(u.astype(np.float32)))
    return out


@pytest.mark.parametrize("kind", ["spread", "shared", "sparse"])
def test_linear_h_never_below_the_exact_variance(kind):
    rng = np.random.default_rng(0)
    for trial in range(60):
        trig = LinearFDATrigger(LocalCommunicator(), D, theta=1.0, seed=trial)
        if trial % 2:  # also with ξ aligned to the common drift, the favourable case
            trig.xi = torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=D).astype(np.float32)), dim=0)
        drifts = random_drifts(rng, int(rng.integers(2, 9)), kind)
        h, var = simulated_h(trig, drifts), exact_var(drifts)
        assert h >= var - 1e-5 * max(1.0, abs(var)), (trial, h, var)


def test_linear_h_is_tight_when_xi_points_along_the_common_drift():
    rng = np.random.default_rng(1)
    drifts = random_drifts(rng, 4, "shared")
    trig = LinearFDATrigger(LocalCommunicator(), D, theta=1.0)
    loose = simulated_h(trig, drifts)
    trig.xi = torch.nn.functional.normalize(torch.stack(drifts).mean(0), dim=0)
    tight = simulated_h(trig, drifts)
    var = exact_var(drifts)
    assert var <= tight < loose and tight - var < 0.05 * (loose - var)


def sketch_below_rate(kind, eps, trials=150):
    rng = np.random.default_rng(2)
    below = 0
    for trial in range(trials):
        trig = SketchFDATrigger(LocalCommunicator(), D, theta=1.0, sketcher=AmsSketch(D, seed=trial), eps=eps)
        drifts = random_drifts(rng, 4, kind)
        below += simulated_h(trig, drifts) < exact_var(drifts)
    return below / trials


@pytest.mark.parametrize("kind", ["spread", "shared", "sparse"])
def test_sketch_h_rarely_below_the_exact_variance(kind):
    """H < Var exactly when M2(sk(ū)) > (1 + ε)||ū||²: with the default ε = 1/√m that
    one-sided miss has probability ≈ 7 % for l = 5 rows (the median's spread is ≈ 0.046
    against ε = 0.063); a wider ε buys certainty at the price of a looser bound."""
    assert sketch_below_rate(kind, eps=None) <= 0.10
    assert sketch_below_rate(kind, eps=3 / np.sqrt(250)) <= 0.01


def test_state_sizes_match_the_paper():
    assert LinearFDATrigger(LocalCommunicator(), D, 1.0).state_bytes == 8
    assert SketchFDATrigger(LocalCommunicator(), D, 1.0).state_bytes == 4 + 4 * 5 * 250


def test_xi_follows_the_last_two_synchronized_models():
    trig = LinearFDATrigger(LocalCommunicator(), 3, theta=1.0, seed=5)
    xi0 = trig.xi.clone()
    assert torch.linalg.vector_norm(xi0).item() == pytest.approx(1.0, rel=1e-6)
    w0, w1, w2 = torch.zeros(3), torch.tensor([1.0, 0, 0]), torch.tensor([1.0, 3.0, 4.0])
    trig.on_sync(w0, w1)  # first sync: the initial model is not a synchronized one
    assert torch.equal(trig.xi, xi0)
    trig.on_sync(w1, w2)
    assert torch.allclose(trig.xi, torch.tensor([0.0, 0.6, 0.8]))
    trig.on_sync(w2, w2.clone())  # no movement: keep the previous direction
    assert torch.allclose(trig.xi, torch.tensor([0.0, 0.6, 0.8]))
    again = LinearFDATrigger(LocalCommunicator(), 3, theta=1.0, seed=0)
    again.load_state_dict(trig.state_dict())
    assert torch.equal(again.xi, trig.xi) and again.syncs_seen == 3


def _steps(comm, tmp_path, steps, **cfg):
    """Run ``steps`` local steps by hand; returns (setup, per-step sync decisions)."""
    out = comm.bcast_obj(str(tmp_path / "fda.h5"))
    setup = build(resolve(TrainConfig(dataset="mnist5k", batch_size=16, out=out, **cfg)), comm)
    comm.bcast_(setup.job.flat.w, "control")
    setup.job.strategy.reset()
    decisions = []
    for _ in range(steps):
        xb, yb = setup.job.batches.next()
        setup.job.optimizer.zero_grad()
        torch.nn.functional.cross_entropy(setup.job.model(xb), yb).backward()
        setup.job.optimizer.step()
        decisions.append(setup.job.strategy.after_step())
    return setup, decisions


@pytest.mark.distributed
@pytest.mark.parametrize("fda", ["linearfda", "sketchfda"])
def test_theta_zero_is_exactly_synchronous(comm, tmp_path, fda):
    threads = torch.get_num_threads()
    sync_run, sync_dec = _steps(comm, tmp_path, 12, strategy="synchronous")
    fda_run, fda_dec = _steps(comm, tmp_path, 12, strategy=fda, theta=0.0)
    # The sketch's first parallel kernel starts Numba's OpenMP layer, which could reset torch's thread
    # count (then its kernels sum in another order, and the models differ in the last bits).
    assert torch.get_num_threads() == threads
    assert sync_dec == fda_dec == [True] * 12
    assert torch.equal(sync_run.job.flat.w, fda_run.job.flat.w)


@pytest.mark.distributed
@pytest.mark.parametrize("fda", ["linearfda", "sketchfda"])
def test_a_one_step_horizon_is_synchronous_without_monitoring(comm, tmp_path, fda):
    """--theta auto on a fabric where a model AllReduce costs <= 10 % of a step (H = 1): every
    step syncs and no state is reduced, so the run is Synchronous's, bit for bit; a slower
    fabric's horizon (H > 1) keeps the trigger deciding."""
    sync_run, sync_dec = _steps(comm, tmp_path, 12, strategy="synchronous")
    before = comm.bytes_sent["monitor"]
    fda_run, fda_dec = _steps(comm, tmp_path, 12, strategy=fda, theta="auto", theta_fabric="100,2,100")
    assert fda_run.job.strategy.trigger.horizon == 1
    assert sync_dec == fda_dec == [True] * 12
    assert torch.equal(sync_run.job.flat.w, fda_run.job.flat.w)
    assert comm.bytes_sent["monitor"] == before
    if comm.world_size > 1:  # one rank: every fabric's horizon is one step (nothing crosses a wire)
        slow_run, slow_dec = _steps(comm, tmp_path, 12, strategy=fda, theta="auto", theta_fabric="1,10000,5",
                                    fda_every=1)
        assert slow_run.job.strategy.trigger.horizon > 12 and slow_dec == [False] * 12  # the prior is not reached
        assert comm.bytes_sent["monitor"] - before == 12 * slow_run.job.strategy.trigger.state_bytes


@pytest.mark.distributed
@pytest.mark.parametrize("fda,theta", [("linearfda", 0.05), ("sketchfda", 0.05)])
def test_every_rank_takes_the_same_decisions(comm, tmp_path, fda, theta):
    setup, decisions = _steps(comm, tmp_path, 30, strategy=fda, theta=theta, partition="sorted:50")
    assert 0 < sum(decisions) < 30  # the threshold matters in this run
    everyone = comm.allgather_obj(decisions)
    assert all(d == decisions for d in everyone)
    anchors = comm.allgather(setup.job.strategy.anchor.numpy(), "control")
    assert all(np.array_equal(a, anchors[0]) for a in anchors)


@pytest.mark.slow
def test_same_decisions_on_four_ranks():
    # -m distributed keeps this test itself out of the ranks' selection (no recursion).
    proc = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi", "-m", "distributed",
                       "tests/test_fda.py", "-k", "every_rank_takes_the_same_decisions"], ranks=4, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("2 passed") == 4


def test_log_variance_records_exact_variance(tmp_path):
    from fdahpc.run import run as train

    cfg = TrainConfig(dataset="mnist5k", batch_size=16, strategy="linearfda", theta=0.5, max_steps=30,
                      log_variance=True, fda_log_every=3, out=str(tmp_path / "v.h5"), log_every=10**6)
    setup = build(resolve(cfg), LocalCommunicator())
    train(setup)
    import h5py

    with h5py.File(tmp_path / "v.h5") as f:
        assert f["fda/step"][:].tolist() == list(range(3, 31, 3))
        # One worker: the variance is exactly 0 and H is the drift off the ξ direction.
        assert np.all(f["fda/variance"][:] == 0) and np.all(f["fda/h"][:] >= 0)


def test_a_trigger_is_one_decorated_class():
    from fdahpc.strategies import TRIGGERS, Trigger, trigger, trigger_of

    @trigger("test-every-third")
    class EveryThird(Trigger):
        @classmethod
        def build(cls, ctx):
            return cls()

        def should_sync(self, step, w, anchor, loss=None):
            return step % 3 == 0

    try:
        assert trigger_of("fedavg", "test-every-third") is EveryThird and EveryThird.name == "test-every-third"
        assert not EveryThird.theta_driven and EveryThird.round_based and EveryThird().state_bytes == 0
        with pytest.raises(ValueError, match="taken"):
            trigger("test-every-third")(type("Other", (Trigger,), {}))
        with pytest.raises(TypeError, match="must subclass Trigger"):
            trigger("test-not-a-trigger")(int)
    finally:
        TRIGGERS.pop("test-every-third")
    assert trigger_of("linearfda").theta_driven and trigger_of("sketchfda").needs_sketch(None)
    assert not trigger_of("linearfda").round_based and not trigger_of("sketchfda").round_based
    assert not trigger_of("fedavg").theta_driven and not trigger_of("synchronous").theta_driven
    assert trigger_of("fedavg").round_based and trigger_of("synchronous").round_based
    with pytest.raises(TypeError, match="threshold: split into theta_driven .* and round_based"):
        type("Old", (Trigger,), {"threshold": True})


def test_readme_trigger_example_registers_and_runs(tmp_path):
    """docs/extending.md's 'Adding a trigger' block, executed as written, then used by a run."""
    import re

    from conftest import REPO
    from fdahpc.comm import LocalCommunicator
    from fdahpc.config import TrainConfig
    from fdahpc.strategies import TRIGGERS
    from fdahpc.run import build, run as train

    text = open(f"{REPO}/docs/extending.md").read()
    block = re.search(r"# Adding a trigger or a rule.*?```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "docs/extending.md", "exec"), {})
    try:
        cfg = TrainConfig(strategy="fedavg", trigger="drift-norm", theta=0.05, dataset="mnist5k", max_steps=20,
                          batch_size=16, log_every=10**6, out=str(tmp_path / "r.h5"))
        setup = build(resolve(cfg), LocalCommunicator())
        res = train(setup)
        assert res["steps"] == 20 and 0 < res["syncs"] < 20 and setup.job.strategy.trigger.name == "drift-norm"
        assert res["comm_bytes"] == 2 * 4 * setup.job.flat.dim * res["syncs"] + 4 * 20
        import h5py

        with h5py.File(tmp_path / "r.h5") as f:
            assert f["drift/step"][:].tolist() == list(range(1, 21)) and len(f["drift/sq"]) == 20
    finally:
        TRIGGERS.pop("drift-norm", None)


def _drive(comm, trig, steps, stop_after_syncs):
    """Run a trigger on drifts that depend only on (rank, steps since the last sync), so a
    round that ends later restarts from the same drifts (the anchor stays at zero, so the
    drifts are exact): the estimates it records and the steps at which it synchronized."""
    records, syncs = [], []
    trig.record = lambda group, **values: records.append((group, values))
    anchor, n = torch.zeros(D), 0
    walk = torch.cumsum(torch.from_numpy(np.random.default_rng(comm.rank).normal(size=(steps, D)).astype(np.float32)), 0)
    for step in range(1, steps + 1):
        n += 1
        if trig.should_sync(step, 0.05 * walk[n - 1], anchor):
            trig.on_sync(anchor, anchor)
            n = 0
            syncs.append(step)
            if len(syncs) == stop_after_syncs:
                break
    trig.finish()
    return [v["h"] for g, v in records if g == "fda"], syncs


@pytest.mark.distributed
@pytest.mark.parametrize("kind", ["linear", "sketch"])
def test_lagged_decisions_are_the_blocking_ones_one_step_late(comm, kind):
    """--fda-lag 1: the state reduced during the next step gives the same estimate and the
    same decision, one step later, so every round is one step longer."""
    def make(lag):
        if kind == "linear":  # H ~ ||u||^2, 5 per step here; the sketch's H ~ the variance
            return LinearFDATrigger(comm, D, theta=50.0, seed=1, lag=lag)
        theta = 3.0 if comm.world_size == 1 else 25.0
        return SketchFDATrigger(comm, D, theta=theta, sketcher=AmsSketch(D, seed=1), lag=lag)

    h0, syncs0 = _drive(comm, make(0), 400, 5)
    h1, syncs1 = _drive(comm, make(1), 400, 5)
    lengths0 = np.diff([0] + syncs0)
    assert len(syncs0) == 5 and lengths0.min() >= 3  # rounds of several steps
    assert np.diff([0] + syncs1).tolist() == (lengths0 + 1).tolist()
    # Each round the lagged trigger sees the same states, one step later: the same estimates.
    assert len(h1) == len(h0) and np.array_equal(np.float64(h1), np.float64(h0))


@pytest.mark.distributed
@pytest.mark.parametrize("kind", ["linear", "sketch"])
def test_theta_auto_once_is_the_variance_of_the_first_round(comm, kind):
    """--theta auto-once: no monitoring during a first round of fixed length, then Θ = the exact
    model variance at its end (infinite on one rank: nothing to average), saved in
    checkpoints; later rounds end by the estimate as with a hand-set Θ."""
    k = comm.world_size
    opts = dict(auto_steps=12, lag=0)
    trig = (LinearFDATrigger(comm, D, theta="auto", seed=1, **opts) if kind == "linear"
            else SketchFDATrigger(comm, D, theta="auto", sketcher=AmsSketch(D, seed=1), **opts))
    anchor = torch.zeros(D)
    walk = torch.cumsum(torch.from_numpy(np.random.default_rng(comm.rank).normal(size=(40, D)).astype(np.float32)), 0)
    monitor0 = comm.bytes_sent["monitor"]
    decisions = [trig.should_sync(step, 0.05 * walk[step - 1], anchor) for step in range(1, 13)]
    assert decisions == [False] * 11 + [True] and trig.calibrating
    assert comm.bytes_sent["monitor"] - monitor0 == 4  # one float, once
    w = 0.05 * walk[11].clone()
    drifts = comm.allgather(w.numpy().astype(np.float64), "eval")
    comm.allreduce_mean_(w, "model")
    trig.on_sync(anchor, w)
    exact = float((drifts ** 2).sum(1).mean() - (drifts.mean(0) ** 2).sum())
    assert not trig.calibrating
    if k == 1:
        assert trig.theta == float("inf")
    else:
        assert trig.theta == pytest.approx(exact, rel=1e-5)
        state = trig.state_dict()
        assert state["theta"] == trig.theta and state["calibrating"] is False
    anchor = w.clone()
    later = [trig.should_sync(13 + i, anchor + 0.05 * walk[i], anchor) for i in range(20)]
    assert comm.bytes_sent["monitor"] - monitor0 == 4 + 20 * trig.state_bytes  # monitored from here on
    if k > 1:
        assert any(later)  # the same drift again passes the variance it produced
