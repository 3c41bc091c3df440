"""Semi-asynchronous aggregation rules and FedQS's client-side math, against tests/naive.py."""

import math
import re

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from fdahpc.semiasync.fedqs import (_FLAGS, CLIENT_TYPES, FSBC, FWBC, SSBC, SWBC, FedQSParams, classify, decide,
                                    heavy_ball_step_, similarity, speeds)
from fdahpc.semiasync.rules import RULES, SEMIASYNC_RULES, Update, build_rule

from naive import naive_fedbuff, naive_fedqs_decision, naive_fedqs_weights, naive_heavy_ball


def _buffer(rng, K, N, d, dtype=torch.float64, feedback_share=0.5):
    clients = rng.choice(N, size=K, replace=False)
    return [Update(client=int(c), version=0, staleness=int(rng.integers(0, 20)), n_samples=int(rng.integers(1, 500)),
                   payload=torch.tensor(rng.normal(size=d), dtype=dtype), similarity=float(rng.uniform(-1, 1)),
                   feedback=bool(rng.random() < feedback_share), G=float(rng.uniform(-1, 12)))
            for c in clients]


# ------------------------------------------------------------------------------ weights

@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("variant", ["paper", "code"])
@pytest.mark.parametrize("feedback", [True, False])
def test_fedqs_weights_match_naive(seed, variant, feedback):
    rng = np.random.default_rng(seed)
    N, K = 20, 6
    ups = _buffer(rng, K, N, 3)
    counts = rng.integers(0, 30, size=N)
    rule = build_rule("fedqs-avg", feedback=feedback, feedback_variant=variant)
    p = rule.weights(ups, counts, N)
    share = [counts[u.client] / max(1, counts.sum()) for u in ups]
    want = naive_fedqs_weights([u.n_samples for u in ups], [u.feedback for u in ups], [u.G for u in ups],
                               share, K, N, variant=variant, use_feedback=feedback)
    assert p.dtype == np.float64 and p.shape == (K,)
    assert_close(p, np.array(want), rtol=1e-13, atol=0)
    assert math.isclose(p.sum(), 1.0, rel_tol=1e-12)


def test_fedqs_weights_without_flags_are_sample_shares():
    ups = [Update(client=i, version=0, staleness=0, n_samples=n, payload=torch.zeros(2)) for i, n in enumerate([1, 3])]
    assert_close(build_rule("fedqs-sgd").weights(ups, np.zeros(4, dtype=int), 4), np.array([0.25, 0.75]))


def test_fedqs_feedback_weight_closed_form():
    # K=2, N=4: phi = 0.5; client 0 took 1 of 4 aggregations: F = 0.25, G = 1.
    ups = [Update(client=0, version=0, staleness=0, n_samples=10, payload=torch.zeros(1), feedback=True, G=1.0),
           Update(client=1, version=0, staleness=0, n_samples=10, payload=torch.zeros(1))]
    counts = np.array([1, 3, 0, 0])
    p0 = math.exp(0.25) / 0.75 * 2.0 / 4.0
    want = np.array([p0, 0.5]) / (p0 + 0.5)
    assert_close(build_rule("fedqs-avg").weights(ups, counts, 4), want, rtol=1e-15, atol=0)
    c0 = (math.e / 2) ** 0.25 * 2.0 / 4.0
    want = np.array([c0, 0.5]) / (c0 + 0.5)
    assert_close(build_rule("fedqs-avg", feedback_variant="code").weights(ups, counts, 4), want, rtol=1e-15, atol=0)


