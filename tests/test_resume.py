"""Long runs survive, under mpiexec: resume bit for bit, SIGTERM, NaN, a kill mid-checkpoint,
a full disk, and reading the run file while the job writes it."""

import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from conftest import REPO, run_python, train_cli, train_inprocess

pytestmark = pytest.mark.slow

BASE = ["-m", "fdahpc.train", "--eval-every", "10", "--log-every", "1000"]
SERIES = ("eval/step", "eval/accuracy", "eval/loss", "eval/comm_bytes", "sync/step")
#: One strategy per family, with the options that make it synchronize within 20 steps.
FAMILIES = {"synchronous": {}, "fedavg": dict(tau=7, clients_per_round=1), "linearfda": dict(theta=0.3),
            "sketchfda": dict(theta=0.3), "fedadam": dict(tau=5), "fedadp": dict(tau=5)}


def _train(tmp_path, name, *args, ranks=2, env=None, timeout=240):
    return train_cli(tmp_path / f"{name}.h5", *BASE[2:], *args, ranks=ranks, env=env, timeout=timeout)


def _same_runs(a, b):
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        assert np.array_equal(fa["final/model"][()], fb["final/model"][()])
        for name in SERIES:
            assert np.array_equal(fa[name][()], fb[name][()]), name
        assert fa.attrs["syncs"] == fb.attrs["syncs"] and fb.attrs["status"] == "finished"


@pytest.mark.distributed
@pytest.mark.parametrize("family", FAMILIES)
def test_resume_continues_bit_for_bit(comm, tmp_path, family):
    """In this process (on 1 rank, and on 2 under the MPI suite): 20 steps, a checkpoint,
    then 20 more from it equal 40 steps straight. The command line's resume is
    test_kill_during_checkpoint_write_resumes_from_the_previous_one's."""
    options = dict(strategy=family, eval_every=10, **FAMILIES[family])
    ck = comm.bcast_obj(str(tmp_path / "ck"))
    train_inprocess(comm, tmp_path / "straight.h5", max_steps=40, **options)
    train_inprocess(comm, tmp_path / "resumed.h5", max_steps=20, checkpoint_dir=ck, **options)
    resumed, _ = train_inprocess(comm, None, max_steps=40, checkpoint_dir=ck, resume="auto", **options)
    assert resumed.resumed is not None and resumed.out == comm.bcast_obj(str(tmp_path / "resumed.h5"))
    if comm.is_root:
        _same_runs(tmp_path / "straight.h5", tmp_path / "resumed.h5")  # the resumed run continued resumed.h5


