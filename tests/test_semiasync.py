"""The semi-asynchronous mode end to end: real ``mpiexec`` jobs with timeouts (a hang is a
failure), checked through their HDF5 run files."""

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

TINY = ["--dataset", "mnist5k", "--model", "lenet5", "--batch-size", "16", "--log-every", "1000"]


def train(tmp_path, name, *flags, ranks=3, timeout=120):
    out = str(tmp_path / f"{name}.h5")
    res = run_python(["-m", "fdahpc.train", *TINY, *flags, "--out", out], ranks=ranks, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return h5py.File(out)


def test_full_buffer_equal_speeds_is_synchronous_fedavg(tmp_path):
    """--buffer N, equal speeds, no staleness: semi-async fedavg gives synchronous FedAvg's
    model bit for bit (2 clients, so the 1/K mean rounds identically), fedsgd to rounding."""
    common = ["--optimizer", "sgd", "--lr", "0.05", "--tau", "5", "--seed", "2", "--partition", "dirichlet:1.0"]
    sync = train(tmp_path, "sync", "--strategy", "fedavg", "--max-steps", "15", *common, ranks=2)
    semi = {rule: train(tmp_path, rule, "--mode", "semiasync", "--strategy", rule, "--clients", "2", "--buffer", "2",
                        "--rounds", "3", "--speed-ratio", "1", *common) for rule in ("fedavg", "fedsgd")}
    expected = sync["final/model"][:]
    assert np.array_equal(semi["fedavg"]["final/model"][:], expected)
    np.testing.assert_allclose(semi["fedsgd"]["final/model"][:], expected, rtol=0, atol=1e-6)
    for f in semi.values():
        assert f["round/staleness_max"][:].tolist() == [0, 0, 0]
        assert f["round/clients"][:].tolist() == [[0, 1]] * 3
        assert f["round/virtual_time"][:].tolist() == [1, 2, 3]


def test_same_seed_same_run_on_2_3_and_5_ranks(tmp_path):
    flags = ["--mode", "semiasync", "--strategy", "fedqs-sgd", "--clients", "6", "--buffer", "2", "--rounds", "12",
             "--tau", "4", "--speed-ratio", "5", "--partition", "dirichlet:0.5", "--scenario", "fluctuate:2"]
    runs = [train(tmp_path, f"r{n}", *flags, ranks=n) for n in (2, 3, 5)]
    # Ranks that may keep one model in memory (a host's versions, the server's early
    # updates) write the others to --spill-dir and read them back.
    spill = tmp_path / "spill"
    runs.append(train(tmp_path, "spilled", *flags, "--model-cache-gb", "1e-9", "--spill-dir", str(spill), ranks=3))
    # Hosts adding their own members' terms, reduced exactly: the same models on 3 and 5 ranks.
    runs += [train(tmp_path, f"hosts{n}", *flags, "--aggregate", "hosts", ranks=n) for n in (3, 5)]
    assert runs[-1]["round/bytes"][0] < runs[2]["round/bytes"][0]  # rank 0 moved less
    assert runs[1].attrs["models_held_peak_per_rank"].max() > 1  # more than one model waited somewhere ...
    # ... but one of each kind in memory: the server's early updates; a host's versions and
    # its clients' last FedQS updates (read back for the next similarity)
    assert runs[3].attrs["models_held_peak_per_rank"].tolist() == [1, 2, 2]
    assert spill.is_dir() and not any(spill.iterdir())  # every rank removed its spill folder
    first = runs[0]
    assert first["round/clients"].shape == (12, 2)
    assert first["round/types"][:].sum() > 0  # FedQS took typed decisions, not only first jobs
    assert first["round/staleness_max"][:].max() > 0  # and there was staleness to handle
    for other in runs[1:]:
        assert np.array_equal(other["round/clients"][:], first["round/clients"][:])
        assert np.array_equal(other["round/virtual_time"][:], first["round/virtual_time"][:])
        assert np.array_equal(other["final/model"][:], first["final/model"][:])
    a = first.attrs
    assert a["mode"] == "semiasync" and a["rounds_done"] == 12 and 0 < a["convergence_accuracy"] < 1
    assert a["rounds_to_95pct"] >= 1 and a["comm_bytes"] > 0


@pytest.mark.parametrize("rule", ["fedqs-avg", "fedsgd"])
def test_tick_clock_same_seed_same_run_on_2_and_3_ranks(tmp_path, rule):
    """--clock ticks: the authors' schedule (ticks.py) run for real; the server reads what
    the pure clock says, and the models agree bit for bit whatever the ranks."""
    from fdahpc.semiasync.ticks import TickClock

    flags = ["--mode", "semiasync", "--clock", "ticks", "--strategy", rule, "--clients", "6", "--buffer", "2",
             "--rounds", "12", "--tau", "4", "--speed-ratio", "5", "--partition", "dirichlet:0.5", "--drop-last"]
    if rule.startswith("fedqs"):
        flags += ["--fedqs-variant", "authors"]
    runs = [train(tmp_path, f"r{n}", *flags, ranks=n) for n in (2, 3)]
    clock = TickClock(6, 5, 0, 2)
    reads = []
    while clock.version < 12:
        reads.append(clock.step()[1])
    reads = [r for r in reads if r is not None]
    first = runs[0]
    assert first["round/clients"][:].tolist() == [[r.client for r in rr] for rr in reads]
    assert first["round/update_staleness"][:].tolist() == [[r.staleness for r in rr] for rr in reads]
    assert first["round/stamp_staleness"][:].tolist() == [[r.stamp_staleness for r in rr] for rr in reads]
    assert first["round/repeat"][:].tolist() == [[int(r.repeat) for r in rr] for rr in reads]
    assert first["round/repeat"][:].sum() > 0 and first["round/update_staleness"][:].max() > 0
    assert first["round/virtual_time"][-1] == clock.tick
    assert (first.attrs["jobs_never_aggregated"], first.attrs["jobs_overwritten"]) == clock.never_aggregated()
    assert first.attrs["clock"] == "ticks"
    from fdahpc.summary import summarize  # the paper's convergence accuracy, as the run recorded it

    assert summarize(first.filename).convergence == pytest.approx(first.attrs["convergence_accuracy"], rel=1e-12)
    if rule.startswith("fedqs"):
        assert first["round/types"][:].sum() > 0
    for other in runs[1:]:
        assert np.array_equal(other["round/G"][:], first["round/G"][:], equal_nan=True)
        assert np.array_equal(other["final/model"][:], first["final/model"][:])


def test_every_rule_runs_on_the_tick_clock(tmp_path):
    from fdahpc.semiasync.rules import SEMIASYNC_RULES

    flags = ["--mode", "semiasync", "--clock", "ticks", "--clients", "5", "--buffer", "2", "--rounds", "5",
             "--tau", "2", "--speed-ratio", "3", "--partition", "dirichlet:0.5"]
    for rule in SEMIASYNC_RULES:
        f = train(tmp_path, rule, *flags, "--strategy", rule, ranks=2)
        assert f.attrs["rounds_done"] == 5 and np.isfinite(f["final/model"][:]).all(), rule
        assert f["round/repeat"].shape == (5, 2)


def test_dropout_emptying_hosts_and_the_last_round_end_every_rank(tmp_path):
    """Three clients on three hosts; at round 2 two of them leave, so two hosts have no
    client left and the buffer of 2 can no longer fill: the server aggregates what remains."""
    # The timeout bounds a hang (a rank left waiting fails the test); it is no timing claim.
    f = train(tmp_path, "drop", "--mode", "semiasync", "--strategy", "fedbuff", "--clients", "3", "--buffer", "2",
              "--rounds", "6", "--tau", "2", "--scenario", "dropout@2:0.67", "--speed-ratio", "4", ranks=4, timeout=180)
    rows = f["round/clients"][:]
    assert len(rows) == 6 and f.attrs["rounds_done"] == 6
    survivors = set(rows[2:].ravel()) - {-1}
    assert len(survivors) == 1 and (rows[2:, 1] == -1).all()


@pytest.mark.parametrize("flags,message", [
    (["--clients", "4", "--buffer", "5"], "--buffer 5: must be in [1, --clients 4]"),
    (["--strategy", "sketchfda"], "--strategy sketchfda: a synchronous strategy; add --mode sync"),
    (["--scenario", "dropout@10"], "--scenario 'dropout@10'"),
    (["--trigger", "linear"], "--trigger: only used with --mode sync"),
    (["--strategy", "wkafl", "--aggregate", "hosts"], "--aggregate hosts: wkafl's weights read every update's payload"),
    (["--aggregate", "ranks"], "--aggregate 'ranks': unknown; choose one of server, hosts"),
    (["--model-cache-gb", "0"], "--model-cache-gb 0.0: must be > 0"),
    (["--clock", "wall"], "--clock 'wall': unknown; choose one of events, ticks"),
    (["--clock", "ticks", "--scenario", "shift@5:10"], "--scenario: not with --clock ticks"),
    (["--clock", "ticks", "--clients-per-round", "3"], "--clients-per-round: not with --clock ticks"),
    (["--clock", "ticks", "--aggregate", "hosts"], "--aggregate hosts: not with --clock ticks"),
])
def test_bad_semiasync_flags_one_line_exit_2(capsys, flags, message):
    from fdahpc.train import main  # the flags are refused before any rank would start

    assert main(["--mode", "semiasync", *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_other_mode_flags_and_one_rank_are_refused(tmp_path):
    res = run_python(["-m", "fdahpc.train", "--strategy", "fedqs-avg"], timeout=60)
    assert res.returncode == 2 and "a semi-asynchronous rule; add --mode semiasync" in res.stderr
    res = run_python(["-m", "fdahpc.train", "--clients", "10"], timeout=60)
    assert res.returncode == 2 and "--clients: only used with --mode semiasync" in res.stderr
    out = tmp_path / "one.h5"
    res = run_python(["-m", "fdahpc.train", "--mode", "semiasync", "--out", str(out)], timeout=60)
    assert res.returncode == 2 and "needs at least 2 ranks" in res.stderr and not out.exists()


def _rank_pid(marker: str, rank: int) -> int | None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in cmd and b"fdahpc.train" in cmd and b"mpiexec" not in cmd and f"PMI_RANK={rank}".encode() in env:
            return int(pid)
    return None


def test_a_host_that_dies_ends_the_job_naming_it(tmp_path):
    """Events, not sleeps: rank 1 is interrupted once rank 0 has logged a round (the hosts are
    mid-run), and the failing rank's message must reach stderr whatever the load (it waits
    until the launcher has read its pipe before aborting). Every wait is bounded."""
    import queue
    import threading

    out = str(tmp_path / "dies.h5")
    cmd = ["mpiexec", "-n", "3", sys.executable, "-m", "fdahpc.train", *TINY, "--mode", "semiasync", "--clients", "8",
           "--buffer", "2", "--rounds", "100000", "--tau", "2", "--out", out, "--log-every", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONPATH=REPO)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    lines: queue.Queue = queue.Queue()
    err: list[str] = []
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)], daemon=True).start()
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while True:  # the first round's log line: every rank is past setup and inside the run
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, f"the job ended before its first round:\n{''.join(err)}"
            if line.startswith("round "):
                break
        pid = _rank_pid(out, 1)
        assert pid is not None, "rank 1's process not found"
        os.kill(pid, signal.SIGINT)  # an exception inside the host, mid-run
        proc.wait(timeout=120)
    except queue.Empty:
        pytest.fail("no round logged within 120 s")
    finally:
        proc.kill()
    reader.join(timeout=30)
    assert proc.returncode != 0
    assert err and "[rank 1] fdahpc.train failed; aborting the job" in err[0], err