@pytest.mark.parametrize("variant", ["paper", "code"])
def test_fedqs_weights_stay_finite_and_positive_at_extremes(variant):
    # Client 0 took every aggregation (F = 1 >= 2 phi), G negative, huge, and exactly at the floor.
    N, K = 10, 3
    counts = np.zeros(N, dtype=int)
    counts[0] = 1000
    for G in (-5.0, 0.0, 1e9, 9.0):
        ups = [Update(client=c, version=0, staleness=0, n_samples=1, payload=torch.zeros(1), feedback=True, G=G)
               for c in (0, 1, 2)]
        p = build_rule("fedqs-sgd", feedback_variant=variant).weights(ups, counts, N)
        assert np.all(np.isfinite(p)) and np.all(p > 0)
        assert math.isclose(p.sum(), 1.0, rel_tol=1e-12)
        want = naive_fedqs_weights([1] * K, [True] * K, [G] * K, [1.0, 0.0, 0.0], K, N, variant=variant)
        assert_close(p, np.array(want), rtol=1e-13, atol=0)
    # No aggregation at all yet: the share is 0, not 0/0.
    p = build_rule("fedqs-avg").weights(ups, np.zeros(N, dtype=int), N)
    assert np.all(np.isfinite(p)) and math.isclose(p.sum(), 1.0)


def test_fedbuff_weights_and_baselines():
    ups = [Update(client=i, version=0, staleness=t, n_samples=1, payload=torch.zeros(1))
           for i, t in enumerate([0, 3, 8])]
    counts = np.zeros(3, dtype=int)
    assert_close(build_rule("fedbuff", server_lr=0.5).weights(ups, counts, 3),
                 np.array([0.5 / 3, 0.5 / 6, 0.5 / 9]), rtol=1e-15, atol=0)
    for name in ("fedavg", "fedsgd"):
        assert_close(build_rule(name).weights(ups, counts, 3), np.full(3, 1 / 3))


# ----------------------------------------------------------------------------- aggregate_

def _uploads(payloads, staleness=None):
    staleness = staleness or [0] * len(payloads)
    return [Update(client=i, version=0, staleness=t, n_samples=i + 1, payload=torch.tensor(p, dtype=torch.float64))
            for i, (p, t) in enumerate(zip(payloads, staleness))]


def test_fedavg_and_fedsgd_closed_forms():
    counts = np.zeros(4, dtype=int)
    models = [[1.0, 2.0], [3.0, -2.0], [5.0, 0.5], [-1.0, 7.5]]
    w = torch.tensor([100.0, 100.0], dtype=torch.float64)
    p = build_rule("fedavg").aggregate_(w, _uploads(models), counts, 4)
    assert_close(w, torch.tensor([2.0, 2.0], dtype=torch.float64), rtol=0, atol=0)
    assert_close(p, np.full(4, 0.25))
    w = torch.tensor([1.0, -1.0], dtype=torch.float64)
    build_rule("fedsgd").aggregate_(w, _uploads(models), counts, 4)
    assert_close(w, torch.tensor([3.0, 1.0], dtype=torch.float64), rtol=0, atol=0)


def test_fedavg_float32_in_place():
    w = torch.zeros(3, dtype=torch.float32)
    ptr = w.data_ptr()
    ups = [Update(client=i, version=0, staleness=0, n_samples=1,
                  payload=torch.full((3,), float(i), dtype=torch.float32)) for i in range(2)]
    build_rule("fedavg").aggregate_(w, ups, np.zeros(2, dtype=int), 2)
    assert w.data_ptr() == ptr and w.dtype == torch.float32
    assert_close(w, torch.full((3,), 0.5))


@pytest.mark.parametrize("seed", range(3))
def test_fedbuff_matches_naive(seed):
    rng = np.random.default_rng(seed)
    deltas = rng.normal(size=(5, 7)).tolist()
    tau = rng.integers(0, 10, size=5).tolist()
    w0 = rng.normal(size=7)
    w = torch.tensor(w0)
    build_rule("fedbuff", server_lr=0.7).aggregate_(w, _uploads(deltas, tau), np.zeros(5, dtype=int), 5)
    assert_close(w, torch.tensor(naive_fedbuff(w0, deltas, tau, 5, 0.7), dtype=torch.float64), rtol=1e-13, atol=1e-14)


