"""Checkpoints, resume, signals and divergence in the semi-asynchronous mode: real
``mpiexec`` jobs with timeouts, checked through their run files and checkpoint folders.

A resumed run must continue bit for bit like an uninterrupted one, and taking
checkpoints must not change a run's models. One documented difference: with
``--checkpoint-dir`` the last round also sends the new model to the clients it
aggregated (so the run can be continued with more ``--rounds``), and counts those bytes.
On the tick clock (``--clock ticks``) the last round sends nothing ahead (the next tick's
models go out after every other round, and a checkpoint mid-run names who got them), so
even the bytes are the same; its rules run on 2 ranks (FedAvg) and 3 (FedQS-Avg).
"""

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from conftest import REPO, run_python

pytestmark = pytest.mark.slow

R = 4  # rounds of a segment; the full run has 2R
TINY = ["--dataset", "mnist5k", "--model", "lenet5", "--batch-size", "16", "--log-every", "1000", "--mode", "semiasync",
        "--clients", "5", "--buffer", "2", "--tau", "2", "--seed", "1"]
RULES = {"fedqs-avg": ["--strategy", "fedqs-avg", "--speed-ratio", "4"],
         "fedbuff": ["--strategy", "fedbuff", "--speed-ratio", "3", "--scenario", "fluctuate:1"],
         # the hosts keep the updates the server has not combined yet, and checkpoint them
         "fedsgd-hosts": ["--strategy", "fedsgd", "--speed-ratio", "4", "--aggregate", "hosts"],
         # the FedQS authors' simulator: at seed 1, 1:4 its checkpoints of rounds 3 and 4 carry
         # queued entries, and round 6 reads a job a second time (ticks.py)
         "fedavg-ticks": ["--strategy", "fedavg", "--clock", "ticks", "--drop-last", "--speed-ratio", "4"],
         "fedqs-avg-ticks": ["--strategy", "fedqs-avg", "--fedqs-variant", "authors", "--clock", "ticks", "--drop-last",
                             "--speed-ratio", "4"]}
RANKS = {"fedavg-ticks": 2}  # every other rule: 3


def train(*flags, ranks=3, timeout=90, env_extra=None, ok=True):
    res = run_python(["-m", "fdahpc.train", *TINY, *flags], ranks=ranks, timeout=timeout, env_extra=env_extra)
    if ok:
        assert res.returncode == 0, res.stderr[-3000:]
    return res


def read(path) -> dict:
    with h5py.File(path, "r") as f:
        data = {f"round/{k}": f[f"round/{k}"][:] for k in f["round"]}
        data["final/model"] = f["final/model"][:] if "final/model" in f else None
        data["attrs"] = dict(f.attrs)
    return data


def assert_same_run(a: dict, b: dict, last_bytes_differ: bool = False) -> None:
    """Same models and the same round/* series, wall-clock times aside."""
    assert np.array_equal(a["final/model"], b["final/model"])
    assert sorted(k for k in a if k.startswith("round/")) == sorted(k for k in b if k.startswith("round/"))
    for key in a:
        if not key.startswith("round/") or key == "round/wall_seconds":
            continue
        x, y = a[key], b[key]
        if key == "round/bytes" and last_bytes_differ:
            assert y[-1] > x[-1]  # b's last round also sent the next model: b can be continued
            x, y = x[:-1], y[:-1]
        assert x.shape == y.shape and np.array_equal(x, y, equal_nan=True), key


