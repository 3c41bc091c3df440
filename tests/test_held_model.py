"""The model a user holds: what an evaluation scores and what a run ends on.

Between synchronizations each rank holds its own local model; the model the method hands
back is its rule applied to a synchronization forced at that step
(:meth:`fdahpc.strategies.Synchronizer.held_model`). Tested here: against hand
computations of each rule (the mean, FedAvgM, FedAdam, DiLoCo's outer step, FedAdp's
weights) on rank-dependent models, in one process and under ``mpiexec -n 2``; that it
changes nothing training reads and counts its traffic as evaluation; and that a run
evaluated every step ends on the same model, bit for bit, as one evaluated only at its end.
"""

import h5py
import numpy as np
import pytest
import torch

from conftest import train_inprocess
from naive import naive_fedadam_round, naive_fedadp_weights, naive_fedavgm_round
from fdahpc.strategies import build_strategy, strategy_options

pytestmark = pytest.mark.distributed

D = 97


def local_model(rank: int, rnd: int) -> np.ndarray:
    g = np.random.default_rng([rank, rnd, 11])
    return (1.0 + 0.1 * g.normal(size=D)).astype(np.float32)


def make(comm, strategy: str, **options):
    w = torch.from_numpy(local_model(99, 0))
    parts = strategy_options(strategy, options.pop("trigger", None), {"tau": 2, **options})
    strat = build_strategy(parts, comm, w, steps_per_epoch=3, num_samples=10 + comm.rank)
    strat.reset()
    return strat


def mean_of(rnd: int, k: int) -> np.ndarray:
    return np.mean([local_model(r, rnd) for r in range(k)], axis=0, dtype=np.float64)


def one_round_then_a_step(comm, strat) -> None:
    """Round 1 synchronizes (τ = 2: steps 1-2), so the rule has state; step 3 moves the
    local models to round 2's, which the held model then combines."""
    for step, rnd in ((1, 1), (2, 1), (3, 2)):
        strat.w.copy_(torch.from_numpy(local_model(comm.rank, rnd)))
        assert strat.after_step() == (step == 2)
    assert not strat.in_sync


def test_held_model_of_each_rule_against_a_hand_computation(comm):
    k = comm.world_size
    anchor0 = local_model(99, 0).astype(np.float64)
    n = np.array([10.0 + r for r in range(k)])

    def expected(strategy: str) -> np.ndarray:
        means = [mean_of(1, k), mean_of(2, k)]
        if strategy == "fedavg":
            return means[1]
        if strategy == "diloco":  # outer SGD, Nesterov: v <- mu v + Δ; w <- w - lr (Δ + mu v)
            w, v = anchor0, np.zeros(D)
            for mean in means:
                delta = w - mean
                v = 0.9 * v + delta
                w = w - 0.7 * (delta + 0.9 * v)
            return w
        if strategy == "fedavgm":
            w, v = anchor0, np.zeros(D)
            for mean in means:
                w, v = map(np.array, naive_fedavgm_round(w, mean, v, eta_s=0.316, beta=0.9))
            return w
        if strategy == "fedadam":
            w, m, v = anchor0, np.zeros(D), np.zeros(D)
            for mean in means:
                w, m, v = map(np.array, naive_fedadam_round(w, mean, m, v, 1e-3, 0.9, 0.999, 1e-7))
            return w
        assert strategy == "fedadp"  # weights from the angles, smoothed over the rounds
        w, smoothed, counts = anchor0, np.zeros(k), np.zeros(k, dtype=np.int64)
        for rnd in (1, 2):
            updates = [local_model(r, rnd) - w for r in range(k)]
            psi, _, smoothed, counts = naive_fedadp_weights(updates, n, smoothed, counts)
            w = w + np.sum([p * u for p, u in zip(psi, updates)], axis=0)
        return w

    for strategy in ("fedavg", "diloco", "fedavgm", "fedadam", "fedadp"):
        strat = make(comm, strategy, **({"server_lr": 0.316} if strategy == "fedavgm" else {}))
        one_round_then_a_step(comm, strat)
        out = torch.empty_like(strat.w)
        strat.held_model(out)
        np.testing.assert_allclose(out.numpy(), expected(strategy), rtol=2e-5, atol=2e-6, err_msg=strategy)
        got = comm.allgather(out.numpy(), "control")
        assert all(np.array_equal(g, got[0]) for g in got), strategy  # every rank holds the same model