def test_fedbuff_with_fresh_updates_is_fedsgd():
    rng = np.random.default_rng(7)
    deltas = rng.normal(size=(4, 5)).tolist()
    w1, w2 = torch.ones(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64)
    build_rule("fedbuff").aggregate_(w1, _uploads(deltas), np.zeros(4, dtype=int), 4)
    build_rule("fedsgd").aggregate_(w2, _uploads(deltas), np.zeros(4, dtype=int), 4)
    assert_close(w1, w2, rtol=0, atol=0)


@pytest.mark.parametrize("seed", range(3))
def test_fedqs_aggregate_closed_forms(seed):
    rng = np.random.default_rng(seed)
    N, K, d = 12, 4, 6
    ups = _buffer(rng, K, N, d)
    counts = rng.integers(0, 5, size=N)
    X = np.stack([u.payload.numpy() for u in ups])
    w0 = rng.normal(size=d)

    w = torch.tensor(w0)
    p = build_rule("fedqs-avg").aggregate_(w, ups, counts, N)
    assert_close(w, torch.tensor(p @ X), rtol=1e-13, atol=1e-14)

    w = torch.tensor(w0)
    p2 = build_rule("fedqs-sgd").aggregate_(w, ups, counts, N)
    assert_close(p2, p, rtol=0, atol=0)
    assert_close(w, torch.tensor(w0 + p @ X), rtol=1e-13, atol=1e-14)


def test_fedqs_avg_of_identical_models_is_that_model():
    rng = np.random.default_rng(3)
    ups = _buffer(rng, 5, 9, 4)
    for u in ups:
        u.payload = torch.tensor([0.5, -1.25, 2.0, 8.0], dtype=torch.float64)
    w = torch.zeros(4, dtype=torch.float64)
    build_rule("fedqs-avg").aggregate_(w, ups, rng.integers(0, 9, size=9), 9)
    assert_close(w, ups[0].payload, rtol=1e-15, atol=1e-15)


def test_rule_metadata_and_state():
    assert SEMIASYNC_RULES == ("fedavg", "fedsgd", "fedbuff", "fedqs-avg", "fedqs-sgd")
    assert set(RULES) == set(SEMIASYNC_RULES)
    uploads = {"fedavg": "model", "fedsgd": "update", "fedbuff": "update", "fedqs-avg": "model", "fedqs-sgd": "update"}
    for name in SEMIASYNC_RULES:
        r = build_rule(name)
        assert r.name == name and r.uploads == uploads[name]
        assert r.needs_client_state == name.startswith("fedqs")
        r.load_state_dict(r.state_dict())
    with pytest.raises(ValueError, match="--strategy"):
        build_rule("fedqs-avg").load_state_dict(build_rule("fedavg").state_dict())


def test_rule_errors():
    with pytest.raises(ValueError, match="--strategy 'fedprox'.*fedavg"):
        build_rule("fedprox")
    with pytest.raises(ValueError, match="server_lr"):
        build_rule("fedbuff", server_lr=0.0)
    with pytest.raises(ValueError, match="server_lr"):
        build_rule("fedbuff", server_lr=float("nan"))
    with pytest.raises(ValueError, match="feedback_variant"):
        build_rule("fedqs-avg", feedback_variant="authors")
    with pytest.raises(ValueError, match="feedback"):
        build_rule("fedqs-sgd", feedback="yes")
    r = build_rule("fedavg")
    w = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="updates"):
        r.aggregate_(w, [], np.zeros(2, dtype=int), 2)
    with pytest.raises(ValueError, match="payload"):
        r.aggregate_(w, _uploads([[1.0, 2.0, 3.0]]), np.zeros(2, dtype=int), 2)
    with pytest.raises(ValueError, match="aliases"):
        r.aggregate_(w, [Update(0, 0, 0, 1, w)], np.zeros(2, dtype=int), 2)
    with pytest.raises(ValueError, match="counts"):
        r.aggregate_(w, _uploads([[1.0, 2.0]]), np.zeros(3, dtype=int), 2)
    with pytest.raises(ValueError, match="staleness"):
        build_rule("fedbuff").weights(_uploads([[1.0]], [-1]), np.zeros(1, dtype=int), 1)
    with pytest.raises(ValueError, match="n_samples"):
        build_rule("fedqs-avg").weights([Update(0, 0, 0, 0, torch.zeros(1))], np.zeros(1, dtype=int), 1)
    with pytest.raises(ValueError, match="G"):
        build_rule("fedqs-avg").weights([Update(0, 0, 0, 1, torch.zeros(1), feedback=True, G=float("nan"))],
                                        np.zeros(1, dtype=int), 1)


