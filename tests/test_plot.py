"""fdahpc.plot: figures from tiny hand-written run files, and one-line errors on bad input."""

import json

import h5py
import numpy as np
import pytest

from fdahpc.plot import main, read_run, run_label

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_run(path, strategy, target=0.9, **config):
    cfg = {"strategy": strategy, "theta": 1.5, "tau": None, "partition": "iid", **config}
    steps = np.arange(0, 500, 100, dtype=np.int64)
    with h5py.File(path, "w") as h5:
        h5.attrs.update(
            strategy=strategy, model="lenet5", dataset="mnist5k", partition=cfg["partition"],
            world_size=2, params=61706, steps=400, syncs=3, comm_bytes=10**7,
            comm_bytes_rank0=5 * 10**6, final_accuracy=0.93, target_accuracy=target,
            steps_to_target=300, comm_bytes_to_target=8 * 10**6, wall_seconds=1.0,
            config=json.dumps(cfg),
        )
        h5["eval/step"] = steps
        h5["eval/accuracy"] = np.linspace(0.1, 0.93, len(steps))
        h5["eval/loss"] = np.linspace(2.3, 0.2, len(steps))
        h5["eval/comm_bytes"] = steps * 25_000
        h5["sync/step"] = np.array([100, 200, 300], dtype=np.int64)
    return str(path)


@pytest.fixture
def two_runs(tmp_path):
    return [
        _write_run(tmp_path / "fda.h5", "sketchfda"),
        _write_run(tmp_path / "avg.h5", "fedavg", target=-1.0, tau=50),
    ]


def test_main_writes_a_png(two_runs, tmp_path, capsys):
    out = tmp_path / "fig.png"
    assert main([*two_runs, "-o", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000
    assert capsys.readouterr().err == ""


def test_log_gb_axis(two_runs, tmp_path):
    out = tmp_path / "fig.png"
    assert main([*two_runs, "-o", str(out), "--log-gb"]) == 0
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_read_run_scales_bytes_to_gigabytes_and_drops_negative_target(two_runs):
    fda, avg = (read_run(p) for p in two_runs)
    assert fda.x[0][-1] == pytest.approx(400 * 25_000 / 1e9)
    assert fda.target_accuracy == 0.9
    assert avg.target_accuracy == 0.0


def test_labels_show_only_the_settings_that_apply(two_runs):
    assert read_run(two_runs[0]).label == "sketchfda workers=2 θ=1.5 iid"
    assert read_run(two_runs[1]).label == "fedavg workers=2 τ=50 iid"
    assert run_label({"strategy": "synchronous"}, {}) == "synchronous"


def _one_line_error(capsys, *words):
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


def test_missing_output_flag(two_runs, capsys):
    assert main(two_runs) == 2
    _one_line_error(capsys, "-o")


def test_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "nope.h5"), "-o", str(tmp_path / "f.png")]) == 2
    _one_line_error(capsys, "nope.h5", "not found")
    assert not (tmp_path / "f.png").exists()


def test_not_hdf5(tmp_path, capsys):
    bogus = tmp_path / "notes.h5"
    bogus.write_text("hello")
    assert main([str(bogus), "-o", str(tmp_path / "f.png")]) == 2
    _one_line_error(capsys, "notes.h5", "not an HDF5 file")


def test_hdf5_but_not_a_run_file(tmp_path, capsys):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as h5:
        h5["x"] = np.zeros(3)
    assert main([str(other), "-o", str(tmp_path / "f.png")]) == 2
    _one_line_error(capsys, "other.h5", "not an fdahpc run file")


def test_no_runs_and_unknown_flag(tmp_path, capsys):
    assert main(["-o", str(tmp_path / "f.png")]) == 2
    _one_line_error(capsys, "no run files")
    assert main(["--bogus"]) == 2
    _one_line_error(capsys, "--bogus", "usage")


def test_bad_output_extension(two_runs, tmp_path, capsys):
    assert main([*two_runs, "-o", str(tmp_path / "fig.nope")]) == 2
    _one_line_error(capsys, "fig.nope")


