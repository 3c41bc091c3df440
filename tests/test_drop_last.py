"""``--drop-last`` end to end: the local step counts of both modes, from real ``mpiexec`` runs."""

import h5py
import numpy as np
import pytest

from conftest import run_python
from fdahpc.worker import steps_per_job

pytestmark = pytest.mark.slow

TINY = ["--dataset", "mnist5k", "--model", "lenet5", "--log-every", "1000"]


def test_semiasync_jobs_take_two_floor_n_over_b_steps(tmp_path):
    """--buffer N at equal speeds: every client runs one job per round, so the hosts' step
    total is rounds · Σ 2⌊n_i/B⌋; clients with fewer than B samples take none."""
    out = str(tmp_path / "d.h5")
    B, R = 400, 2
    res = run_python(["-m", "fdahpc.train", *TINY, "--mode", "semiasync", "--strategy", "fedavg", "--clients", "6",
                      "--buffer", "6", "--speed-ratio", "1", "--rounds", str(R), "--local-epochs", "2",
                      "--batch-size", str(B), "--partition", "dirichlet:0.1", "--drop-last", "--out", out],
                     ranks=3, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    f = h5py.File(out)
    n = f["round/n_samples"][0]
    assert f["round/clients"][0].tolist() == list(range(6))
    assert (n < B).any() and (n >= B).any(), n  # some clients take no step, the others some
    want = sum(2 * (int(k) // B) for k in n)
    assert f.attrs["jobs_per_rank"].sum() == 6 * R
    assert f.attrs["local_steps_per_rank"].sum() == R * want
    assert want != sum(steps_per_job(int(k), B, 2.0) for k in n)  # without --drop-last: another count


def test_sync_epochs_are_full_batches_and_a_rank_below_one_batch_is_refused(tmp_path):
    out = str(tmp_path / "s.h5")
    res = run_python(["-m", "fdahpc.train", *TINY, "--strategy", "fedavg", "--tau", "5", "--epochs", "1",
                      "--batch-size", "32", "--drop-last", "--out", out], ranks=2, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert h5py.File(out).attrs["steps_per_epoch"] == (4000 // 2) // 32  # 62; ⌈2000/32⌉ = 63 without it
    res = run_python(["-m", "fdahpc.train", *TINY, "--strategy", "fedavg", "--tau", "5", "--batch-size", "3000",
                      "--drop-last", "--out", str(tmp_path / "no.h5")], ranks=2, timeout=180)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--drop-last: rank 0 holds 2000 training samples, less than one batch of 3000" in lines[0]
    assert not (tmp_path / "no.h5").exists()
