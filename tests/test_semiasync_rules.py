"""Semi-asynchronous aggregation rules and FedQS's client-side math, against tests/naive.py."""

import math
import re

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from fdahpc.semiasync.fedqs import (_FLAGS, CLIENT_TYPES, FSBC, FWBC, SSBC, SWBC, FedQSParams, classify, decide,
                                    heavy_ball_step_, label_accuracies, label_probe, layer_angle, layer_bounds,
                                    similarity, speeds)
from fdahpc.semiasync.rules import BUFFER_RULES, SEMIASYNC_RULES, Update, build_rule

from naive import (naive_authors_weights, naive_fedbuff, naive_fedqs_decision, naive_fedqs_weights, naive_heavy_ball,
                   naive_layer_angle, naive_mstep, naive_wkafl)


def _buffer(rng, K, N, d, dtype=torch.float64, feedback_share=0.5):
    clients = rng.choice(N, size=K, replace=False)
    return [Update(client=int(c), version=0, staleness=int(rng.integers(0, 20)), n_samples=int(rng.integers(1, 500)),
                   payload=torch.tensor(rng.normal(size=d), dtype=dtype), similarity=float(rng.uniform(-1, 1)),
                   feedback=bool(rng.random() < feedback_share), G=float(rng.uniform(-1, 12)))
            for c in clients]


# ------------------------------------------------------------------------------ weights

def _round_now(ups):
    return ups[0].version + ups[0].staleness + 1


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("variant,weight", [("paper", None), ("authors", None), ("paper", "misread"),
                                            ("paper", "authors"), ("authors", "paper")])
@pytest.mark.parametrize("feedback", [True, False])
def test_fedqs_weights_match_naive(seed, variant, weight, feedback):
    rng = np.random.default_rng(seed)
    N, K = 20, 6
    ups = _buffer(rng, K, N, 3)
    counts = rng.integers(0, 30, size=N)
    for u in ups:  # one server version for the buffer: 40
        u.version = 40 - u.staleness
    rule = build_rule("fedqs-avg", feedback=feedback, variant=variant, feedback_weight=weight)
    p = rule.weights(ups, counts, N)
    want = naive_fedqs_weights([u.n_samples for u in ups], [u.feedback for u in ups], [u.G for u in ups],
                               [u.staleness for u in ups], [u.client for u in ups], counts, K, N, 41,
                               weight=weight or variant, use_feedback=feedback, reset_flags=variant == "authors")
    assert p.dtype == np.float64 and p.shape == (K,)
    assert_close(p, np.array(want), rtol=1e-13, atol=0)
    assert math.isclose(p.sum(), 1.0, rel_tol=1e-12)


def test_fedqs_weights_without_flags_are_sample_shares():
    ups = [Update(client=i, version=0, staleness=0, n_samples=n, payload=torch.zeros(2)) for i, n in enumerate([1, 3])]
    assert_close(build_rule("fedqs-sgd").weights(ups, np.zeros(4, dtype=int), 4), np.array([0.25, 0.75]))


def _two(G=1.0, staleness=0, n=(10, 30)):
    # N=4, K=2: phi = 0.5. Server at version 3 (aggregation 4 now); client 0 flagged.
    return [Update(client=0, version=3 - staleness, staleness=staleness, n_samples=n[0], payload=torch.zeros(1),
                   feedback=True, G=G),
            Update(client=1, version=3, staleness=0, n_samples=n[1], payload=torch.zeros(1))]


def test_fedqs_feedback_weight_by_hand():
    # Client 0 took part in 1 of the 3 aggregations so far: with this one F = 2/4 = 0.5 = phi.
    counts = np.array([1, 3, 0, 2])
    # paper: (e/2)^0 (1+1)^2 / 2 = 2 replaces 1/4; client 1 keeps 3/4.
    assert_close(build_rule("fedqs-avg").weights(_two(), counts, 4), np.array([2.0, 0.75]) / 2.75, rtol=1e-15, atol=0)
    # G = 5 is bounded to 2: (1+2)^2 / 2 = 4.5.
    assert_close(build_rule("fedqs-avg").weights(_two(G=5.0), counts, 4), np.array([4.5, 0.75]) / 5.25, rtol=1e-15,
                 atol=0)
    # authors: F is client 0's share of every aggregated update, this buffer's included:
    # counts after it [2, 4, 0, 2], F = 2/8; 1/4 * (e/2)^(0.5 - 0.25) * (1 + 1^2), normalised with 3/4.
    a = (math.e / 2) ** 0.25
    assert_close(build_rule("fedqs-avg", variant="authors").weights(_two(), counts, 4),
                 np.array([0.5 * a, 0.75]) / (0.5 * a + 0.75), rtol=1e-14, atol=0)
    # authors, G = 3 -> min(G, 2) = 2: 1/4 * (e/2)^0.25 * 5.
    assert_close(build_rule("fedqs-sgd", variant="authors").weights(_two(G=3.0), counts, 4),
                 np.array([1.25 * a, 0.75]) / (1.25 * a + 0.75), rtol=1e-14, atol=0)
    # a client twice in the buffer counts twice: counts after [1 + 2, 3 + 1, 0, 2], F = 3/9;
    # K = 3 here, so phi = 3/4; only the first entry is flagged
    twice = _two() + [Update(client=0, version=3, staleness=0, n_samples=10, payload=torch.zeros(1))]
    b = (math.e / 2) ** (3 / 4 - 3 / 9)
    w = np.array([10 * b * 2, 30, 10]) / 50
    assert_close(build_rule("fedqs-avg", variant="authors").weights(twice, counts, 4), w / w.sum(), rtol=1e-14, atol=0)
    # F away from phi: counts[0] = 3 -> F = 1, (e/2)^(-0.5).
    c3 = np.array([3, 3, 0, 0])
    f = (math.e / 2) ** -0.5
    assert_close(build_rule("fedqs-avg").weights(_two(), c3, 4), np.array([2 * f, 0.75]) / (2 * f + 0.75),
                 rtol=1e-14, atol=0)
    # authors: counts after [4, 4, 0, 0], F = 1/2 = phi: (e/2)^0
    assert_close(build_rule("fedqs-avg", variant="authors").weights(_two(), c3, 4),
                 np.array([0.5, 0.75]) / 1.25, rtol=1e-14, atol=0)
    # authors-per-round: the authors' weight with F = (n(0) + 1) / 4 = 1/2 = phi here, factor 1;
    # with c3, F = 4/4: 1/4 * (e/2)^(0.5 - 1) * 2
    assert_close(build_rule("fedqs-avg", variant="authors", feedback_weight="authors-per-round").weights(_two(), counts, 4),
                 np.array([0.5, 0.75]) / 1.25, rtol=1e-14, atol=0)
    assert_close(build_rule("fedqs-avg", variant="authors", feedback_weight="authors-per-round").weights(_two(), c3, 4),
                 np.array([0.5 * f, 0.75]) / (0.5 * f + 0.75), rtol=1e-14, atol=0)
    # misread (the old weight): F = 1/6 of all updates, exp(1/3)/(1 - 1/6) * 2/4.
    m = math.exp(0.5 - 1 / 6) / (1 - 1 / 6) * 2 / 4
    assert_close(build_rule("fedqs-avg", feedback_weight="misread").weights(_two(), counts, 4),
                 np.array([m, 0.75]) / (m + 0.75), rtol=1e-14, atol=0)
    # "code", the old name, is the authors' weight.
    assert_close(build_rule("fedqs-avg", feedback_weight="code").weights(_two(), counts, 4),
                 np.array([0.5 * a, 0.75]) / (0.5 * a + 0.75), rtol=1e-14, atol=0)