def _write_semiasync_run(path, strategy="fedqs-avg"):
    cfg = {"strategy": strategy, "clients": 40, "buffer": 5, "speed_ratio": 50, "scenario": None,
           "partition": "dirichlet:0.5"}
    with h5py.File(path, "w") as h5:
        h5.attrs.update(mode="semiasync", strategy=strategy, partition=cfg["partition"], target_accuracy=-1.0,
                        config=json.dumps(cfg))
        h5["round/version"] = np.arange(1, 7)
        h5["round/virtual_time"] = np.array([3, 5, 9, 10, 14, 20])
        h5["round/accuracy"] = np.array([np.nan, 0.3, np.nan, 0.5, np.nan, 0.6])  # scored every 2 rounds
    return str(path)


def test_semiasync_runs_plot_against_rounds_and_virtual_time(tmp_path, capsys):
    run = read_run(_write_semiasync_run(tmp_path / "qs.h5"))
    assert run.xlabels == ("aggregation rounds", "virtual time") and run.label == "fedqs-avg clients=40 buffer=5 1:50 dirichlet:0.5"
    assert run.x[0].tolist() == [2, 4, 6] and run.x[1].tolist() == [5, 10, 20]
    assert run.accuracy.tolist() == [0.3, 0.5, 0.6]
    out = tmp_path / "sa.png"
    assert main([run.path, _write_semiasync_run(tmp_path / "avg.h5", "fedavg"), "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_mixing_modes_is_refused(two_runs, tmp_path, capsys):
    assert main([two_runs[0], _write_semiasync_run(tmp_path / "qs.h5"), "-o", str(tmp_path / "f.png")]) == 2
    _one_line_error(capsys, "mix files whose axes differ", "aggregation rounds, virtual time vs training communication (GB)")


def test_readers_follow_the_files_layout_not_its_mode(tmp_path, capsys):
    """A run file of a mode the readers have never heard of: plot, summary and compare read
    what its ``layout`` attribute says it holds."""
    from fdahpc.compare import compare
    from fdahpc.summary import summarize

    layout = dict(x="ring/hop", accuracy="ring/accuracy", loss="ring/loss", panels=[["ring/hop", "hops", 1]],
                  events="ring/hop", bytes=["ring/bytes", "sum"], workers="R=3", label="gossip R=3", convergence=False)
    paths = []
    for name in ("a.h5", "b.h5"):
        path = tmp_path / name
        with h5py.File(path, "w") as h5:
            h5.attrs.update(mode="gossip", strategy="gossip", target_accuracy=0.5, layout=json.dumps(layout), status="finished")
            h5["ring/hop"] = np.arange(1, 5)
            h5["ring/accuracy"] = np.array([0.2, 0.4, 0.55, 0.6])
            h5["ring/loss"] = np.array([2.0, 1.5, 1.2, 1.1])
            h5["ring/bytes"] = np.full(4, 250_000_000)
            h5["final/model"] = np.ones(3, dtype=np.float32)
        paths.append(str(path))
    run = read_run(paths[0])
    assert (run.label, run.xlabels, run.x[0].tolist()) == ("gossip R=3", ("hops",), [1, 2, 3, 4])
    s = summarize(paths[0])
    assert (s.workers, s.steps, s.syncs, s.gigabytes, s.accuracy, s.target) == ("R=3", 4, 4, 1.0, 0.6, "0.5@3")
    assert compare(*paths)[0] == "identical"
    assert main([*paths, "-o", str(tmp_path / "g.png")]) == 0


def test_a_wall_clock_panel_where_every_file_has_one(tmp_path):
    """Files with ``eval/wall_seconds`` get a third panel, accuracy against wall seconds; a
    figure that mixes in a file without it keeps the two panels every file has."""
    from fdahpc.plot import WALL, plot_runs

    timed = _write_run(tmp_path / "timed.h5", "linearfda")
    with h5py.File(timed, "a") as h5:
        h5["eval/wall_seconds"] = np.array([0.0, 1.0, 2.5, 4.0, 5.0])
    old = _write_run(tmp_path / "old.h5", "fedavg", tau=5)
    run = read_run(timed)
    assert run.xlabels[-1] == WALL and run.x[-1].tolist() == [0.0, 1.0, 2.5, 4.0, 5.0]
    assert WALL not in read_run(old).xlabels
    plot_runs([timed, old], str(tmp_path / "mixed.png"))  # no "axes differ" refusal
    assert (tmp_path / "mixed.png").read_bytes()[:8] == PNG_MAGIC