@pytest.fixture(scope="module", params=sorted(RULES))
def runs(request, tmp_path_factory):
    """Per rule: a plain 2R-round run; R rounds with --checkpoint-every 3 (so a checkpoint
    mid-run and one at the end); a resume from the one at the end with --rounds 2R; and a
    resume from the one mid-run (without --checkpoint-dir, so like the plain run's end)."""
    rule, flags = request.param, RULES[request.param]
    ranks = RANKS.get(rule, 3)
    d = tmp_path_factory.mktemp(rule)
    ck = d / "ck"
    out = {"dir": d, "flags": flags, "ticks": "ticks" in flags}
    train(*flags, "--rounds", str(2 * R), "--out", str(d / "plain.h5"), ranks=ranks)
    out["plain"] = read(d / "plain.h5")
    # This segment keeps one model in memory per rank: its checkpoints read the server's
    # early updates back from --spill-dir, and change nothing either.
    train(*flags, "--rounds", str(R), "--out", str(d / "split.h5"), "--checkpoint-dir", str(ck), "--checkpoint-every", "3",
          "--model-cache-gb", "1e-9", "--spill-dir", str(d / "spill"), ranks=ranks)
    out["first_half"] = read(d / "split.h5")
    out["folders"] = sorted(os.listdir(ck))
    train(*flags, "--rounds", str(2 * R), "--out", str(d / "mid.h5"), "--resume", str(ck / "ckpt-000000003"),
          ranks=ranks)
    out["mid"] = read(d / "mid.h5")
    res = train(*flags, "--rounds", str(2 * R), "--checkpoint-dir", str(ck), "--resume", "auto", ranks=ranks)
    assert f"resumed from {ck / f'ckpt-{R:09d}'} at round {R}" in res.stdout
    out["split"] = read(d / "split.h5")  # the resumed run continues the first segment's run file
    return out


def test_resume_after_a_finished_segment_equals_an_uninterrupted_run(runs):
    """R rounds, then --resume with --rounds 2R: the same models and rows as 2R rounds at once."""
    first = runs["first_half"]
    assert first["attrs"]["status"] == "finished" and len(first["round/version"]) == R
    split = runs["split"]
    assert split["attrs"]["status"] == "finished" and split["attrs"]["rounds_done"] == 2 * R
    assert split["round/version"].tolist() == list(range(1, 2 * R + 1))
    assert split["round/staleness_max"].max() > 0  # there was staleness, so hosts ran ahead of the server
    assert_same_run(runs["plain"], split, last_bytes_differ=not runs["ticks"])
    if runs["ticks"]:  # what the tick clock adds went across the resume: carried entries, a repeat, ...
        assert split["round/repeat"][R:].sum() > 0
        assert not np.array_equal(split["round/stamp_staleness"], split["round/update_staleness"])
        for key in ("jobs_never_aggregated", "jobs_overwritten"):
            assert split["attrs"][key] == runs["plain"]["attrs"][key], key
        if "fedqs-avg" in runs["flags"]:  # ... and the authors' decisions and feedback flags
            assert split["round/types"][R:].sum() > 0 and (split["round/feedback"][R:] == 1).any()


def test_checkpoints_taken_mid_run_change_nothing_and_resume_exactly(runs):
    assert runs["folders"] == ["ckpt-000000003", f"ckpt-{R:09d}"]
    # The first segment's rows (its checkpoint of round 3 taken mid-run) are the plain run's.
    first, plain = runs["first_half"], runs["plain"]
    # One model per store in memory (a host with --aggregate hosts has two stores, a FedQS
    # host keeps its clients' last updates in a second), while the plain run kept more: the
    # first segment spilled.
    held = first["attrs"]["models_held_peak_per_rank"]
    stores = 2 if "hosts" in runs["flags"] or "fedqs-avg" in runs["flags"] else 1
    assert held.max() <= stores < plain["attrs"]["models_held_peak_per_rank"].max()
    for key in first:
        if key.startswith("round/") and key != "round/wall_seconds":
            assert np.array_equal(first[key], plain[key][:R], equal_nan=True), key
    # Resumed from round 3 without --checkpoint-dir: the plain run, bytes included.
    assert runs["mid"]["attrs"]["rounds_done"] == 2 * R
    assert_same_run(plain, runs["mid"])