def test_fedqs_authors_flags_reset_after_each_aggregation():
    counts = np.array([1, 3, 0, 2])
    # A flagged update one version stale: an aggregation has reset its flag in the authors' variant ...
    assert_close(build_rule("fedqs-avg", variant="authors").weights(_two(staleness=1), counts, 4),
                 np.array([0.25, 0.75]), rtol=1e-15, atol=0)
    # ... and not in the paper's.
    assert_close(build_rule("fedqs-avg").weights(_two(staleness=1), counts, 4), np.array([2.0, 0.75]) / 2.75,
                 rtol=1e-15, atol=0)


@pytest.mark.parametrize("variant,weight", [("paper", None), ("authors", None), ("paper", "misread")])
def test_fedqs_weights_stay_finite_and_positive_at_extremes(variant, weight):
    # Client 0 took every aggregation (F = 1 >= 2 phi), G negative, huge, and exactly at the bounds.
    N, K = 10, 3
    counts = np.zeros(N, dtype=int)
    counts[0] = 1000
    for G in (-5.0, 0.0, 1e9, 9.0, 2.0):
        ups = [Update(client=c, version=1000, staleness=0, n_samples=1, payload=torch.zeros(1), feedback=True, G=G)
               for c in (0, 1, 2)]
        p = build_rule("fedqs-sgd", variant=variant, feedback_weight=weight).weights(ups, counts, N)
        assert np.all(np.isfinite(p)) and np.all(p > 0)
        assert math.isclose(p.sum(), 1.0, rel_tol=1e-12)
        want = naive_fedqs_weights([1] * K, [True] * K, [G] * K, [0] * K, [0, 1, 2], counts, K, N, 1001,
                                   weight=weight or variant)
        assert_close(p, np.array(want), rtol=1e-13, atol=0)
    # No aggregation at all yet.
    ups = [Update(client=c, version=0, staleness=0, n_samples=1, payload=torch.zeros(1), feedback=True) for c in (0, 1)]
    p = build_rule("fedqs-avg", variant=variant, feedback_weight=weight).weights(ups, np.zeros(N, dtype=int), N)
    assert np.all(np.isfinite(p)) and math.isclose(p.sum(), 1.0)


def test_authors_weights_equal_their_formula_on_a_buffer():
    """A buffer as the server saw it (clients, samples, staleness, flags, G, counts before
    it): the authors' variant's weights equal a plain transcription of their formula."""
    N, K = 12, 5
    clients = [7, 2, 11, 0, 5]
    n = [412, 37, 129, 260, 88]
    staleness = [0, 3, 0, 0, 1]
    flags = [True, True, False, True, True]
    G = [0.4, 1.7, 1.1, 2.6, 0.9]
    counts = np.array([9, 4, 6, 0, 2, 5, 3, 11, 1, 0, 7, 2])
    version = 13
    ups = [Update(client=c, version=version - t, staleness=t, n_samples=ni, payload=torch.zeros(1), feedback=f, G=g)
           for c, ni, t, f, g in zip(clients, n, staleness, flags, G)]
    p = build_rule("fedqs-avg", variant="authors").weights(ups, counts, N)
    # Their flags are reset at every aggregation: only fresh updates still hold one.
    flag = [f and t == 0 for f, t in zip(flags, staleness)]
    after = counts + np.bincount(clients, minlength=N)  # their freq, this buffer counted
    F = [after[c] / after.sum() for c in clients]
    assert_close(p, np.array(naive_authors_weights(n, flag, G, F, K / N)), rtol=1e-13, atol=0)


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