def test_clients_per_round_is_cross_device_fedavg(tmp_path):
    """--clients-per-round C: each round C distinct clients, drawn from (seed, round), all
    started from the current model (staleness 0); the round ends with its slowest client;
    C = N is --buffer N bit for bit, and where the clients live does not matter."""
    from fdahpc.semiasync.clock import VirtualClock

    common = ["--mode", "semiasync", "--strategy", "fedavg", "--clients", "6", "--rounds", "4", "--tau", "2",
              "--seed", "1"]
    sampled = train(tmp_path, "c3", *common, "--clients-per-round", "3")
    on_two = train(tmp_path, "c3-2", *common, "--clients-per-round", "3", ranks=2)
    every = train(tmp_path, "c6", *common, "--clients-per-round", "6", ranks=2)
    full = train(tmp_path, "b6", *common, "--buffer", "6", ranks=2)
    clock = VirtualClock(6, 50, 1, per_round=3)
    rows = sampled["round/clients"][:]
    assert [sorted(r) for r in rows.tolist()] == [clock.starters(None, r) for r in range(4)]
    assert all(len(set(r)) == 3 for r in rows.tolist()) and sampled["round/staleness_max"][:].tolist() == [0] * 4
    times = np.diff(np.concatenate([[0], sampled["round/virtual_time"][:]]))
    assert times.tolist() == [int(max(clock.r[c] for c in r)) for r in rows.tolist()]
    assert np.array_equal(sampled["final/model"][:], on_two["final/model"][:])
    assert np.array_equal(every["final/model"][:], full["final/model"][:])
    assert every["round/clients"][:].tolist() == full["round/clients"][:].tolist()