# ------------------------------------------------------------------------- Mod① similarity

def test_similarity_kinds():
    a = torch.tensor([3.0, 0.0])
    b = torch.tensor([0.0, 0.5])
    assert similarity(a, a * 7) == pytest.approx(1.0)
    assert similarity(a, -a) == pytest.approx(-1.0)
    assert similarity(a, b) == pytest.approx(0.0)
    assert similarity(a, b, "euclidean") == pytest.approx(1 / (1 + math.sqrt(2)))
    assert similarity(a, -a, "euclidean") == pytest.approx(1 / 3)
    assert similarity(a, a * 0.01, "euclidean") == pytest.approx(1.0)
    # unit vectors (1,0) and (0,1): L1 distance 2, divided by sqrt(2)
    assert similarity(a, b, "manhattan") == pytest.approx(1 / (1 + math.sqrt(2)))
    c = torch.tensor([1.0, 1.0])  # unit (1,1)/sqrt2 and its opposite: L1 distance 2 sqrt2, the bound 1/3
    assert similarity(c, -c, "manhattan") == pytest.approx(1 / 3)
    orth = 1 / (1 + math.sqrt(2))
    for kind, neutral in (("cosine", 0.0), ("euclidean", orth), ("manhattan", orth)):
        assert similarity(torch.zeros(2), b, kind) == neutral
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=50), rng.normal(size=50)
    want = x @ y / np.linalg.norm(x) / np.linalg.norm(y)
    assert similarity(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)) == \
        pytest.approx(want, rel=1e-6)
    for kind in ("euclidean", "manhattan"):
        assert 1 / 3 - 1e-12 <= similarity(torch.tensor(x), torch.tensor(y), kind) <= 1.0
    with pytest.raises(ValueError, match="kind"):
        similarity(a, b, "angle")
    with pytest.raises(ValueError, match="shapes"):
        similarity(a, torch.zeros(3))


# ------------------------------------------------------------------------ Mod② decisions

P = FedQSParams()


def _check_decision(lr_prev, f_i, f_bar, s_i, s_bar, labels, params=P):
    d = decide(params, lr_prev, f_i, f_bar, s_i, s_bar, None if labels is None else np.array(labels))
    kind, lr, m, feedback, F, G = naive_fedqs_decision(
        lr_prev, f_i, f_bar, s_i, s_bar, labels, a=params.a, m0=params.m0, k=params.k, lr_min=params.lr_min,
        lr_max=params.lr_max, cap=params.cap, label_gap=params.label_gap, momentum=params.momentum)
    assert CLIENT_TYPES[d.type] == kind
    assert d.feedback == feedback
    assert d.lr == pytest.approx(lr, rel=1e-15, abs=0)
    assert d.momentum == pytest.approx(m, rel=1e-15, abs=0)
    assert d.F == pytest.approx(F, rel=1e-15) and d.G == pytest.approx(G, rel=1e-15)
    return d