def test_sample_weighted_fedavg_and_fedsgd_by_hand():
    counts = np.zeros(4, dtype=int)
    models = [[1.0, 2.0], [3.0, -2.0], [5.0, 0.5]]  # n_i = 1, 2, 3 (see _uploads)
    w = torch.tensor([100.0, 100.0], dtype=torch.float64)
    p = build_rule("fedavg", weighting="samples").aggregate_(w, _uploads(models), counts, 4)
    assert_close(p, np.array([1, 2, 3]) / 6)
    assert_close(w, torch.tensor([(1 + 6 + 15) / 6, (2 - 4 + 1.5) / 6], dtype=torch.float64), rtol=1e-15, atol=0)
    w = torch.tensor([1.0, -1.0], dtype=torch.float64)
    build_rule("fedsgd", weighting="samples").aggregate_(w, _uploads(models), counts, 4)
    assert_close(w, torch.tensor([1 + 22 / 6, -1 - 0.5 / 6], dtype=torch.float64), rtol=1e-15, atol=0)


def test_mstep_by_hand_and_naive():
    # K = 2, alpha = 0.6: beta = 0.3 / sqrt(1 + tau); tau = 0 and 3: 0.3 and 0.15; the old model keeps 0.55.
    w = torch.tensor([10.0, -2.0], dtype=torch.float64)
    p = build_rule("mstep").aggregate_(w, _uploads([[0.0, 2.0], [4.0, 6.0]], [0, 3]), np.zeros(2, dtype=int), 2)
    assert_close(p, np.array([0.3, 0.15]), rtol=1e-15, atol=0)
    assert_close(w, torch.tensor([5.5 + 0.6, -1.1 + 0.6 + 0.9], dtype=torch.float64), rtol=1e-14, atol=0)
    rng = np.random.default_rng(5)
    models, tau, w0 = rng.normal(size=(4, 6)).tolist(), rng.integers(0, 9, size=4).tolist(), rng.normal(size=6)
    w = torch.tensor(w0)
    build_rule("mstep", server_lr=0.9).aggregate_(w, _uploads(models, tau), np.zeros(4, dtype=int), 4)
    assert_close(w, torch.tensor(naive_mstep(w0, models, tau, 4, 0.9), dtype=torch.float64), rtol=1e-13, atol=1e-14)
    # Fresh models and alpha = 1: plain FedAvg.
    w1, w2 = torch.zeros(6, dtype=torch.float64), torch.zeros(6, dtype=torch.float64)
    build_rule("mstep", server_lr=1.0).aggregate_(w1, _uploads(models), np.zeros(4, dtype=int), 4)
    build_rule("fedavg").aggregate_(w2, _uploads(models), np.zeros(4, dtype=int), 4)
    assert_close(w1, w2, rtol=1e-15, atol=1e-15)