@pytest.mark.parametrize("flags,message", [
    (["--clients-per-round", "3", "--buffer", "2"], "--buffer 2: with --clients-per-round 3 a round waits"),
    (["--clients-per-round", "7"], "--clients-per-round 7: must be in [1, --clients 6]"),
])
def test_bad_clients_per_round_is_one_line(capsys, flags, message):
    from fdahpc.train import main

    assert main(["--mode", "semiasync", "--clients", "6", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("strategy", ["fedavg", "fedqs-avg"])
def test_a_host_keeps_every_training_tensor_on_its_device(strategy):
    """``--device``'s reach, on a machine without a GPU: "meta" stands in for the host's
    GPU. Tensors there have shapes and no values, so a job on it runs forward, backward,
    the clip and the step (the mode's optimizer, or FedQS's heavy ball) and fails at the
    first number it reads back (the loss); a tensor that stayed on, or was made on, the CPU
    anywhere before fails earlier with a device error instead. The same for FedQS's label
    test on the client's probe rows."""
    from fdahpc.comm import LocalCommunicator
    from fdahpc.cli import parse_args
    from fdahpc.data import load_dataset, partition
    from fdahpc.models import build_model
    from fdahpc.params import FlatParams
    from fdahpc.semiasync.client import Host, LocalTraining, Uploads
    from fdahpc.semiasync.mode import _split, fedqs_params

    cfg = parse_args(["--mode", "semiasync", "--strategy", strategy, "--dataset", "synthetic", "--model", "lenet5bn",
                      "--clients", "4", "--tau", "2", "--clip-grad-norm", "20"]).cfg
    data = load_dataset("synthetic")
    parts = partition(data.y_train, 4, "iid", 0)
    x, y = data.x_train[np.concatenate(parts[:2])], data.y_train[np.concatenate(parts[:2])]
    fedqs = fedqs_params(cfg) if strategy.startswith("fedqs") else None
    clients = _split(cfg, [0, 1], parts, x, y, fedqs is not None)
    model = build_model("lenet5bn", 1, 28, 10).to("meta")
    host = Host(LocalCommunicator(), model, FlatParams(model, buffers=True), clients,
                training=LocalTraining("sgd", 0.1, clip_grad_norm=20.0, device="meta"),
                uploads=Uploads("model", fedqs=fedqs),
                num_classes=10, num_clients=4)
    assert {p.device.type for p in model.parameters()} == {"meta"}
    with pytest.raises(RuntimeError, match="item\\(\\) cannot be called on meta tensors"):
        host.train(host.clients[0], 0.1, 0.5)
    if fedqs is not None:
        with pytest.raises(RuntimeError, match="item\\(\\) cannot be called on meta tensors"):
            host._label_test(host.clients[1].data)