def test_decide_branches():
    # FSBC: fast, strongly biased: lr kept, feedback, no momentum.
    d = _check_decision(0.1, 2.0, 1.0, 0.2, 0.5, None)
    assert (d.type, d.lr, d.momentum, d.feedback) == (FSBC, 0.1, 0.0, True)
    # FWBC: fast, weakly biased: lr - a F with F = 0.5, momentum m0 + k (1/G - 1), G = 0.5.
    d = _check_decision(0.1, 2.0, 1.0, 0.8, 0.4, None)
    assert d.type == FWBC and d.lr == pytest.approx(0.1 - 0.002 * 0.5) and d.momentum == pytest.approx(0.3)
    assert not d.feedback
    # SWBC: straggling, weakly biased: lr + a F with F = 4, G = 1: momentum m0.
    d = _check_decision(0.1, 0.25, 1.0, 0.5, 0.5, None)
    assert d.type == SWBC and d.lr == pytest.approx(0.108) and d.momentum == pytest.approx(0.1)
    # SSBC, accuracy even over labels: a straggler (momentum, no feedback); G = 2 -> m = 0.
    d = _check_decision(0.1, 0.5, 1.0, 0.25, 0.5, [0.7, 0.8, 0.6])
    assert d.type == SSBC and not d.feedback and d.lr == pytest.approx(0.104) and d.momentum == 0.0
    d = _check_decision(0.1, 0.5, 1.0, 0.4, 0.5, [0.7, 0.8, 0.6])
    assert d.momentum == pytest.approx(0.1 + 0.2 * (0.8 - 1))
    # SSBC, skewed labels: feedback, no momentum.
    d = _check_decision(0.1, 0.5, 1.0, 0.4, 0.5, [0.9, 0.2, 0.6])
    assert d.type == SSBC and d.feedback and d.momentum == 0.0 and d.lr == pytest.approx(0.104)
    # SSBC without a validation split, or only NaN labels: a straggler.
    assert not _check_decision(0.1, 0.5, 1.0, 0.4, 0.5, None).feedback
    assert not decide(P, 0.1, 0.5, 1.0, 0.4, 0.5, np.array([np.nan])).feedback
    assert not _check_decision(0.1, 0.5, 1.0, 0.4, 0.5, []).feedback


def test_decide_ties_and_gap_boundary():
    assert classify(1.0, 1.0, 0.5, 0.5) == SWBC
    assert classify(1.0 + 1e-12, 1.0, 0.5, 0.5) == FWBC
    assert classify(1.0, 1.0, 0.5 - 1e-12, 0.5) == SSBC
    # max - min exactly the gap counts as skewed (the paper: "< 30 points" is a straggler).
    q = FedQSParams(label_gap=0.25)
    assert decide(q, 0.1, 0.5, 1.0, 0.4, 0.5, np.array([0.25, 0.5])).feedback
    assert not decide(q, 0.1, 0.5, 1.0, 0.4, 0.5, np.array([0.25, 0.5 - 1e-9])).feedback


def test_decide_clipping_and_caps():
    # lr hits lr_max (SWBC, F capped at 9 for a never-aggregated client) and lr_min (FWBC).
    d = _check_decision(0.199, 0.0, 1.0, 0.9, 0.5, None)
    assert d.F == 9.0 and d.lr == 0.2
    d = _check_decision(0.0015, 5.0, 1.0, 0.9, 0.5, None, FedQSParams(a=0.01))
    assert d.lr == 0.001
    # Momentum clipped to m0 + 0.4 (tiny G) and to 0 (G at its cap).
    d = _check_decision(0.1, 2.0, 1.0, 0.9, 0.001, None)
    assert d.momentum == pytest.approx(0.5)
    d = _check_decision(0.1, 0.5, 1.0, 0.5, 0.5, None, FedQSParams(k=0.5))
    assert d.momentum == pytest.approx(0.1)
    d = _check_decision(0.1, 2.0, 1.0, 0.05, 0.5, None, FedQSParams(k=0.5))  # FSBC: G = 9 but feedback
    assert d.G == 9.0 and d.momentum == 0.0
    d = _check_decision(0.1, 0.5, 1.0, 0.05, 0.5, [0.5, 0.5], FedQSParams(k=0.5))  # SSBC straggler, G = 9
    assert d.G == 9.0 and d.momentum == 0.0
    # Negative cosines: s_i <= 0 gives the cap; s_bar <= 0 < s_i gives G = 0 and the top momentum.
    d = _check_decision(0.1, 0.5, 1.0, -0.3, 0.2, [0.5])
    assert d.G == 9.0
    d = _check_decision(0.1, 0.5, 1.0, 0.3, -0.2, None)
    assert d.G == 0.0 and d.momentum == pytest.approx(0.5)
    # The momentum ablation.
    d = _check_decision(0.1, 0.5, 1.0, 0.3, 0.2, None, FedQSParams(momentum=False))
    assert d.type == SWBC and d.momentum == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_decide_random_matches_naive(seed):
    rng = np.random.default_rng(seed)
    params = FedQSParams(a=0.01, k=0.3)
    for _ in range(200):
        labels = None if rng.random() < 0.2 else rng.uniform(0, 1, size=int(rng.integers(0, 5))).tolist()
        f_i = float(rng.choice([0.0, *rng.uniform(0, 3, 3)]))
        _check_decision(float(rng.uniform(0.001, 0.2)), f_i, float(rng.uniform(0.5, 2)), float(rng.uniform(-1, 1)),
                        float(rng.uniform(-0.5, 1)), labels, params)