def test_wkafl_by_hand_and_naive():
    # tau = 0, 1, 2: a proportional to (e/2)^(-tau).
    deltas = [[1.0, 0.0], [3.0, 1.0], [-5.0, 0.0]]
    tau = [0, 1, 2]
    a = np.array([1.0, 2 / math.e, (2 / math.e) ** 2])
    a /= a.sum()
    g = a @ np.array(deltas)
    assert g[0] > 0  # the third update points against the estimate: the filter drops it
    keep = np.array([1.0, 1.0, 0.0])
    want = a * keep / (a * keep).sum()
    w = torch.zeros(2, dtype=torch.float64)
    p = build_rule("wkafl").aggregate_(w, _uploads(deltas, tau), np.zeros(3, dtype=int), 3)
    assert_close(p, want, rtol=1e-14, atol=0)
    assert_close(w, torch.tensor(want @ np.array(deltas)), rtol=1e-14, atol=0)
    rng = np.random.default_rng(2)
    for _ in range(5):
        deltas, tau, w0 = rng.normal(size=(5, 4)).tolist(), rng.integers(0, 6, size=5).tolist(), rng.normal(size=4)
        w = torch.tensor(w0)
        build_rule("wkafl", server_lr=0.5).aggregate_(w, _uploads(deltas, tau), np.zeros(5, dtype=int), 5)
        assert_close(w, torch.tensor(naive_wkafl(w0, deltas, tau, 0.5), dtype=torch.float64), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", ["fedsgd", "fedbuff", "wkafl", "fedqs-sgd"])
def test_update_rules_average_running_statistics_as_values(name):
    # Payload = 2 parameter changes, then 1 running variance (a value, not a change).
    # Parameters move by the rule's weighted sum; the statistic becomes the mean of the
    # clients' values under the same weights, normalised, so it can never turn negative.
    payloads = [[1.0, 0.0, 4.0], [3.0, 1.0, 0.5], [-5.0, 0.0, 2.0]]
    tau = [0, 1, 2]
    w = torch.tensor([0.5, 0.5, 100.0], dtype=torch.float64)
    p = build_rule(name).aggregate_(w, _uploads(payloads, tau), np.zeros(3, dtype=int), 3, params=2)
    if name == "wkafl":  # the cosine over the parameters alone: the third update is dropped
        a = np.array([1.0, 2 / math.e, 0.0])
        assert_close(p, a / a.sum(), rtol=1e-14, atol=0)
    if name == "fedbuff":
        assert_close(p, 1 / (3 * np.sqrt([1.0, 2.0, 3.0])), rtol=1e-14, atol=0)
    x = np.array(payloads)
    assert_close(w[:2], torch.tensor([0.5, 0.5]) + torch.tensor(p @ x[:, :2]), rtol=1e-14, atol=1e-15)
    assert_close(float(w[2]), float((p / p.sum()) @ x[:, 2]), rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="params 4"):
        build_rule(name).aggregate_(w, _uploads(payloads), np.zeros(3, dtype=int), 3, params=4)


def test_model_rules_ignore_the_statistics_split():
    models = [[1.0, 2.0, 3.0], [3.0, -2.0, 1.0]]
    w1, w2 = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    build_rule("fedavg").aggregate_(w1, _uploads(models), np.zeros(2, dtype=int), 2, params=2)
    build_rule("fedavg").aggregate_(w2, _uploads(models), np.zeros(2, dtype=int), 2)
    assert_close(w1, w2, rtol=0, atol=0)


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
    assert SEMIASYNC_RULES == tuple(BUFFER_RULES)  # the registry, in the order registered
    uploads = {"fedavg": "model", "fedsgd": "update", "fedbuff": "update", "mstep": "model", "wkafl": "update",
               "fedqs-avg": "model", "fedqs-sgd": "update"}
    assert set(uploads) <= set(BUFFER_RULES)
    for name in SEMIASYNC_RULES:
        r = build_rule(name)
        assert r.name == name and r.uploads in ("model", "update") and r.uploads == uploads.get(name, r.uploads)
        assert r.needs_client_state == name.startswith("fedqs")
        r.load_state_dict(r.state_dict())
    with pytest.raises(ValueError, match="--strategy"):
        build_rule("fedqs-avg").load_state_dict(build_rule("fedavg").state_dict())


def test_rules_register_in_one_line_and_the_mode_reads_their_options_from_the_registry():
    from fdahpc.options import MeanOptions
    from fdahpc.run import mode_of
    from fdahpc.semiasync.rules import (BufferRule, FedQSRuleOptions, MStepOptions, ServerLROptions, buffer_rule,
                                        build_buffer_rule)

    # What the mode read before the registry, written by hand: the registry derives the same.
    fedqs = {"fedqs_a", "fedqs_m0", "fedqs_k", "fedqs_lr_min", "fedqs_lr_max", "fedqs_variant", "fedqs_similarity",
             "fedqs_feedback", "fedqs_authors_momentum", "fedqs_sketch_similarity", "fedqs_no_momentum",
             "fedqs_no_feedback"}
    by_hand = {"fedavg": {"weighting"}, "fedsgd": {"weighting"}, "fedbuff": {"server_lr"}, "mstep": {"server_lr"},
               "wkafl": {"server_lr"}, "fedqs-avg": fedqs, "fedqs-sgd": fedqs}
    derived = mode_of("semiasync").RULE_OPTIONS
    assert {name: derived[name] for name in by_hand} == by_hand
    assert [BUFFER_RULES[n].Options for n in ("fedavg", "fedbuff", "mstep", "fedqs-sgd")] == \
        [MeanOptions, ServerLROptions, MStepOptions, FedQSRuleOptions]
    # Each rule's own default, built from options that do not name it.
    assert (build_buffer_rule("fedbuff", {}).eta_s, build_buffer_rule("mstep", {}).alpha) == (1.0, 0.6)
    assert build_buffer_rule("wkafl", {"server_lr": 0.5, "weighting": "samples"}).eta_s == 0.5
    r = build_buffer_rule("fedqs-sgd", {"fedqs_variant": "authors", "fedqs_no_feedback": True})
    assert (r.variant, r.feedback, r.feedback_weight, r.stats_updates) == ("authors", False, "authors", True)
    with pytest.raises(ValueError, match="taken by FedAvg"):
        buffer_rule("fedavg")(type("Other", (BufferRule,), {}))
    with pytest.raises(TypeError, match="must subclass BufferRule"):
        buffer_rule("test-not-a-rule")(int)
    assert "test-not-a-rule" not in BUFFER_RULES


def test_rule_errors():
    with pytest.raises(ValueError, match="--strategy 'fedprox'.*fedavg"):
        build_rule("fedprox")
    with pytest.raises(ValueError, match="server_lr"):
        build_rule("fedbuff", server_lr=0.0)
    with pytest.raises(ValueError, match="server_lr"):
        build_rule("fedbuff", server_lr=float("nan"))
    with pytest.raises(ValueError, match="--fedqs-feedback 'exact'"):
        build_rule("fedqs-avg", feedback_weight="exact")
    with pytest.raises(ValueError, match="--fedqs-variant"):
        build_rule("fedqs-avg", variant="code")
    with pytest.raises(ValueError, match="--weighting samples: only fedavg and fedsgd"):
        build_rule("fedbuff", weighting="samples")
    with pytest.raises(ValueError, match="--weighting 'n'"):
        build_rule("fedavg", weighting="n")
    with pytest.raises(ValueError, match="mstep's mixing"):
        build_rule("mstep", server_lr=1.5)
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
A = FedQSParams(variant="authors")


def _check_decision(lr_prev, f_i, f_bar, s_i, s_bar, labels, params=P):
    d = decide(params, lr_prev, f_i, f_bar, s_i, s_bar, None if labels is None else np.array(labels))
    kind, lr, m, feedback, F, G = naive_fedqs_decision(
        lr_prev, f_i, f_bar, s_i, s_bar, labels, a=params.a, m0=params.m0, k=params.k, lr_min=params.lr_min,
        lr_max=params.lr_max, cap=params.cap, label_gap=params.label_gap, momentum=params.momentum,
        variant=params.variant, cosine=params.similarity == "cosine", g_max=params.g_max,
        authors_momentum=params.authors_momentum)
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
    # FWBC: fast, weakly biased: lr - a F with F = 0.5; G = (1 + 0.4)/(1 + 0.8) = 7/9,
    # momentum m0 + k (1/G - 1) = 0.1 + 0.2 * 2/7.
    d = _check_decision(0.1, 2.0, 1.0, 0.8, 0.4, None)
    assert d.type == FWBC and d.lr == pytest.approx(0.1 - 0.002 * 0.5) and d.G == pytest.approx(7 / 9)
    assert d.momentum == pytest.approx(0.1 + 0.2 * 2 / 7) and not d.feedback
    # SWBC: straggling, weakly biased: lr + a F with F = 4, G = 1: momentum m0.
    d = _check_decision(0.1, 0.25, 1.0, 0.5, 0.5, None)
    assert d.type == SWBC and d.lr == pytest.approx(0.108) and d.momentum == pytest.approx(0.1)
    # SSBC, accuracy even over labels: a straggler (momentum, no feedback); G = 1.5/1.25 = 1.2.
    d = _check_decision(0.1, 0.5, 1.0, 0.25, 0.5, [0.7, 0.8, 0.6])
    assert d.type == SSBC and not d.feedback and d.lr == pytest.approx(0.104)
    assert d.momentum == pytest.approx(0.1 + 0.2 * (1 / 1.2 - 1))
    # SSBC, skewed labels: feedback, no momentum.
    d = _check_decision(0.1, 0.5, 1.0, 0.4, 0.5, [0.9, 0.2, 0.6])
    assert d.type == SSBC and d.feedback and d.momentum == 0.0 and d.lr == pytest.approx(0.104)
    # SSBC without probe samples, or only NaN labels: a straggler.
    assert not _check_decision(0.1, 0.5, 1.0, 0.4, 0.5, None).feedback
    assert not decide(P, 0.1, 0.5, 1.0, 0.4, 0.5, np.array([np.nan])).feedback
    assert not _check_decision(0.1, 0.5, 1.0, 0.4, 0.5, []).feedback


def test_decide_authors_variant():
    # Angles: strongly biased when theta_i > theta_bar; G = theta_i / theta_bar; no momentum.
    d = _check_decision(0.1, 2.0, 1.0, 60.0, 40.0, None, A)
    assert (d.type, d.feedback, d.momentum, d.lr) == (FSBC, True, 0.0, 0.1) and d.G == pytest.approx(1.5)
    d = _check_decision(0.1, 2.0, 1.0, 20.0, 40.0, None, A)
    assert (d.type, d.feedback, d.momentum) == (FWBC, False, 0.0) and d.G == pytest.approx(0.5)
    d = _check_decision(0.1, 0.5, 1.0, 50.0, 40.0, [0.9, 0.5], A)
    assert (d.type, d.feedback) == (SSBC, True)
    # Their other files' momentum: 0.1 + min(2 (1/G - 1), 0.4): G = 0.8 -> 0.1 + 0.4 (capped); G = 0.5 too;
    # G = 1.02 -> 0.1 - 2 * 0.02/1.02; G = 1.25 -> 0.1 - 0.4 < 0 -> 0.
    AM = FedQSParams(variant="authors", authors_momentum=True)
    assert _check_decision(0.1, 2.0, 1.0, 32.0, 40.0, None, AM).momentum == pytest.approx(0.5)
    assert _check_decision(0.1, 0.5, 1.0, 40.0, 40.0, None, AM).momentum == pytest.approx(0.1)
    # An SSBC client passing the label test: their 0.1 + max(0, min(2 (1/G - 1), 0.4)) with
    # G = 1.25 > 1: the fixed m0 = 0.1 (before: the weakly biased formula, floored to 0).
    d = _check_decision(0.1, 0.5, 1.0, 50.0, 40.0, [0.5, 0.5], AM)
    assert d.type == SSBC and not d.feedback and d.momentum == pytest.approx(0.1, rel=1e-15)
    assert _check_decision(0.1, 0.5, 1.0, 400.0, 40.0, None, AM).momentum == pytest.approx(0.1)  # G capped at 9
    assert _check_decision(0.1, 0.5, 1.0, 50.0, 40.0, [0.5, 0.5], A).momentum == 0.0  # main files: none
    # No angle yet anywhere (theta_bar = 0): G neutral.
    assert _check_decision(0.1, 0.5, 1.0, 0.0, 0.0, None, A).G == 1.0
    with pytest.raises(ValueError, match="--fedqs-authors-momentum"):
        FedQSParams(authors_momentum=True)
    with pytest.raises(ValueError, match="--fedqs-variant"):
        FedQSParams(variant="code")


def test_authors_decide_nothing_until_speed_mean_angle_and_mean_speed_are_known():
    from fdahpc.semiasync.fedqs import authors_ready

    assert authors_ready(0.8, 1.1, 35.0)
    assert not authors_ready(0.0, 1.1, 35.0)  # never aggregated: no speed yet
    assert not authors_ready(0.8, 1.1, float("nan")) and not authors_ready(0.8, 1.1, 0.0)  # no θ̄ yet
    assert not authors_ready(0.8, 0.0, 35.0)


def test_authors_G_is_taken_at_aggregation_from_every_latest_angle():
    from fdahpc.semiasync.fedqs import authors_G

    # Latest angles of 5 clients: client 3 has none yet (NaN), client 4 reported 0 (no layer
    # kept): θ̄ = (30 + 60 + 90) / 3 = 60, over every client, not only the buffer's.
    angles = np.array([30.0, 60.0, 90.0, np.nan, 0.0])
    assert_close(authors_G(angles, [2, 0, 3, 4, 2]), np.array([1.5, 0.5, 1.0, 0.0, 1.5]), rtol=1e-15, atol=0)
    # one angle refreshed by a job started since (client 1: 60 -> 240): θ̄ = 120, G changes for all
    angles[1] = 240.0
    assert_close(authors_G(angles, [2, 0, 1]), np.array([0.75, 0.25, 2.0]), rtol=1e-15, atol=0)
    # 100 against nineteen 1s: θ̄ = 119/20, 100/θ̄ = 16.8, capped at 9
    assert_close(authors_G(np.array([100.0] + [1.0] * 19), [0, 1], cap=9.0), np.array([9.0, 20 / 119]), rtol=1e-15,
                 atol=0)
    assert authors_G(np.array([np.nan, 0.0]), [0, 1]).tolist() == [1.0, 1.0]  # no θ̄ yet: neutral


def test_authors_fedqs_sgd_adds_the_weighted_statistics_deltas():
    """FedQS-SGD in the authors' variant: statistics move by Σ p_i δs_i like the parameters
    (their aggregation adds every state_dict entry's weighted change); the paper variant
    sets them to the weighted mean of the uploaded values."""
    w = torch.tensor([1.0, 2.0, 10.0, 20.0])  # 2 parameters, then 2 running statistics
    ups = [Update(client=0, version=0, staleness=0, n_samples=10, payload=torch.tensor([0.5, -1.0, 1.0, -2.0])),
           Update(client=1, version=0, staleness=0, n_samples=30, payload=torch.tensor([0.1, 0.2, 3.0, 4.0]))]
    counts = np.zeros(2, dtype=np.int64)
    for variant, stats in (("authors", [10 + 0.25 * 1 + 0.75 * 3, 20 + 0.25 * -2 + 0.75 * 4]),
                           ("paper", [0.25 * 1 + 0.75 * 3, 0.25 * -2 + 0.75 * 4])):
        rule = build_rule("fedqs-sgd", variant=variant, feedback=False)
        assert rule.stats_updates == (variant == "authors")
        g = w.clone()
        rule.aggregate_(g, ups, counts, 2, params=2)
        want = [1 + 0.25 * 0.5 + 0.75 * 0.1, 2 + 0.25 * -1 + 0.75 * 0.2, *stats]
        assert_close(g, torch.tensor(want), rtol=1e-6, atol=1e-6)
    assert not build_rule("fedqs-avg", variant="authors").stats_updates


def test_decide_ties_and_gap_boundary():
    assert classify(1.0, 1.0, 0.5, 0.5) == SWBC
    assert classify(1.0 + 1e-12, 1.0, 0.5, 0.5) == FWBC
    assert classify(1.0, 1.0, 0.5 - 1e-12, 0.5) == SSBC
    assert classify(1.0, 1.0, 0.5 + 1e-12, 0.5, "authors") == SSBC
    assert classify(1.0, 1.0, 0.5, 0.5, "authors") == SWBC
    # max - min exactly the gap counts as skewed (the paper: "< 30 points" is a straggler).
    q = FedQSParams(label_gap=0.25)
    assert decide(q, 0.1, 0.5, 1.0, 0.4, 0.5, np.array([0.25, 0.5])).feedback
    assert not decide(q, 0.1, 0.5, 1.0, 0.4, 0.5, np.array([0.25, 0.5 - 1e-9])).feedback


def test_G_is_bounded_and_continuous_for_any_cosine():
    """The old G = s̄/s_i jumped to the cap 9 for any s_i <= 0; the shifted, bounded G does not."""
    s_bar = 0.1
    grid = np.linspace(-1.0, 1.0, 4001)
    G = np.array([decide(P, 0.1, 0.5, 1.0, s, s_bar, None).G for s in grid])
    assert np.all(G >= 0) and np.all(G <= 2.0)
    assert np.max(np.abs(np.diff(G))) < 1e-2  # no jump anywhere on a 5e-4 grid
    # By hand: s_i = 0 -> 1.1; s_i = -0.3 -> 1.1/0.7; s_i = -0.6 -> 1.1/0.4 = 2.75 -> the bound 2; s_i = 1 -> 0.55.
    for s_i, want in ((0.0, 1.1), (-0.3, 1.1 / 0.7), (-0.6, 2.0), (-1.0, 2.0), (1.0, 0.55)):
        assert decide(P, 0.1, 0.5, 1.0, s_i, s_bar, None).G == pytest.approx(want, rel=1e-14)
    # With the defaults, G at its bound 2 is exactly where m = m0 + k (1/G - 1) reaches 0.
    assert decide(P, 0.1, 0.5, 1.0, -0.6, s_bar, [0.5]).momentum == pytest.approx(0.0, abs=1e-15)


def test_decide_clipping_and_caps():
    # lr hits lr_max (SWBC, F capped at 9 for a never-aggregated client) and lr_min (FWBC).
    d = _check_decision(0.199, 0.0, 1.0, 0.9, 0.5, None)
    assert d.F == 9.0 and d.lr == 0.2
    d = _check_decision(0.0015, 5.0, 1.0, 0.9, 0.5, None, FedQSParams(a=0.01))
    assert d.lr == 0.001
    # Momentum clipped to m0 + 0.4 (small G: s̄ = -0.99, s_i = 0.9 -> G = 0.01/1.9) and to 0 (G at 2).
    d = _check_decision(0.1, 2.0, 1.0, 0.9, -0.99, None)
    assert d.momentum == pytest.approx(0.5)
    d = _check_decision(0.1, 0.5, 1.0, -0.5, 0.5, [0.5, 0.5], FedQSParams(k=0.5))  # SSBC straggler, G = 2
    assert d.G == 2.0 and d.momentum == 0.0
    d = _check_decision(0.1, 2.0, 1.0, -0.9, 0.5, None, FedQSParams(k=0.5))  # FSBC: G = 2 but feedback
    assert d.G == 2.0 and d.momentum == 0.0
    # The bounded similarities: G = min(s̄/s_i, 2) unshifted.
    E = FedQSParams(similarity="euclidean")
    assert _check_decision(0.1, 0.5, 1.0, 0.4, 0.6, None, E).G == pytest.approx(1.5)
    assert _check_decision(0.1, 0.5, 1.0, 0.34, 0.9, None, E).G == 2.0
    # The momentum ablation.
    d = _check_decision(0.1, 0.5, 1.0, 0.3, 0.2, None, FedQSParams(momentum=False))
    assert d.type == SWBC and d.momentum == 0.0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("params", [FedQSParams(a=0.01, k=0.3), FedQSParams(variant="authors", a=0.01),
                                    FedQSParams(variant="authors", authors_momentum=True),
                                    FedQSParams(similarity="manhattan")])
def test_decide_random_matches_naive(seed, params):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        labels = None if rng.random() < 0.2 else rng.uniform(0, 1, size=int(rng.integers(0, 5))).tolist()
        f_i = float(rng.choice([0.0, *rng.uniform(0, 3, 3)]))
        if params.variant == "authors":
            s_i, s_bar = float(rng.choice([0.0, *rng.uniform(0, 90, 3)])), float(rng.uniform(0, 60))
        else:
            s_i, s_bar = float(rng.uniform(-1, 1)), float(rng.uniform(-1, 1))
        _check_decision(float(rng.uniform(0.001, 0.2)), f_i, float(rng.uniform(0.5, 2)), s_i, s_bar, labels, params)


# ------------------------------------------------------------------------ the label test

def test_label_probe_takes_up_to_20_per_label_in_the_given_order():
    y = np.array([0] * 30 + [1] * 5 + [2] * 21)
    order = np.random.default_rng(0).permutation(len(y))
    rows = label_probe(y, order)
    assert np.all(np.diff(rows) > 0)
    assert np.bincount(y[rows]).tolist() == [20, 5, 20]
    want = sorted([r for r in order if y[r] == 0][:20] + [r for r in order if y[r] == 1]
                  + [r for r in order if y[r] == 2][:20])
    assert rows.tolist() == want


def test_label_test_decision_on_a_crafted_set():
    # Label 0: 20 samples at 90 %; label 1: 20 at 70 %; label 2: 6 samples at 100 % -> halved to 50 %.
    acc = np.array([0.9, 0.7, 1.0, np.nan])
    counts = np.array([20, 20, 6, 0])
    got = label_accuracies(acc, counts)
    assert_close(got, np.array([0.9, 0.7, 0.5]))  # the absent label 3 is left out
    # Gap 90 - 50 = 40 points >= 30: skewed, the SSBC client asks for feedback.
    assert decide(P, 0.1, 0.5, 1.0, 0.2, 0.5, got).feedback
    # With 10 samples label 2 is not halved: gap 100 - 70 = 30 points, exactly the threshold: skewed.
    assert decide(P, 0.1, 0.5, 1.0, 0.2, 0.5, label_accuracies(acc, np.array([20, 20, 10, 0]))).feedback
    # 90 / 70 / 75: gap 20 points: a straggler.
    even = label_accuracies(np.array([0.9, 0.7, 0.75]), np.array([20, 20, 20]))
    assert not decide(P, 0.1, 0.5, 1.0, 0.2, 0.5, even).feedback
    with pytest.raises(ValueError, match="shapes"):
        label_accuracies(acc, counts[:2])


def test_label_test_end_to_end_with_score():
    """The host's path: score() on the probe rows, per-label counts, label_accuracies."""
    from fdahpc.evaluate import score

    class Fixed(torch.nn.Module):  # predicts label 0 for every sample
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            out = torch.zeros(len(x), 3)
            out[:, 0] = 1.0
            return out + 0 * self.w

    y = torch.tensor([0] * 12 + [1] * 12 + [2] * 4)
    per_label = score(Fixed(), torch.zeros(len(y), 2), y, per_label=3)[1]
    got = label_accuracies(per_label, torch.bincount(y, minlength=3).numpy())
    assert_close(got, np.array([1.0, 0.0, 0.0]))
    assert decide(P, 0.1, 0.5, 1.0, 0.2, 0.5, got).feedback


# ------------------------------------------------------------------------ the authors' angle

def test_layer_angle_by_hand_on_a_tiny_model():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    layers = layer_bounds(model)
    # Linear weight (4), Linear bias (2), BN weight (2), BN bias (2); BN's running stats are buffers.
    assert layers == [(0, 4), (4, 6), (6, 8), (8, 10)]
    delta = torch.tensor([1.0, 2.0, 3.0, 4.0, 1.0, 3.0, 5.0, 5.0, 2.0, 1.0])
    ref = torch.tensor([4.0, 3.0, 2.0, 1.0, 2.0, 0.0, 1.0, 2.0, 1.0, 2.0])
    # Layer 0: min-max (0, 1/3, 2/3, 1) and (1, 2/3, 1/3, 0), sum normalisation aside,
    #   cos = (0 + 2/9 + 2/9 + 0) / (1 + 1/9 + 4/9) = (4/9)/(14/9) = 2/7.
    # Layer 1: ref has a zero: skipped. Layer 2: delta constant (5, 5): only divided by its
    #   sum, (1/2, 1/2), against (0, 1): cos = (1/2) / (sqrt(1/2) * 1) = sqrt(1/2), 45 degrees.
    # Layer 3: (1, 0) and (0, 1): 90 degrees.
    want = (math.degrees(math.acos(2 / 7)) + 45.0 + 90.0) / 3
    assert layer_angle(delta, ref, layers) == pytest.approx(want, rel=1e-14)
    assert layer_angle(delta, ref, layers) == pytest.approx(naive_layer_angle(delta.tolist(), ref.tolist(), layers),
                                                            rel=1e-14)
    # Every layer skipped: 0 (left out of theta-bar by the server).
    assert layer_angle(torch.zeros(10), ref, layers) == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_layer_angle_matches_naive(seed):
    rng = np.random.default_rng(seed)
    d = 40
    layers = [(0, 7), (7, 8), (8, 25), (25, 40)]
    delta, ref = rng.normal(size=d), rng.normal(size=d)
    delta[rng.integers(0, d)] = 0.0  # one layer skipped
    got = layer_angle(torch.tensor(delta, dtype=torch.float32), torch.tensor(ref, dtype=torch.float32), layers)
    want = naive_layer_angle(np.float32(delta).tolist(), np.float32(ref).tolist(), layers)
    assert got == pytest.approx(want, rel=1e-9)
    assert 0.0 < got <= 90.0


def test_params_validation():
    for kwargs, name in (({"eta0": 0}, "eta0"), ({"a": -1}, "a"), ({"m0": 0.6}, "m0"), ({"k": -0.1}, "k"),
                         ({"lr_min": 0}, "lr_min"), ({"lr_max": 0.0005}, "lr_max"), ({"cap": 0}, "cap"),
                         ({"label_gap": 30}, "label_gap"), ({"a": float("nan")}, "a"), ({"momentum": 1}, "momentum"),
                         ({"eta0": 1.0}, "eta0"), ({"eta0": 0.0005}, "eta0")):  # --lr outside [lr_min, lr_max]
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


@pytest.mark.parametrize("name", ["fedavg", "fedsgd", "fedbuff", "mstep", "fedqs-avg"])
def test_the_exact_sum_does_not_depend_on_who_adds_which_term(name):
    """--aggregate hosts: hosts add their members' terms, MPI adds the partial sums in any
    grouping; the integers, and so the model, are the server's own bit for bit."""
    from fdahpc.semiasync.rules import add_member
    from fdahpc.semiasync.exact import to_float

    rng = np.random.default_rng(5)
    n, d, K = 300, 250, 7
    ups = [Update(client=i, version=0, staleness=int(rng.integers(0, 4)), n_samples=int(rng.integers(1, 50)),
                  payload=torch.from_numpy(rng.normal(scale=10.0 ** rng.integers(-3, 3), size=n).astype(np.float32)))
           for i in range(K)]
    w0 = torch.from_numpy(rng.normal(size=n).astype(np.float32))
    server = w0.clone()
    build_rule(name).aggregate_(server, ups, np.zeros(K, dtype=int), K, params=d)
    c = build_rule(name).combination(ups, np.zeros(K, dtype=int), K, d)
    for _ in range(3):
        acc, bits = c.start(w0.numpy(), d, [float(u.payload.abs().max()) for u in ups])
        groups = np.array_split(rng.permutation(K), 3)  # three hosts, members in any order
        for g in groups:
            part = np.zeros(n, dtype=np.int64)
            for k in g:
                add_member(part, c.params[k], c.stats[k], ups[k].payload.numpy(), d, bits)
            acc += part
        assert torch.equal(torch.from_numpy(to_float(acc, bits)).float(), server)
    # and it is the weighted sum, to float32's rounding
    x = np.array([u.payload.numpy() for u in ups], dtype=np.float64)
    want = np.concatenate([c.keep_params * w0.numpy()[:d] + c.params @ x[:, :d],
                           c.keep_stats * w0.numpy()[d:] + c.stats @ x[:, d:]])
    np.testing.assert_allclose(server.numpy(), want, rtol=2e-7, atol=1e-6 * np.abs(want).max())


def test_scale_bits_leaves_room_and_refuses_what_is_not_finite():
    from fdahpc.semiasync.exact import scale_bits

    for bound in (1e-300, 1e-3, 0.75, 1.0, 3.0, 1e30):
        bits = scale_bits(bound)
        assert bound * 2.0**bits < 2.0**61 <= 2 * bound * 2.0**bits or bits == 960
    assert scale_bits(0.0) == 0
    with pytest.raises(ValueError, match="bound nan"):
        scale_bits(float("nan"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fixed_point_kernel_is_the_numpy_reference(dtype):
    from fdahpc.semiasync.exact import _add_term_numpy, _kernel

    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(scale=100.0, size=5000), [0.5, 1.5, 2.5, -0.5, -2.5, 0.0, -0.0]]).astype(dtype)
    for scale in (1.0, 0.37 * 2.0**40, -3.0 * 2.0**20):
        fast, ref = np.full(len(x), 7, dtype=np.int64), np.full(len(x), 7, dtype=np.int64)
        _kernel()(fast, x, scale)
        _add_term_numpy(ref, x, scale)
        assert np.array_equal(fast, ref)  # ties (0.5, 1.5, 2.5 at scale 1) to even in both


def test_add_term_takes_the_kernel_from_its_size_up_with_the_same_integers():
    from fdahpc.semiasync.exact import JIT_MIN_SIZE, _add_term_numpy, _kernel, add_term

    x = np.random.default_rng(4).normal(size=JIT_MIN_SIZE).astype(np.float32)
    big, ref = np.zeros(len(x), dtype=np.int64), np.zeros(len(x), dtype=np.int64)
    _kernel.cache_clear()
    add_term(big[:-1], 0.3, x[:-1], 50)  # one entry short: NumPy's path
    assert _kernel.cache_info().misses == 0
    big[:-1] = 0
    add_term(big, 0.3, x, 50)
    assert _kernel.cache_info().misses == 1  # the kernel's path
    _add_term_numpy(ref, x, 0.3 * 2.0**50)
    assert np.array_equal(big, ref) and np.count_nonzero(big) > 0


def test_the_fedqs_variant_lives_in_its_rule():
    """What the server does around angles and Mod①'s reference is asked of the rule: the paper's
    reference is the last global step, the authors' the previous model; the authors count every
    angle and take θ̄ over the non-zero ones; a rule without client state keeps the paper's angles."""
    from fdahpc.semiasync.rules import FedAvg, FedQSAvg

    w0, w1 = torch.tensor([1.0, 2.0]), torch.tensor([1.5, 1.0])
    for variant, first, after in (("paper", [0.0, 0.0], [0.5, -1.0]), ("authors", [1.0, 2.0], [1.0, 2.0])):
        rule = FedQSAvg(variant=variant)
        ref = rule.reference(w0)
        assert ref.tolist() == first
        rule.advance_reference(ref, w0, w1)
        assert ref.tolist() == after
    angles = np.array([0.0, 0.2, 0.4])
    assert FedQSAvg(variant="authors").angle_mean(angles) == pytest.approx(0.3)
    assert FedQSAvg(variant="paper").angle_mean(angles) == pytest.approx(0.2) == FedAvg().angle_mean(angles)
    assert FedQSAvg(variant="authors").keeps_angle(-1) and not FedQSAvg(variant="paper").keeps_angle(-1)
    with pytest.raises(NotImplementedError, match="keep no state"):
        FedAvg().reference(w0)