@pytest.fixture(scope="module")
def fedavg_checkpoint(tmp_path_factory):
    """One 2-rank fedavg run of 10 steps with its checkpoint, for the tests that resume it."""
    tmp = tmp_path_factory.mktemp("fedavg-ck")
    proc = _train(tmp, "a", "--strategy", "fedavg", "--max-steps", "10", "--checkpoint-dir", str(tmp / "ck"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp / "ck"


def test_resume_refuses_another_world_size_or_strategy(fedavg_checkpoint):
    ck = str(fedavg_checkpoint)
    for ranks, extra, needle in ((1, ["--strategy", "fedavg"], "world size 2 (this run: 1)"),
                                 (2, ["--strategy", "linearfda"], "--strategy 'fedavg' (this run: 'linearfda')")):
        proc = run_python([*BASE, *extra, "--max-steps", "20", "--checkpoint-dir", ck, "--resume", "auto"], ranks=ranks)
        assert proc.returncode == 2
        assert needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_corrupt_checkpoint_is_refused_with_one_line(tmp_path, fedavg_checkpoint):
    ck = tmp_path / "ck"
    shutil.copytree(fedavg_checkpoint, ck)  # a copy: the fixture's checkpoint stays intact
    rank_file = ck / "ckpt-000000010" / "rank-00001.pt"
    rank_file.write_bytes(rank_file.read_bytes()[:-1000])
    proc = run_python([*BASE, "--strategy", "fedavg", "--max-steps", "20", "--resume", str(ck)], ranks=2)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "rank-00001.pt does not match its manifest" in proc.stderr, proc.stderr


def test_kill_during_checkpoint_write_resumes_from_the_previous_one(tmp_path):
    ck = str(tmp_path / "ck")
    args = ["--strategy", "linearfda", "--theta", "0.3", "--max-steps", "30"]
    straight = _train(tmp_path, "straight", *args)
    args += ["--checkpoint-every", "10", "--checkpoint-dir", ck]
    killed = _train(tmp_path, "cut", *args, env={"FDAHPC_FAULT": "kill-checkpoint@20:1"})
    assert straight.returncode == 0 and killed.returncode != 0
    assert not os.path.exists(os.path.join(ck, "ckpt-000000020", "manifest.json"))
    resumed = run_python([*BASE, *args, "--resume", "auto"], ranks=2)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout and "ckpt-000000010" in resumed.stdout
    _same_runs(tmp_path / "straight.h5", tmp_path / "cut.h5")


def _popen(args, ranks, env=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONPATH=REPO, **(env or {}))
    return subprocess.Popen(["mpiexec", "-n", str(ranks), sys.executable, *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_rows(path, name, proc, timeout=120):
    """Poll the run file, as a user would, until ``name`` has a row; returns what was read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if os.path.exists(path):
            with h5py.File(path, "r") as h5:  # the job is still writing this file
                if name in h5 and len(h5[name]):
                    return dict(h5.attrs), h5[name][()]
        time.sleep(0.2)
    raise AssertionError(f"no {name} rows in {path} after {timeout} s")


def test_sigterm_checkpoints_and_resume_matches(tmp_path):
    ck, out = str(tmp_path / "ck"), str(tmp_path / "signalled.h5")
    args = [*BASE, "--strategy", "sketchfda", "--theta", "0.3"]
    proc = _popen([*args, "--max-steps", "3000", "--checkpoint-dir", ck, "--out", out], ranks=4)
    _wait_for_rows(out, "eval/step", proc)
    proc.send_signal(signal.SIGTERM)  # mpiexec forwards it to every rank, as scancel --signal=TERM would
    try:  # a bound, not a timing claim: the stop comes at the next agreement (--stop-check-every steps)
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("SIGTERM did not stop the job within 120 s") from None
    assert proc.returncode == 0, stderr[-2000:]
    assert "stopped by SIGTERM" in stdout
    with h5py.File(out, "r") as h5:
        stopped_at = int(h5.attrs["stopped_at"])
        assert h5.attrs["status"] == "stopped" and 0 < stopped_at < 3000
    assert os.path.isfile(os.path.join(ck, f"ckpt-{stopped_at:09d}", "manifest.json"))
    total = str(stopped_at + 25)
    straight = run_python([*args, "--max-steps", total, "--out", str(tmp_path / "straight.h5")], ranks=4, timeout=300)
    resumed = run_python([*args, "--max-steps", total, "--checkpoint-dir", ck, "--resume", "auto"], ranks=4, timeout=300)
    assert straight.returncode == 0 and resumed.returncode == 0, resumed.stderr[-2000:]
    _same_runs(tmp_path / "straight.h5", out)


def test_nan_on_one_rank_ends_every_rank_with_exit_3(tmp_path):
    # The timeout bounds a hang (a rank left waiting fails the test); it is no timing claim.
    proc = _train(tmp_path, "nan", "--strategy", "fedavg", "--tau", "50", "--max-steps", "200",
                  ranks=4, env={"FDAHPC_FAULT": "nan@13:1"}, timeout=180)
    assert proc.returncode == 3, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "rank 1 at step 14" in lines[0] and "fedavg" in lines[0], proc.stderr
    with h5py.File(tmp_path / "nan.h5", "r") as h5:
        assert h5.attrs["status"] == "diverged" and h5["eval/step"][()].tolist() == [10]


def test_run_file_can_be_read_and_plotted_while_the_job_writes_it(tmp_path):
    out = str(tmp_path / "live.h5")
    # Long enough to outlast the readers on a loaded machine; stopped with SIGTERM after them.
    proc = _popen([*BASE, "--strategy", "linearfda", "--epochs", "1000", "--out", out], ranks=2)
    attrs, steps = _wait_for_rows(out, "eval/step", proc)
    assert attrs["status"] == "running"
    plotted = run_python(["-m", "fdahpc.plot", out, "-o", str(tmp_path / "live.png")])
    summary = run_python(["-m", "fdahpc.summary", out])
    assert proc.poll() is None, "the job ended before the readers were done"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=240)
    assert proc.returncode == 0
    assert plotted.returncode == 0, plotted.stderr
    assert summary.returncode == 0 and summary.stdout.splitlines()[1].startswith("running"), summary.stdout
    with h5py.File(out, "r") as h5:
        assert h5.attrs["status"] == "stopped" and h5["eval/step"][()].tolist()[: len(steps)] == steps.tolist()


@pytest.fixture
def tiny_disk(tmp_path):
    """A 512 kB tmpfs: a real full disk (needs root, as in CI)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_full_disk_at_checkpoint_warns_keeps_training_and_leaves_no_partial_files(tmp_path, tiny_disk):
    ck = tiny_disk / "ck"
    proc = _train(tmp_path, "full", "--strategy", "fedavg", "--max-steps", "20", "--checkpoint-every", "10",
                  "--checkpoint-dir", str(ck))
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stdout.splitlines() if "warning: checkpoint" in line]
    assert len(warnings) == 2 and "No space left on device" in warnings[0], proc.stdout
    assert os.listdir(ck) == []  # no half-written checkpoint left behind
    with h5py.File(tmp_path / "full.h5", "r") as h5:
        assert h5.attrs["status"] == "finished" and h5.attrs["steps"] == 20
