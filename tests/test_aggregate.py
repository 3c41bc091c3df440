"""fdahpc.aggregate against the literal references in tests/naive.py and closed forms."""

import math

import numpy as np
import pytest
import torch

from fdahpc.aggregate import (FedAdam, FedAdpWeights, FedAvgM, apply_update, gompertz,
                              pseudo_gradient, weighted_sum)
from naive import naive_fedadam_round, naive_fedadp_weights, naive_fedavgm_round

RTOL, ATOL = 1e-5, 1e-6   # float32 code vs float64 reference, values of order 1


def _rounds(rng, dim, k):
    """Server start and k client means that wander around it (Delta of order 1)."""
    w0 = rng.standard_normal(dim).astype(np.float32)
    means = [(w0 + rng.standard_normal(dim)).astype(np.float32) for _ in range(k)]
    return w0, means


# ----------------------------------------------------------------- plain vector helpers

def test_pseudo_gradient_numpy_and_torch():
    a = np.array([3.0, -1.0, 2.5], dtype=np.float32)
    b = np.array([1.0, 1.0, 2.5], dtype=np.float32)
    d = pseudo_gradient(a, b)
    assert isinstance(d, np.ndarray) and d.dtype == np.float32
    np.testing.assert_array_equal(d, [2.0, -2.0, 0.0])
    out = torch.empty(3)
    assert pseudo_gradient(torch.from_numpy(a), torch.from_numpy(b), out=out) is out
    np.testing.assert_array_equal(out.numpy(), [2.0, -2.0, 0.0])