@pytest.mark.parametrize("flags,ranks,difference", [
    (["--clients", "6"], 3, "--clients 5 (this run: 6)"),
    ([], 2, "world size 3 (this run: 2)"),
])
def test_resume_of_another_run_is_refused_in_one_line(runs, flags, ranks, difference):
    if runs["flags"] not in (RULES["fedqs-avg"], RULES["fedqs-avg-ticks"]):
        pytest.skip("one rule per clock is enough")
    folder = runs["dir"] / "ck"
    before = sorted(os.listdir(folder))
    res = train(*runs["flags"], "--rounds", str(3 * R), "--checkpoint-dir", str(folder), "--resume", "auto", *flags,
                ranks=ranks, ok=False)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "written by a different run" in lines[0] and difference in lines[0], res.stderr
    assert sorted(os.listdir(folder)) == before


def test_a_tick_clock_checkpoint_resumed_on_the_event_clock_is_refused(runs):
    if runs["flags"] != RULES["fedqs-avg-ticks"]:
        pytest.skip("one rule is enough")
    folder = runs["dir"] / "ck"
    before = sorted(os.listdir(folder))
    res = train(*runs["flags"], "--clock", "events", "--rounds", str(3 * R), "--checkpoint-dir", str(folder),
                "--resume", "auto", ok=False)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "written by a different run: --clock 'ticks' (this run: 'events')" in lines[0], res.stderr
    assert sorted(os.listdir(folder)) == before


def _rounds_in(path) -> int:
    try:
        with h5py.File(path, "r") as f:
            return len(f["round/version"]) if "round/version" in f else 0
    except OSError:
        return 0


@pytest.mark.parametrize("rule", ["fedqs-avg", "fedqs-avg-ticks"])
def test_sigterm_checkpoints_stops_with_0_and_resumes_to_the_same_model(tmp_path, rule):
    flags = [*RULES[rule], "--log-every", "1"]
    out, ck = str(tmp_path / "stopped.h5"), str(tmp_path / "ck")
    cmd = ["mpiexec", "-n", "3", sys.executable, "-m", "fdahpc.train", *TINY, *flags, "--rounds", "100000",
           "--out", out, "--checkpoint-dir", ck]
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONPATH=REPO)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 180  # a bound that fails with a message, not a timing claim
        while _rounds_in(out) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert _rounds_in(out) >= 3, f"no 3 rounds in the run file within 180 s (exit {proc.poll()})"
        proc.send_signal(signal.SIGTERM)  # MPICH's mpiexec forwards it to every rank
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    stopped = read(out)
    assert stopped["attrs"]["status"] == "stopped"
    v = int(stopped["attrs"]["stopped_at"])
    assert v >= 3 and stopped["round/version"].tolist() == list(range(1, v + 1))
    folder = os.path.join(ck, f"ckpt-{v:09d}")
    assert f"fdahpc.train: stopped by SIGTERM at round {v}: checkpoint {folder}; continue with --resume auto " \
           f"--checkpoint-dir {ck}" in stdout
    assert os.path.isfile(os.path.join(folder, "manifest.json"))
    train(*flags, "--rounds", str(v + 3), "--resume", ck)  # its newest checkpoint
    train(*flags, "--rounds", str(v + 3), "--out", str(tmp_path / "plain.h5"))
    resumed, plain = read(out), read(tmp_path / "plain.h5")
    assert resumed["attrs"]["status"] == "finished"
    assert_same_run(plain, resumed)


def test_a_nan_on_one_host_ends_every_rank_with_3_naming_it(tmp_path):
    out = str(tmp_path / "nan.h5")
    # The timeout bounds a hang (a rank left waiting fails the test); it is no timing claim.
    res = train(*RULES["fedqs-avg"], "--rounds", "50", "--out", out, env_extra={"FDAHPC_FAULT": "nan@3:1"},
                timeout=180, ok=False)
    assert res.returncode == 3, res.stderr[-3000:]
    assert "aborting" not in res.stderr  # no rank failed otherwise: all of them raised Diverged
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("fdahpc.train: diverged: NaN or Inf in client ") and "'s update from rank 1 at round " in lines[0]
    assert "(strategy fedqs-avg)" in lines[0] and out in lines[0] and "resume from an earlier checkpoint" in lines[0]
    f = read(out)
    assert f["attrs"]["status"] == "diverged" and f["final/model"] is None
    assert 3 <= len(f["round/version"]) < 50
