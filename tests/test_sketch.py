"""fdahpc.sketch against the big-int reference in tests/naive.py, and the AMS guarantees."""

import hashlib
import math

import numba
import numpy as np
import pytest
import torch
from conftest import run_python
from naive import naive_ams_sketch, naive_sq_norm_estimate

from fdahpc import sketch as sketch_mod
from fdahpc.sketch import MERSENNE_P, AmsSketch, compile_kernels, estimate_sq_norm, hash_coefficients


def _vec(dim, seed=0):
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)


def test_mulmod_matches_big_ints():
    rng = np.random.default_rng(1)
    pairs = [(int(a), int(b)) for a, b in rng.integers(0, MERSENNE_P, size=(500, 2))]
    edges = [0, 1, 2, 2**32 - 1, 2**32, 2**32 + 1, 2**60, MERSENNE_P - 2, MERSENNE_P - 1]
    pairs += [(a, b) for a in edges for b in edges]
    for a, b in pairs:
        assert int(sketch_mod._mulmod(np.uint64(a), np.uint64(b))) == a * b % MERSENNE_P, (a, b)


@pytest.mark.parametrize("dim,rows,cols,seed", [
    (1000, 5, 250, 0), (1003, 5, 250, 12345), (777, 3, 64, 1), (500, 4, 16384, 2), (300, 1, 7, 3),
    (2, 5, 250, 4), (1, 5, 3, 5),
])
def test_matches_naive(dim, rows, cols, seed):
    v = _vec(dim, seed)
    sk = AmsSketch(dim, rows, cols, seed)
    expected = naive_ams_sketch(v, rows, cols, seed)
    got = sk.sketch(v)
    assert got.shape == (rows, cols) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert estimate_sq_norm(got) == pytest.approx(naive_sq_norm_estimate(expected), rel=1e-12)


@pytest.mark.parametrize("rows,chunk,dim", [(5, 64, 1000), (3, 64, 1000), (5, 66, 1001), (5, 5, 23)])
def test_parallel_chunks_match_naive_and_are_thread_count_independent(monkeypatch, rows, chunk, dim):
    # Tiny chunks push a small vector through the multi-chunk parallel path; chunk
    # bounds and ends off the 4-element groups of the rows=5 kernel exercise its edges.
    monkeypatch.setattr(sketch_mod, "_CHUNK", chunk)
    v = _vec(dim, 5)
    sk = AmsSketch(dim, rows, 250, seed=9)
    assert sk.sketch(v).shape == (rows, 250)
    assert sk._scratch.shape[0] == -(-dim // chunk)
    np.testing.assert_allclose(sk.sketch(v), naive_ams_sketch(v, rows, 250, 9), rtol=1e-12, atol=1e-12)
    threads = numba.get_num_threads()
    try:
        by_threads = []
        for n in sorted({1, threads}):
            numba.set_num_threads(n)
            by_threads.append(sk.sketch(v).tobytes())
    finally:
        numba.set_num_threads(threads)
    assert len(set(by_threads)) == 1


def test_first_rows_do_not_depend_on_rows():
    v = _vec(400)
    np.testing.assert_array_equal(AmsSketch(400, 3, 50, seed=4).sketch(v), AmsSketch(400, 5, 50, seed=4).sketch(v)[:3])


def test_linearity():
    dim = 3000
    sk = AmsSketch(dim, seed=3)
    x, y = _vec(dim, 1), _vec(dim, 2)
    a, b = np.float32(0.75), np.float32(-2.5)
    combo = a * x + b * y
    np.testing.assert_allclose(sk.sketch(combo), a * sk.sketch(x) + b * sk.sketch(y), rtol=0, atol=1e-5)
    # Power-of-two scaling and negation are exact in float32, hence exactly linear.
    np.testing.assert_array_equal(sk.sketch(np.float32(4) * x), 4 * sk.sketch(x))
    np.testing.assert_array_equal(sk.sketch(-x), -sk.sketch(x))
    # Averaging sketches (what SketchFDA's AllReduce does) = sketch of the average.
    np.testing.assert_allclose((sk.sketch(x) + sk.sketch(y)) / 2, sk.sketch((x + y) / 2), atol=1e-5)


def test_sketch_into_reuses_out_and_accepts_cpu_tensors():
    dim = 500
    sk = AmsSketch(dim, seed=1)
    v = _vec(dim)
    out = np.full((5, 250), np.nan)
    assert sk.sketch_into(v, out) is out
    np.testing.assert_array_equal(out, sk.sketch(v))
    np.testing.assert_array_equal(sk.sketch(torch.from_numpy(v).requires_grad_()), out)


def test_torch_path_matches_numba():
    dim = 2000
    sk = AmsSketch(dim, 5, 100, seed=6)
    v = _vec(dim, 6)
    got = sk.sketch_torch(torch.from_numpy(v))
    assert isinstance(got, torch.Tensor) and got.shape == (5, 100) and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), sk.sketch(v), rtol=1e-12, atol=1e-12)
    # float64 input, and the cached device table used a second time.
    np.testing.assert_allclose(sk.sketch_torch(torch.from_numpy(v).double()).numpy(), sk.sketch(v), atol=1e-12)
    assert len(sk._device_codes) == 1


