"""Server optimizers, FedAdp and client sampling as strategies: against tests/naive.py,
with rank-dependent inputs, in one process and under mpiexec."""

import numpy as np
import pytest
import torch
from naive import naive_fedadam_round, naive_fedadp_weights, naive_fedavgm_round, paper_comm_bytes

from fdahpc.comm import LocalCommunicator
from fdahpc.config import TrainConfig
from fdahpc.run import resolve
from fdahpc.strategies import build_strategy, strategy_options
from fdahpc.strategies.fda import SketchFDATrigger
from fdahpc.aggregate import sketch_cosine
from fdahpc.strategies.fedopt import ServerOptRule
from fdahpc.strategies.participation import Participation

D = 257


def worker_model(rank, rnd, d=D):
    """Every rank can rebuild every other rank's model: inputs depend on rank and round."""
    g = np.random.default_rng([rank, rnd])
    return (1.0 + 0.1 * g.normal(size=d)).astype(np.float32)


def make(comm, strategy, **options):
    w = torch.from_numpy(worker_model(99, 0))  # the common initial model
    return build_strategy(strategy_options(strategy, options.pop("trigger", None), options), comm, w, steps_per_epoch=3,
                          num_samples=100 + 10 * comm.rank)


@pytest.mark.distributed
def test_fedavgm_and_fedadam_rounds_match_the_reference(comm):
    k = comm.world_size
    avgm, adam = make(comm, "fedavgm", tau=1), make(comm, "fedadam", tau=1, server_lr=0.01)
    w_ref = {"avgm": worker_model(99, 0).astype(np.float64), "adam": worker_model(99, 0).astype(np.float64)}
    v_avgm, m_adam, v_adam = [0.0] * D, [0.0] * D, [0.0] * D
    for rnd in range(1, 4):
        for strat in (avgm, adam):
            strat.w.copy_(torch.from_numpy(worker_model(comm.rank, rnd)))
            assert strat.after_step()
        mean = np.mean([worker_model(r, rnd) for r in range(k)], axis=0, dtype=np.float64)
        w_ref["avgm"], v_avgm = map(np.array, naive_fedavgm_round(w_ref["avgm"], mean, v_avgm, 0.316, 0.9))
        w_ref["adam"], m_adam, v_adam = map(np.array, naive_fedadam_round(w_ref["adam"], mean, m_adam, v_adam,
                                                                           0.01, 0.9, 0.999, 1e-7))
        np.testing.assert_allclose(avgm.w.numpy(), w_ref["avgm"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(adam.w.numpy(), w_ref["adam"], rtol=1e-5, atol=1e-5)
    # Every rank holds the same server state (the replicas never diverge).
    for strat in (avgm, adam):
        state = strat.rule.optimizer.state_dict()
        for name in ("v", "m"):
            if name in state:
                got = comm.allgather(state[name].numpy(), "control")
                assert all(np.array_equal(g, got[0]) for g in got)
    assert avgm.anchor is not None and torch.equal(avgm.anchor, avgm.w)


@pytest.mark.distributed
@pytest.mark.parametrize("angles", ["exact", "sketch"])
def test_fedadp_round_matches_the_reference(comm, angles):
    k = comm.world_size
    strat = make(comm, "fedadp", tau=1, fedadp_angles=angles)
    rec = {}
    strat.sink = rec.__setitem__
    w0 = worker_model(99, 0).astype(np.float64)
    smoothed, counts = [0.0] * k, [0] * k
    n = [100 + 10 * r for r in range(k)]
    for rnd in range(1, 4):
        anchor = strat.w.numpy().astype(np.float64).copy()
        strat.w.copy_(torch.from_numpy(worker_model(comm.rank, rnd)))
        assert strat.after_step()
        updates = [worker_model(r, rnd).astype(np.float64) - anchor for r in range(k)]
        psi, theta, smoothed, counts = naive_fedadp_weights(updates, n, smoothed, counts, alpha=5.0)
        assert rec["round/step"] == rnd and rec["sync/step"] == rnd
        if angles == "exact":
            np.testing.assert_allclose(rec["round/weights"], psi, rtol=1e-4)
            # float32 dot products: arccos near cos = 1 turns 6e-8 into ~4e-4 rad.
            np.testing.assert_allclose(rec["round/angles"], theta, atol=1e-3)
            expected = anchor + sum(p * u for p, u in zip(psi, updates))
            np.testing.assert_allclose(strat.w.numpy(), expected, rtol=1e-5, atol=1e-6)
        else:  # estimated angles: close to the exact ones, weights still a distribution
            assert np.max(np.abs(rec["round/angles"] - np.asarray(theta))) < 0.15
            assert rec["round/weights"].sum() == pytest.approx(1.0)
    assert not np.allclose(strat.anchor.numpy(), w0)  # three rounds moved the global model
    expected_bytes = paper_comm_bytes(syncs=3, steps=3, dim=D, workers=k, state_bytes=0,
                                      model_reductions=2 if angles == "exact" else 1,
                                      round_state_bytes=24 if angles == "exact" else 4 + 4 * 5 * 250)
    assert strat.comm_bytes() == expected_bytes


def test_sketched_cosines_track_the_exact_ones():
    """The price of --fedadp-angles sketch: angle error on update-like vectors."""
    from fdahpc.sketch import AmsSketch

    rng = np.random.default_rng(0)
    d, errors = 20_000, []
    for trial in range(40):
        sk = AmsSketch(d, seed=trial)
        shared = rng.normal(size=d)
        a = (shared + rng.uniform(0.2, 2.0) * rng.normal(size=d)).astype(np.float32)
        b = (shared + rng.uniform(0.2, 2.0) * rng.normal(size=d)).astype(np.float32)
        exact = np.arccos(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))
        est = np.arccos(np.clip(sketch_cosine(sk.sketch(a), sk.sketch(b)), -1, 1))
        errors.append(abs(est - exact))
    assert np.median(errors) < 0.04 and np.max(errors) < 0.15


def test_participation_is_seeded_and_agreed():
    draws = [Participation(r, 10, 3, seed=7) for r in range(10)]
    for _ in range(5):
        ranks = draws[0].ranks
        assert len(ranks) == 3 and all(np.array_equal(p.ranks, ranks) for p in draws)
        assert sum(p.active for p in draws) == 3
        for p in draws:
            p.next_round()
    assert not np.array_equal(Participation(0, 10, 3, seed=7).ranks, Participation(0, 10, 3, seed=8).ranks) or \
        not np.array_equal(Participation(0, 10, 3, seed=7).ranks, Participation(0, 10, 3, seed=9).ranks)
    with pytest.raises(ValueError, match="clients-per-round"):
        Participation(0, 4, 5, seed=0)


@pytest.mark.mpi(min_size=2)
def test_sampled_rounds_average_only_the_participants(comm):
    strat = make(comm, "fedavg", tau=1, clients_per_round=1)
    part = strat.participation
    for rnd in range(1, 4):
        chosen = part.ranks.copy()
        anchor = strat.w.clone()
        if part.active:  # the others keep the global model, as the trainer does
            strat.w.copy_(torch.from_numpy(worker_model(comm.rank, rnd)))
        strat.after_step()
        expected = np.mean([worker_model(r, rnd) for r in chosen], axis=0)
        np.testing.assert_allclose(strat.w.numpy(), expected, rtol=1e-5, atol=1e-6)
        assert not torch.equal(anchor, strat.w)
    # One participant per round trains, but every rank takes part in the AllReduce and is counted.
    assert strat.comm_bytes() == 3 * 4 * D * comm.world_size * 2
    with pytest.raises(ValueError, match="clients-per-round"):
        make(comm, "fedavg", trigger="linear", clients_per_round=1)


def test_any_trigger_drives_any_rule():
    comm = LocalCommunicator()
    strat = make(comm, "fedadam", trigger="sketch", theta=0.5)
    assert isinstance(strat.trigger, SketchFDATrigger) and isinstance(strat.rule, ServerOptRule)


def test_sketch_trigger_and_sketched_fedadp_share_one_hash_table():
    strat = make(LocalCommunicator(), "fedadp", trigger="sketch", theta=0.5, fedadp_angles="sketch", sketch_cols=50)
    assert strat.trigger.sketcher is strat.rule.sketch
    assert strat.trigger.state_bytes == 4 + 4 * 5 * 50
    other = make(LocalCommunicator(), "sketchfda", sketch_cols=50)  # a run builds its own
    assert other.trigger.sketcher is not strat.trigger.sketcher
    np.testing.assert_array_equal(other.trigger.sketcher.codes, strat.rule.sketch.codes)


def test_presets_choose_the_papers_local_optimizer():
    from fdahpc.strategies import local_optimizer

    assert local_optimizer(TrainConfig(strategy="fedavgm")) == ("sgd", 0.0316)
    assert local_optimizer(TrainConfig(strategy="fedadam")) == ("sgd", 0.01)
    assert local_optimizer(TrainConfig(strategy="sketchfda")) == ("adam", 1e-3)
    assert local_optimizer(TrainConfig(strategy="fedadam", optimizer="adam", lr=0.5)) == ("adam", 0.5)
    with pytest.raises(ValueError, match="server-betas 0.9: give two numbers"):
        TrainConfig(server_betas="0.9")
    with pytest.raises(ValueError, match=r"beta_2 \(--server-betas\) 1.5: must be in \[0, 1\)"):
        make(LocalCommunicator(), "fedadam", tau=1, server_betas="0.9,1.5")


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["fedavg", "fedavgm"])
def test_sample_weighted_mean_is_mcmahans_fedavg(comm, strategy):
    """--weighting samples: Σ n_i w_i / Σ n_i (n_i = 100 + 10·rank here); FedAvgM with
    η_s = 1 and β = 0 lands on the same weighted mean."""
    k = comm.world_size
    extra = dict(server_lr=1.0, server_momentum=0.0) if strategy == "fedavgm" else {}
    strat = make(comm, strategy, tau=1, weighting="samples", **extra)
    strat.w.copy_(torch.from_numpy(worker_model(comm.rank, 1)))
    assert strat.after_step()
    n = np.array([100.0 + 10 * r for r in range(k)])
    expected = sum(n[r] * worker_model(r, 1).astype(np.float64) for r in range(k)) / n.sum()
    np.testing.assert_allclose(strat.w.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_weighting_refusals():
    with pytest.raises(ValueError, match="--weighting 'mean': unknown"):
        resolve(TrainConfig(strategy="fedavg", weighting="mean"))
    with pytest.raises(ValueError, match="FedAdp's weights already include"):
        resolve(TrainConfig(strategy="fedadp", weighting="samples"))
