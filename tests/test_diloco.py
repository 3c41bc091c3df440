"""DiLoCo's outer step: against a hand computation, against torch.optim.SGD(nesterov=True)
fed the pseudo-gradient as its gradient, and as a rule of the synchronizer (rank-dependent
models, in one process and under mpiexec), resumed from its state."""

import numpy as np
import pytest
import torch

from fdahpc.aggregate import DiLoCoOuter
from fdahpc.comm import LocalCommunicator
from fdahpc.config import TrainConfig
from fdahpc.run import resolve
from fdahpc.strategies import build_strategy, local_optimizer, strategy_options
from fdahpc.strategies.diloco import DiLoCoRule
from fdahpc.strategies.fda import LinearFDATrigger

D = 131


def worker_model(rank, rnd, d=D):
    g = np.random.default_rng([rank, rnd, 7])
    return (1.0 + 0.1 * g.normal(size=d)).astype(np.float32)


def make(comm, strategy="diloco", **options):
    w = torch.from_numpy(worker_model(99, 0))
    return build_strategy(strategy_options(strategy, options.pop("trigger", None), options), comm, w, steps_per_epoch=3, num_samples=10)


def test_outer_step_matches_a_hand_computation():
    """lr 0.7, momentum 0.9, three rounds on a 3-vector (worked out on paper):
    round 1  Δ = (0.5, -0.5, 0)   v = Δ                    w = (0.335, 2.665, -1)
    round 2  Δ = (0, 0, 1)        v = (0.45, -0.45, 1)     w = (0.0515, 2.9485, -2.33)
    round 3  Δ = 0                v = (0.405, -0.405, 0.9) w = (-0.20365, 3.20365, -2.897)"""
    outer = DiLoCoOuter(3)
    w = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    means = [[0.5, 2.5, -1.0], [0.335, 2.665, -2.0], None]  # None: the workers did not move
    expected = [[0.335, 2.665, -1.0], [0.0515, 2.9485, -2.33], [-0.20365, 3.20365, -2.897]]
    velocity = [[0.5, -0.5, 0.0], [0.45, -0.45, 1.0], [0.405, -0.405, 0.9]]
    for mean, want, v in zip(means, expected, velocity):
        outer.step(w, w.clone() if mean is None else torch.tensor(mean, dtype=torch.float64))
        np.testing.assert_allclose(w.numpy(), want, rtol=0, atol=1e-12)
        np.testing.assert_allclose(outer.v.numpy(), v, rtol=0, atol=1e-12)
    assert outer.step_count == 3


def test_outer_step_is_torch_sgd_nesterov_on_the_pseudo_gradient():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(50, generator=gen, dtype=torch.float64)
    p = torch.nn.Parameter(w.clone())
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)
    outer = DiLoCoOuter(50)
    for _ in range(6):
        mean = w + 0.1 * torch.randn(50, generator=gen, dtype=torch.float64)
        p.grad = p.detach() - mean  # Δ = w_anchor − mean_k w_k, the outer gradient
        sgd.step()
        outer.step(w, mean)
        np.testing.assert_allclose(w.numpy(), p.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(outer.v.numpy(), sgd.state[p]["momentum_buffer"].numpy(), rtol=1e-12, atol=1e-12)
    # Without momentum and with lr 1 it is plain model averaging.
    plain = DiLoCoOuter(50, eta=1.0, mu=0.0)
    plain.step(w, mean)
    np.testing.assert_allclose(w.numpy(), mean.numpy(), atol=1e-12)


@pytest.mark.distributed
def test_diloco_rounds_match_torch_sgd_on_the_mean_and_resume(comm):
    """Three rounds of rank-dependent models: every rank ends on the torch reference; a
    fresh rule loaded from round 2's state continues exactly like the original."""
    k = comm.world_size
    strat = make(comm, tau=1, server_lr=0.5, server_momentum=0.8)
    assert isinstance(strat.rule, DiLoCoRule)
    p = torch.nn.Parameter(torch.from_numpy(worker_model(99, 0)).double())
    sgd = torch.optim.SGD([p], lr=0.5, momentum=0.8, nesterov=True)
    saved = None
    for rnd in range(1, 4):
        if rnd == 3:
            saved_w = strat.w.clone()
            strat = make(comm, tau=1, server_lr=0.5, server_momentum=0.8)
            strat.w.copy_(saved_w)
            strat.load_state_dict(saved)
        strat.w.copy_(torch.from_numpy(worker_model(comm.rank, rnd)))
        assert strat.after_step()
        mean = np.mean([worker_model(r, rnd) for r in range(k)], axis=0, dtype=np.float64)
        p.grad = p.detach() - torch.from_numpy(mean)
        sgd.step()
        np.testing.assert_allclose(strat.w.numpy(), p.detach().numpy(), rtol=1e-5, atol=1e-6)
        if rnd == 2:
            saved = strat.state_dict()
    got = comm.allgather(strat.w.numpy(), "control")
    assert all(np.array_equal(g, got[0]) for g in got)  # replicas never diverge


def test_diloco_preset_and_options():
    cfg = TrainConfig(strategy="diloco")
    assert local_optimizer(cfg) == ("adamw", 1e-3)
    o = strategy_options("diloco", None, cfg)
    assert o.trigger_options.tau == 500  # H = 500 inner steps
    assert strategy_options("diloco", None, TrainConfig(strategy="diloco", tau=20)).trigger_options.tau == 20
    strat = make(LocalCommunicator())
    assert (strat.rule.optimizer.eta, strat.rule.optimizer.mu) == (0.7, 0.9)
    assert strat.trigger.tau == 500
    fda = make(LocalCommunicator(), trigger="linear", theta=2.0)  # any trigger drives it
    assert isinstance(fda.trigger, LinearFDATrigger) and isinstance(fda.rule, DiLoCoRule)
    with pytest.raises(ValueError, match="--local-epochs: diloco's round is --tau steps"):
        resolve(TrainConfig(strategy="diloco", local_epochs=2))
    with pytest.raises(ValueError, match=r"mu \(--server-momentum, DiLoCo's outer momentum\) 1.0: must be in \[0, 1\)"):
        make(LocalCommunicator(), server_momentum=1.0)


def test_model_averager_takes_diloco():
    from fdahpc import ModelAverager

    model = torch.nn.Linear(4, 2)
    avg = ModelAverager(model, LocalCommunicator(), "diloco", tau=2, server_lr=0.5)
    assert not avg.step() and avg.step() and avg.syncs == 1