_SUBPROCESS = """
import hashlib, numpy as np
from fdahpc.sketch import AmsSketch
sk = AmsSketch(300_000, seed={seed})
v = np.random.default_rng(11).standard_normal(300_000).astype(np.float32)
print(hashlib.sha256(sk.codes.tobytes() + sk.sketch(v).tobytes()).hexdigest())
"""


def test_same_seed_same_sketch_in_another_process():
    dim, seed = 300_000, 21
    sk = AmsSketch(dim, seed=seed)
    v = np.random.default_rng(11).standard_normal(dim).astype(np.float32)
    here = hashlib.sha256(sk.codes.tobytes() + sk.sketch(v).tobytes()).hexdigest()
    # One thread there, the default here: the bits must not depend on it either.
    res = run_python(["-c", _SUBPROCESS.format(seed=seed)], timeout=120, env_extra={"NUMBA_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == here
    other = AmsSketch(dim, seed=seed + 1)
    assert not np.array_equal(other.codes, sk.codes)
    assert not np.allclose(other.sketch(v), sk.sketch(v))


def test_hashes_look_uniform():
    # Buckets near-uniform and signs balanced (a wrong mod or sign bit fails this).
    sk = AmsSketch(250_000, 5, 250, seed=8)
    codes = sk.codes.astype(np.int64)
    for r in range(5):
        counts = np.bincount(codes[:, r] >> 1, minlength=250)
        chi2 = float(((counts - 1000.0) ** 2 / 1000.0).sum())
        assert chi2 < 249 + 6 * math.sqrt(2 * 249)  # chi-square(249): mean 249, sd 22
        assert abs((codes[:, r] & 1).mean() - 0.5) < 5 * 0.5 / math.sqrt(250_000)
    # Different rows hash independently: sign agreement between rows near 1/2.
    assert abs(((codes[:, 0] ^ codes[:, 1]) & 1).mean() - 0.5) < 0.01


def _trial_errors(v, trials, rows=5, cols=250):
    norm2 = float(np.dot(v.astype(np.float64), v))
    sk = np.empty((rows, cols))
    errs = [estimate_sq_norm(AmsSketch(v.size, rows, cols, seed).sketch_into(v, sk)) / norm2 - 1
            for seed in range(trials)]
    return np.abs(np.array(errs))


@pytest.mark.parametrize("kind", ["gaussian", "constant", "arange"])
def test_estimator_accuracy_dense(kind):
    # For dense v each row's estimate is ~ ||v||^2 chi2_m / m (rel. sd sqrt(2/m) = 0.089),
    # so |err| < eps = 1/sqrt(m) holds per row w.p. ~0.52 and for the median of 5 rows
    # w.p. ~0.81 -- not 0.9 -- and |err| < 2 eps w.p. ~0.99. Bounds: 3 binomial sd.
    dim, trials = 2000, 200
    v = {"gaussian": _vec(dim, 7), "constant": np.ones(dim, np.float32),
         "arange": np.arange(dim, dtype=np.float32)}[kind]
    err = _trial_errors(v, trials)
    eps = 1 / math.sqrt(250)
    assert np.mean(err < eps) >= 0.81 - 3 * math.sqrt(0.81 * 0.19 / trials)
    assert np.mean(err < 2 * eps) >= 0.95
    assert np.median(err) < 0.75 * eps


@pytest.mark.parametrize("kind", ["sparse", "one_hot"])
def test_estimator_accuracy_sparse(kind):
    dim, trials = 2000, 200
    v = np.zeros(dim, np.float32)
    if kind == "sparse":
        v[np.random.default_rng(3).choice(dim, 6, replace=False)] = [3, -1, 0.5, 2, -4, 1]
    else:
        v[1234] = -2.5
    err = _trial_errors(v, trials)
    assert np.mean(err < 1 / math.sqrt(250)) >= 0.9
    if kind == "one_hot":
        assert err.max() == 0.0


def test_estimate_sq_norm_is_median_of_row_norms():
    sk = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]])
    assert estimate_sq_norm(sk) == 4.0
    assert estimate_sq_norm(sk[:2]) == 13.0  # even rows: mean of the middle two
    with pytest.raises(ValueError, match="sk"):
        estimate_sq_norm(np.ones(5))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="dim"):
        AmsSketch(0)
    with pytest.raises(ValueError, match="rows"):
        AmsSketch(10, rows=0)
    with pytest.raises(ValueError, match="cols"):
        AmsSketch(10, cols=2**14 + 1)
    with pytest.raises(ValueError, match="seed"):
        AmsSketch(10, seed=-1)
    with pytest.raises(ValueError, match="dim"):
        AmsSketch(10.0)
    sk = AmsSketch(10)
    with pytest.raises(ValueError, match="float32"):
        sk.sketch(np.zeros(10))
    with pytest.raises(ValueError, match="shape"):
        sk.sketch(np.zeros(11, np.float32))
    with pytest.raises(ValueError, match="shape"):
        sk.sketch(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        sk.sketch(np.zeros(20, np.float32)[::2])
    with pytest.raises(ValueError, match="out"):
        sk.sketch_into(np.zeros(10, np.float32), np.zeros((5, 250), np.float32))
    with pytest.raises(ValueError, match="out"):
        sk.sketch_into(np.zeros(10, np.float32), np.zeros((250, 5)))
    with pytest.raises(ValueError, match="vec"):
        sk.sketch([0.0] * 10)
    with pytest.raises(ValueError, match="length 10"):
        sk.sketch_torch(torch.zeros(9))
    with pytest.raises(ValueError, match="floating"):
        sk.sketch_torch(torch.zeros(10, dtype=torch.int32))


def test_state_dict_roundtrip():
    sk = AmsSketch(600, 3, 40, seed=17)
    state = sk.state_dict()
    assert {k: state[k] for k in ("dim", "rows", "cols", "seed")} == {"dim": 600, "rows": 3, "cols": 40, "seed": 17}
    v = _vec(600)
    again = AmsSketch.from_state_dict(state)
    np.testing.assert_array_equal(again.sketch(v), sk.sketch(v))
    other = AmsSketch(600, seed=1)
    other.load_state_dict(state)
    assert (other.rows, other.cols, other.seed) == (3, 40, 17)
    np.testing.assert_array_equal(other.sketch(v), sk.sketch(v))
    assert sk.nbytes == 4 * 3 * 40 and AmsSketch(10).nbytes == 5004 - 4
    with pytest.raises(ValueError, match="hash_family"):
        AmsSketch.from_state_dict(dict(state, hash_family="xor-31"))
    with pytest.raises(ValueError, match="missing"):
        AmsSketch.from_state_dict({"dim": 600})


def test_hash_coefficients_are_seeded_and_in_range():
    bucket, sign = hash_coefficients(4, 99)
    assert len(bucket) == len(sign) == 4
    assert all(len(b) == 2 and len(s) == 4 for b, s in zip(bucket, sign))
    assert all(0 <= c < MERSENNE_P for row in bucket + sign for c in row)
    assert (bucket, sign) == hash_coefficients(4, 99)
    assert bucket != hash_coefficients(4, 100)[0]


def test_compile_kernels_runs():
    compile_kernels()  # idempotent; cheap once cached
    assert AmsSketch(8, 5, 4).sketch(np.ones(8, np.float32)).shape == (5, 4)