def test_params_validation():
    for kwargs, name in (({"eta0": 0}, "eta0"), ({"a": -1}, "a"), ({"m0": 0.6}, "m0"), ({"k": -0.1}, "k"),
                         ({"lr_min": 0}, "lr_min"), ({"lr_max": 0.0005}, "lr_max"), ({"cap": 0}, "cap"),
                         ({"label_gap": 30}, "label_gap"), ({"a": float("nan")}, "a"), ({"momentum": 1}, "momentum")):
        with pytest.raises(ValueError, match=re.escape(_FLAGS.get(name, f"FedQSParams.{name}") + " ")):
            FedQSParams(**kwargs)


# ---------------------------------------------------------------------------- speeds

def test_speeds():
    f, f_bar = speeds(np.array([0, 2, 4, 6]))
    assert_close(f, np.array([0.0, 2 / 3, 4 / 3, 2.0]))
    assert f_bar == pytest.approx(4 / 3)
    f, f_bar = speeds(np.zeros(5, dtype=int))
    assert np.all(f == 0) and f_bar == 1.0
    # Inactive clients leave the mean; f is still reported for them.
    f, f_bar = speeds(np.array([8, 2, 4, 0]), active=np.array([False, True, True, True]))
    assert_close(f, np.array([4.0, 1.0, 2.0, 0.0]))
    assert f_bar == pytest.approx(1.5)
    f, f_bar = speeds(np.array([3, 0]), active=np.array([False, True]))
    assert np.all(f == 0) and f_bar == 1.0
    with pytest.raises(ValueError, match="active"):
        speeds(np.array([1, 2]), active=np.array([True]))
    with pytest.raises(ValueError, match="counts"):
        speeds(np.array([1, -2]))


# ------------------------------------------------------------------------ heavy ball

@pytest.mark.parametrize("m", [0.0, 0.3, 0.9])
def test_heavy_ball_matches_equation_3(m):
    rng = np.random.default_rng(1)
    w0, grads = rng.normal(size=4), rng.normal(size=(5, 4))
    w = torch.tensor(w0)
    buf = torch.zeros(4, dtype=torch.float64)
    want = naive_heavy_ball(w0, grads.tolist(), 0.05, m)
    for e in range(5):
        heavy_ball_step_(w, torch.tensor(grads[e]), buf, 0.05, m)
        assert_close(w, torch.tensor(want[e], dtype=torch.float64), rtol=1e-13, atol=1e-14)


def test_heavy_ball_zero_momentum_is_sgd_and_none_grad_skips():
    w = torch.tensor([1.0, 2.0], dtype=torch.float64)
    buf = torch.tensor([5.0, 5.0], dtype=torch.float64)
    heavy_ball_step_(w, torch.tensor([1.0, -1.0], dtype=torch.float64), buf, 0.5, 0.0)
    assert_close(w, torch.tensor([0.5, 2.5], dtype=torch.float64), rtol=0, atol=0)
    heavy_ball_step_(w, None, buf, 0.5, 0.9)
    assert_close(w, torch.tensor([0.5, 2.5], dtype=torch.float64), rtol=0, atol=0)