def test_pseudo_gradient_rejects_mismatch():
    with pytest.raises(ValueError, match="w_server and w_mean"):
        pseudo_gradient(np.zeros(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="w_server and w_mean"):
        pseudo_gradient(np.zeros(3, np.float32), np.zeros(3, np.float64))


def test_weighted_sum_and_apply_update():
    vs = [np.array([1.0, 2.0], np.float32), np.array([-4.0, 0.5], np.float32)]
    s = weighted_sum(vs, [0.25, 0.5])
    np.testing.assert_allclose(s, [0.25 - 2.0, 0.5 + 0.25])
    w = np.array([10.0, 20.0], np.float32)
    assert apply_update(w, s) is w
    np.testing.assert_allclose(w, [8.25, 20.75])
    with pytest.raises(ValueError, match="vectors/weights"):
        weighted_sum(vs, [1.0])


# ------------------------------------------------------------------ server optimizers

@pytest.mark.parametrize("as_torch", [False, True])
def test_fedavgm_matches_naive_over_rounds(as_torch):
    rng = np.random.default_rng(0)
    w0, means = _rounds(rng, 37, 6)
    w = torch.from_numpy(w0.copy()) if as_torch else w0.copy()
    opt = FedAvgM(37, eta_s=0.316, beta=0.9)
    w_ref, v_ref = list(w0.astype(np.float64)), [0.0] * 37
    for wm in means:
        # the caller's buffer is updated in place; clients restart from the new server model
        assert opt.step(w, torch.from_numpy(wm) if as_torch else wm) is w
        w_ref, v_ref = naive_fedavgm_round(w_ref, wm, v_ref, 0.316, 0.9)
        got = w.numpy() if as_torch else w
        np.testing.assert_allclose(got, w_ref, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(opt.v.numpy(), v_ref, rtol=RTOL, atol=ATOL)
    assert opt.step_count == len(means)


def test_fedadam_matches_naive_over_rounds():
    rng = np.random.default_rng(1)
    w0, means = _rounds(rng, 41, 6)
    means[2][:5] = w0[:5]      # Delta = 0 coordinates exercise the tau floor
    w = w0.copy()
    hp = dict(eta_s=1e-2, beta_1=0.9, beta_2=0.999, tau=1e-3)
    opt = FedAdam(41, **hp)
    w_ref, m_ref, v_ref = list(w0.astype(np.float64)), [0.0] * 41, [0.0] * 41
    for wm in means:
        opt.step(w, wm)
        w_ref, m_ref, v_ref = naive_fedadam_round(w_ref, wm, m_ref, v_ref, **hp)
        np.testing.assert_allclose(w, w_ref, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(opt.m.numpy(), m_ref, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(opt.v.numpy(), v_ref, rtol=RTOL, atol=1e-9)


def test_fedadam_first_step_has_no_bias_correction():
    # m = 0.1 Delta, v = 0.001 Delta^2  =>  step = eta_s * 0.1/sqrt(0.001) * sign(Delta)
    w = np.array([1.0, -1.0], np.float32)
    FedAdam(2, eta_s=1e-3, tau=1e-12).step(w, np.array([0.0, 0.0], np.float32))
    np.testing.assert_allclose(w, [1.0 - 1e-3 * 0.1 / math.sqrt(1e-3),
                                   -1.0 + 1e-3 * 0.1 / math.sqrt(1e-3)], rtol=1e-6)


def test_fedavgm_without_momentum_and_unit_lr_is_fedavg():
    rng = np.random.default_rng(2)
    w0, means = _rounds(rng, 16, 3)
    w, opt = w0.copy(), FedAvgM(16, eta_s=1.0, beta=0.0)
    for wm in means:
        opt.step(w, wm)
        np.testing.assert_allclose(w, wm, rtol=0, atol=1e-6)


def test_server_step_does_not_depend_on_thread_count():
    # Above torch's grain size, the element-wise loops are split across threads; the
    # replicas must come out bit-identical whatever the split.
    rng = np.random.default_rng(3)
    dim = 70_001
    w0, means = _rounds(rng, dim, 2)
    old = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for cls in (FedAvgM, FedAdam):
                w, opt = w0.copy(), cls(dim)
                for wm in means:
                    opt.step(w, wm)
                results.append(w)
    finally:
        torch.set_num_threads(old)
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_array_equal(results[1], results[3])


@pytest.mark.parametrize("cls", [FedAvgM, FedAdam])
def test_server_state_dict_round_trip_reproduces_next_step(cls):
    rng = np.random.default_rng(4)
    w0, means = _rounds(rng, 23, 4)
    w, opt = w0.copy(), cls(23)
    for wm in means[:3]:
        opt.step(w, wm)
    state = opt.state_dict()
    w_resumed, resumed = w.copy(), cls(23)
    resumed.load_state_dict(state)
    opt.step(w, means[3])
    state["v"].zero_()          # a saved state is a copy, not a view of live buffers
    resumed.step(w_resumed, means[3])
    np.testing.assert_array_equal(w_resumed, w)
    assert resumed.step_count == opt.step_count == 4


def test_server_load_state_dict_rejects_other_dim():
    with pytest.raises(ValueError, match="dim"):
        FedAvgM(4).load_state_dict(FedAvgM(5).state_dict())


@pytest.mark.parametrize("make, match", [
    (lambda: FedAvgM(10, eta_s=0.0), "eta_s"),
    (lambda: FedAvgM(10, eta_s=float("nan")), "eta_s"),
    (lambda: FedAvgM(10, beta=1.0), "beta"),
    (lambda: FedAvgM(0), "dim"),
    (lambda: FedAdam(10, beta_1=-0.1), "beta_1"),
    (lambda: FedAdam(10, beta_2=1.2), "beta_2"),
    (lambda: FedAdam(10, tau=0.0), "tau"),
    (lambda: FedAdam(10, eta_s=-1e-3), "eta_s"),
    (lambda: FedAdpWeights(0), "num_nodes"),
    (lambda: FedAdpWeights(3, alpha=0.0), "alpha"),
    (lambda: gompertz(0.5, alpha=-1.0), "alpha"),
])
def test_bad_hyper_parameters_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_step_rejects_wrong_size():
    with pytest.raises(ValueError, match="dim=4"):
        FedAvgM(4).step(np.zeros(5, np.float32), np.zeros(5, np.float32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_server_step_on_cuda_matches_cpu():
    rng = np.random.default_rng(5)
    w0, means = _rounds(rng, 1000, 3)
    for cls in (FedAvgM, FedAdam):
        w_cpu, w_gpu = torch.from_numpy(w0.copy()), torch.from_numpy(w0.copy()).cuda()
        a, b = cls(1000), cls(1000)
        for wm in means:
            a.step(w_cpu, torch.from_numpy(wm))
            b.step(w_gpu, torch.from_numpy(wm).cuda())
        assert b.state_dict()["m" if cls is FedAdam else "v"].device.type == "cpu"
        np.testing.assert_allclose(w_gpu.cpu().numpy(), w_cpu.numpy(), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------ FedAdp

def test_gompertz_closed_forms():
    a = 5.0
    assert gompertz(0.0) == pytest.approx(a * (1 - math.exp(-math.exp(a))))
    assert gompertz(0.0) == pytest.approx(5.0, abs=1e-12)
    assert gompertz(1.0) == pytest.approx(a * (1 - math.exp(-1)))
    assert gompertz(1.0) == pytest.approx(3.16, abs=5e-3)
    half_pi = a * (1 - math.exp(-math.exp(-a * (math.pi / 2 - 1))))
    assert gompertz(math.pi / 2) == pytest.approx(half_pi)
    assert gompertz(math.pi / 2) == pytest.approx(0.28, abs=5e-3)
    f = gompertz(np.linspace(0, math.pi, 50))
    # larger angle, smaller score (flat at alpha near 0, where it saturates)
    assert f.shape == (50,) and np.all(np.diff(f) <= 0) and f[0] - f[-1] > 4.99


def _fedadp_scalars(updates, n):
    """What the caller gathers: <Delta_i, g>, ||Delta_i||^2, ||g||^2."""
    n = np.asarray(n, dtype=np.float64)
    U = np.asarray(updates, dtype=np.float64)
    g = (n / n.sum()) @ U
    return U @ g, np.einsum("ij,ij->i", U, U), float(g @ g)


def test_fedadp_aligned_node_outweighs_orthogonal_one():
    # Node 0 and 1 point along e1 (g is close to e1), node 2 along e2: nearly orthogonal.
    updates = [np.array([1.0, 0.0, 0.0]), np.array([1.0, 0.0, 0.0]),
               np.array([0.0, 0.1, 0.0])]
    n = [1.0, 1.0, 1.0]
    psi = FedAdpWeights(3).update(np.arange(3), n, *_fedadp_scalars(updates, n))
    assert psi[0] == pytest.approx(psi[1])
    assert psi[0] > 10 * psi[2]
    assert psi.sum() == pytest.approx(1.0, abs=1e-12)


def test_fedadp_equal_angles_give_data_size_weights():
    # Every update equals g: all angles 0, so psi_i = n_i / sum n.
    u = np.array([0.5, -2.0, 1.0])
    n = np.array([10.0, 30.0, 60.0, 100.0])
    psi = FedAdpWeights(6).update(np.array([5, 0, 2, 3]), n,
                                  *_fedadp_scalars([u, 2 * u, 3 * u, 0.5 * u], n))
    np.testing.assert_allclose(psi, n / n.sum(), rtol=1e-12)


def test_fedadp_matches_naive_with_changing_participants():
    rng = np.random.default_rng(6)
    num_nodes, dim, alpha = 5, 9, 5.0
    n_all = rng.integers(50, 500, size=num_nodes).astype(np.float64)
    schedule = [[0, 1, 2], [1, 3], [4, 2, 0, 3], [3, 1], [0, 1, 2, 3, 4], [2]]
    fast = FedAdpWeights(num_nodes, alpha)
    smoothed = {i: 0.0 for i in range(num_nodes)}   # the reference's own bookkeeping
    counts = {i: 0 for i in range(num_nodes)}
    bias = rng.standard_normal(dim)
    for parts in schedule:
        updates = [bias * (i % 3) + rng.standard_normal(dim) for i in parts]
        n = list(n_all[parts])
        psi = fast.update(np.array(parts), n, *_fedadp_scalars(updates, n))
        psi_ref, theta_ref, sm_ref, c_ref = naive_fedadp_weights(
            updates, n, [smoothed[i] for i in parts], [counts[i] for i in parts], alpha)
        for k, i in enumerate(parts):
            smoothed[i], counts[i] = sm_ref[k], c_ref[k]
        np.testing.assert_allclose(psi, psi_ref, rtol=1e-9)
        np.testing.assert_allclose(fast.angles[parts], theta_ref, rtol=1e-9)
        np.testing.assert_allclose(fast.smoothed, [smoothed[i] for i in range(num_nodes)],
                                   rtol=1e-9)
        np.testing.assert_array_equal(fast.counts, [counts[i] for i in range(num_nodes)])
        assert psi.sum() == pytest.approx(1.0, abs=1e-12)
    assert fast.counts.tolist() == [3, 4, 4, 4, 2]


def test_fedadp_zero_norms_count_as_orthogonal():
    w = FedAdpWeights(3)
    # Node 1 did not move: theta = pi/2, and the round still counts.
    u = [np.array([1.0, 2.0]), np.zeros(2), np.array([1.0, 2.5])]
    psi = w.update(np.arange(3), [1.0, 1.0, 1.0], *_fedadp_scalars(u, [1, 1, 1]))
    assert np.all(np.isfinite(psi)) and psi.sum() == pytest.approx(1.0)
    assert w.angles[1] == pytest.approx(math.pi / 2) and w.counts[1] == 1
    assert psi[1] < psi[0] and psi[1] < psi[2]
    # g = 0 (opposite updates, equal data): every angle pi/2, weights fall back to n_i/n.
    u = [np.array([1.0, -1.0]), np.array([-1.0, 1.0])]
    psi = FedAdpWeights(2).update(np.arange(2), [3.0, 3.0], *_fedadp_scalars(u, [3, 3]))
    np.testing.assert_allclose(psi, [0.5, 0.5])


def test_fedadp_softmax_is_stable_for_large_alpha():
    # e^{f} with f near alpha = 1000 overflows float64; the log-sum-exp form must not.
    w = FedAdpWeights(2, alpha=1000.0)
    psi = w.update(np.arange(2), [1.0, 3.0], dots=[1.0, 0.0], norms_sq=[1.0, 1.0],
                   g_norm_sq=1.0)
    np.testing.assert_allclose(psi, [1.0, 0.0], atol=1e-300)


def test_fedadp_state_dict_round_trip_reproduces_next_step():
    rng = np.random.default_rng(7)
    a = FedAdpWeights(4)
    for parts in ([0, 1], [1, 2, 3], [0, 3]):
        a.update(np.array(parts), rng.uniform(1, 5, len(parts)),
                 rng.standard_normal(len(parts)), rng.uniform(1, 2, len(parts)), 1.5)
    b = FedAdpWeights(4)
    b.load_state_dict(a.state_dict())
    args = (np.array([3, 1, 0]), [2.0, 1.0, 4.0], [0.3, -0.2, 0.9], [1.0, 0.5, 2.0], 1.2)
    np.testing.assert_array_equal(a.update(*args), b.update(*args))
    np.testing.assert_array_equal(a.smoothed, b.smoothed)
    assert b.step_count == 4
    with pytest.raises(ValueError, match="num_nodes"):
        FedAdpWeights(5).load_state_dict(a.state_dict())


@pytest.mark.parametrize("kwargs, match", [
    (dict(participants=np.array([0, 0])), "participants"),
    (dict(participants=np.array([0, 7])), "participants"),
    (dict(participants=np.array([0.0, 1.0])), "participants"),
    (dict(n=[1.0, 0.0]), "n "),
    (dict(dots=[1.0]), "dots"),
    (dict(norms_sq=[1.0, -1.0]), "norms_sq"),
    (dict(g_norm_sq=float("nan")), "g_norm_sq"),
])
def test_fedadp_rejects_bad_inputs(kwargs, match):
    args = dict(participants=np.array([0, 1]), n=[1.0, 2.0], dots=[0.5, 0.5],
                norms_sq=[1.0, 1.0], g_norm_sq=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        FedAdpWeights(3).update(**args)


def test_sketched_cosines_match_naive():
    from naive import naive_sketched_cosines

    from fdahpc.aggregate import sketched_cosines

    rng = np.random.default_rng(5)
    sks = rng.normal(size=(4, 5, 7))
    sks[2, 1] = 0.0  # a zero row scores 0
    n = np.array([10.0, 20.0, 5.0, 1.0])
    np.testing.assert_allclose(sketched_cosines(n, sks), naive_sketched_cosines(n.tolist(), sks.tolist()), rtol=1e-12)


def test_fedadam_with_bias_correction_matches_naive():
    rng = np.random.default_rng(7)
    w0, means = _rounds(rng, 50, 4)
    hp = dict(eta_s=0.05, beta_1=0.9, beta_2=0.99, tau=1e-3)
    opt = FedAdam(50, bias_correction=True, **hp)
    w = w0.copy()
    w_ref, m_ref, v_ref = w0.astype(np.float64), np.zeros(50), np.zeros(50)
    for t, wm in enumerate(means, start=1):
        opt.step(w, wm)
        w_ref, m_ref, v_ref = naive_fedadam_round(w_ref, wm, m_ref, v_ref, t=t, **hp)
        np.testing.assert_allclose(w, w_ref, rtol=RTOL, atol=ATOL)
    # The first corrected step is eta_s per coordinate (m_hat = Delta, v_hat = Delta^2).
    w = np.array([1.0, -1.0], np.float32)
    FedAdam(2, eta_s=1e-2, tau=1e-12, bias_correction=True).step(w, np.zeros(2, np.float32))
    np.testing.assert_allclose(w, [0.99, -0.99], rtol=1e-6)