def test_held_model_changes_nothing_and_is_the_next_sync_bit_for_bit(comm):
    """Every rule: after held_model, w, the anchor and the rule's state are what they were,
    the training counters did not move (its traffic is ``eval``), and a synchronization at
    that step gives exactly the held model."""
    for strategy in ("synchronous", "fedavg", "linearfda", "diloco", "fedavgm", "fedadam", "fedadp"):
        options = {"theta": 1e9} if strategy == "linearfda" else {}
        strat = make(comm, strategy, **options)
        if strategy == "synchronous":
            strat.w.copy_(torch.from_numpy(local_model(comm.rank, 1)))
            strat.after_step()
            assert strat.in_sync
            out = torch.empty_like(strat.w)
            strat.held_model(out)
            assert torch.equal(out, strat.w) and strat.held_bytes == 0  # nothing to force
            continue
        if strategy == "linearfda":  # Θ never met: the step leaves the models apart
            strat.w.copy_(torch.from_numpy(local_model(comm.rank, 2)))
            assert not strat.after_step()
        else:
            one_round_then_a_step(comm, strat)
        w, anchor = strat.w.clone(), strat.anchor.clone() if strat.anchor is not None else None
        state = strat.state_dict()
        sent = dict(comm.bytes_sent)
        trained_bytes = strat.comm_bytes()
        out = torch.empty_like(strat.w)
        strat.held_model(out)
        assert torch.equal(strat.w, w), strategy
        assert anchor is None or torch.equal(strat.anchor, anchor), strategy
        _assert_same_state(strat.state_dict(), state, strategy)
        assert strat.comm_bytes() == trained_bytes, strategy
        assert comm.bytes_sent["model"] == sent["model"] and comm.bytes_sent["eval"] > sent["eval"], strategy
        assert strat.held_bytes == k_bytes(comm, comm.bytes_sent["eval"] - sent["eval"]), strategy
        strat.sync()  # what the run would do if it stopped here
        assert torch.equal(strat.w, out), strategy
        assert strat.comm_bytes() - trained_bytes == strat.held_bytes, strategy


def k_bytes(comm, eval_sent: int) -> int:
    return comm.world_size * 2 * eval_sent


def _assert_same_state(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, where


def test_a_run_evaluated_every_step_ends_on_the_same_model(comm, tmp_path):
    """DiLoCo (the outer step) and FedAdam (server Adam) with τ = 4 over 14 steps: the last
    round is cut short, so the run ends with a forced synchronization; the model and the final
    score are the same whether it was evaluated every step or once, at its end."""
    for strategy in ("diloco", "fedadam"):
        runs = {}
        for every in (1, None):
            out = tmp_path / f"{strategy}-{every}.h5"
            setup, result = train_inprocess(comm, out, strategy=strategy, tau=4, max_steps=14, epochs=100.0,
                                            eval_every=every)
            runs[every] = (setup.job.flat.w.clone(), result)
        (w1, r1), (w0, r0) = runs[1], runs[None]
        assert torch.equal(w1, w0), strategy
        assert r1["final_sync"] == r0["final_sync"] == 1 and r1["syncs"] == r0["syncs"] == 4, strategy
        assert r1["final_accuracy"] == r0["final_accuracy"] and r1["final_loss"] == r0["final_loss"], strategy
        if comm.is_root:
            with h5py.File(tmp_path / f"{strategy}-1.h5", "r") as f:
                held = f["eval/held_bytes"][:]
                steps = f["eval/step"][:]
                assert f.attrs["evaluated_model"].startswith("held")
                assert int(f.attrs["final_sync"]) == 1
            # Steps 4, 8, 12 synchronized: nothing to force there; every other step forces one.
            assert (held[np.isin(steps, [4, 8, 12])] == 0).all() and (held[~np.isin(steps, [4, 8, 12])] > 0).all()


def test_model_averager_held_model_is_what_finish_leaves(comm):
    """A user's own loop: ``held_model()`` mid-round is the model ``finish()`` then leaves on
    every rank (DiLoCo, τ = 3, five steps: the second round is cut short)."""
    from fdahpc import ModelAverager

    torch.manual_seed(comm.rank)
    model = torch.nn.Linear(6, 3)
    avg = ModelAverager(model, comm, "diloco", tau=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 6)
    for _ in range(5):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        avg.step()
    held = avg.held_model()
    assert avg.finish() and avg.syncs == 2
    assert torch.equal(torch.nn.utils.parameters_to_vector(model.parameters()), held)
    assert not avg.finish()  # already in sync: nothing more to do
