"""FedQS's two variants end to end: real ``mpiexec`` runs whose recorded buffers are
re-weighted by the plain transcriptions in tests/naive.py."""

import h5py
import numpy as np
import pytest
import torch

from conftest import run_python
from naive import naive_authors_weights, naive_fedqs_weights

pytestmark = pytest.mark.slow

TINY = ["--dataset", "mnist5k", "--model", "lenet5", "--batch-size", "16", "--log-every", "1000"]
SEMI = ["--mode", "semiasync", "--clients", "8", "--buffer", "3", "--rounds", "24", "--tau", "3", "--speed-ratio", "4",
        "--partition", "dirichlet:0.3", "--seed", "1"]


def train(tmp_path, name, *flags, ranks=2, timeout=180):
    out = str(tmp_path / f"{name}.h5")
    res = run_python(["-m", "fdahpc.train", *TINY, *SEMI, *flags, "--out", out], ranks=ranks, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return h5py.File(out)


def _buffers(f):
    """Per round: (round number, clients, n, staleness, feedback, G, counts before, weights)."""
    N = int(f.attrs["clients"])
    counts = np.zeros(N, dtype=np.int64)
    rows = f["round/clients"][:]
    for t, ids in enumerate(rows, start=1):
        k = ids >= 0
        yield (t, ids[k], f["round/n_samples"][t - 1][k], f["round/update_staleness"][t - 1][k],
               f["round/feedback"][t - 1][k].astype(bool), f["round/G"][t - 1][k], counts.copy(),
               f["round/weights"][t - 1][k])
        np.add.at(counts, ids[k], 1)


def test_authors_variant_weights_on_a_recorded_run_equal_their_formula(tmp_path):
    f = train(tmp_path, "authors", "--strategy", "fedqs-avg", "--fedqs-variant", "authors")
    N, K = int(f.attrs["clients"]), int(f.attrs["buffer"])
    flagged_fresh = 0
    for t, ids, n, tau, flag, G, counts, weights in _buffers(f):
        live = flag & (tau == 0)  # their flags are reset at every aggregation
        flagged_fresh += int(live.sum())
        after = counts + np.bincount(ids, minlength=N)  # their F: share of all aggregated updates
        F = after[ids] / after.sum()
        np.testing.assert_allclose(weights, naive_authors_weights(n, live, G, F, K / N), rtol=1e-12, atol=0)
    assert flagged_fresh > 0, "no flagged fresh update in the run: the test would prove nothing"
    assert np.all(f["round/momentum_mean"][:] == 0.0)  # the authors' main variant has no momentum


def test_paper_variant_weights_on_a_recorded_run(tmp_path):
    f = train(tmp_path, "paper", "--strategy", "fedqs-sgd", "--clip-grad-norm", "5")
    N, K = int(f.attrs["clients"]), int(f.attrs["buffer"])
    flagged = 0
    for t, ids, n, tau, flag, G, counts, weights in _buffers(f):
        flagged += int(flag.sum())
        assert np.all((G >= 0) & (G <= 2))  # the paper variant's bounded G
        want = naive_fedqs_weights(n, flag, G, tau, list(range(len(ids))), counts[ids], K, N, t, weight="paper")
        np.testing.assert_allclose(weights, want, rtol=1e-12, atol=0)
    assert flagged > 0


def test_variants_are_rank_count_independent(tmp_path):
    flags = ["--strategy", "fedqs-avg", "--fedqs-variant", "authors", "--fedqs-authors-momentum", "--rounds", "8"]
    a, b = train(tmp_path, "r2", *flags, ranks=2), train(tmp_path, "r3", *flags, ranks=3)
    assert np.array_equal(a["round/clients"][:], b["round/clients"][:])
    assert np.array_equal(a["final/model"][:], b["final/model"][:])


def test_sketched_cosine_is_close_to_the_exact_one():
    """5 x 250 sketches: a row's cosine has sd about (1 - ρ²)/√250 ≈ 0.05 at ρ = 0.5, the
    median of five rows less; 0.12 is well beyond it, so an estimate off by more is a bug."""
    import torch

    from fdahpc.aggregate import sketch_cosine
    from fdahpc.semiasync.fedqs import similarity
    from fdahpc.sketch import AmsSketch

    g = torch.Generator().manual_seed(0)
    a, noise = torch.randn(20000, generator=g), torch.randn(20000, generator=g)
    for rho in (-0.5, 0.0, 0.5, 0.9):
        b = rho * a + (1 - rho ** 2) ** 0.5 * noise
        exact = similarity(a, b, "cosine")
        for seed in range(5):
            sk = AmsSketch(a.numel(), seed=seed)
            assert abs(sketch_cosine(sk.sketch(a), sk.sketch(b)) - exact) < 0.12, (rho, seed)


def test_sketch_similarity_is_the_paper_cosines_alone():
    from fdahpc.semiasync.fedqs import FedQSParams

    with pytest.raises(ValueError, match="--fedqs-sketch-similarity True: estimates the paper variant's cosine"):
        FedQSParams(variant="authors", sketch=True)
    with pytest.raises(ValueError, match="--fedqs-sketch-similarity"):
        FedQSParams(similarity="euclidean", sketch=True)


def test_with_sketch_similarity_a_client_keeps_a_sketch_not_its_update(tmp_path):
    """What a host keeps per client is what it checkpoints: a 5 x 250 float32 sketch (5 KB)."""
    from fdahpc import checkpoint

    ck = tmp_path / "ck"
    f = train(tmp_path, "sk", "--strategy", "fedqs-avg", "--fedqs-sketch-similarity", "--checkpoint-dir", str(ck))
    assert f.attrs["status"] == "finished"
    folder = checkpoint.latest(str(ck))
    state = checkpoint.load_rank(folder, checkpoint.read_manifest(folder), 1)
    kept = list(state["role"]["fedqs_updates"].values())
    assert kept and all(d.shape == (5 * 250,) and d.dtype == torch.float32 for d in kept)
