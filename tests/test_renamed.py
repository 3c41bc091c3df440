"""Renamed names (fdahpc.renamed, docs/glossary.md): ``--sync`` is ``--trigger``, the byte
purpose ``sync`` is ``model``. Each old spelling still works with one deprecation line,
both spellings at once are refused, and files written under the old names still read."""

import json
import os
import warnings

import h5py
import pytest
import torch

from fdahpc import ModelAverager, checkpoint
from fdahpc.comm import PURPOSES, LocalCommunicator
from fdahpc.cli import parse_args
from fdahpc.run import layout_of
from fdahpc.train import main

NOTE = "--sync is now --trigger; --sync will be removed in a later release"


def _no_launcher_rank(monkeypatch):
    for name in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def test_old_flag_is_the_trigger_with_one_note(capsys, monkeypatch):
    _no_launcher_rank(monkeypatch)
    cfg = parse_args(["--strategy", "fedavg", "--sync", "linear", "--theta", "2"]).cfg
    assert cfg.trigger == "linear" and "trigger" in cfg.given and not hasattr(cfg, "sync")
    assert capsys.readouterr().err.splitlines() == [f"fdahpc.train: note: {NOTE}"]
    assert parse_args(["--strategy", "fedavg", "--trigger", "linear", "--theta", "2"]).cfg == cfg
    assert capsys.readouterr().err == ""  # the new spelling says nothing


def test_old_flag_note_comes_from_rank_0_only(capsys, monkeypatch):
    _no_launcher_rank(monkeypatch)
    monkeypatch.setenv("PMI_RANK", "1")
    assert parse_args(["--strategy", "fedavg", "--sync", "linear"]).cfg.trigger == "linear"
    assert capsys.readouterr().err == ""


def test_both_flags_are_one_line_exit_2(capsys, monkeypatch, tmp_path):
    _no_launcher_rank(monkeypatch)
    out = tmp_path / "run.h5"
    assert main(["--strategy", "fedavg", "--sync", "linear", "--trigger", "periodic", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["fdahpc.train: error: --sync and --trigger both given; --sync is the old name of --trigger, "
                     "keep only --trigger"] and not out.exists()


@pytest.mark.parametrize("text", ['strategy = "fedavg"\nsync = "linear"\n', '[run]\nstrategy = "fedavg"\nsync = "linear"\n'])
def test_old_toml_key_is_the_trigger_with_one_note(capsys, monkeypatch, tmp_path, text):
    _no_launcher_rank(monkeypatch)
    path = tmp_path / "run.toml"
    path.write_text(text)
    assert parse_args(["--config", str(path)]).cfg.trigger == "linear"
    assert capsys.readouterr().err.splitlines() == [
        f"fdahpc.train: note: --config {path}: 'sync' is now 'trigger'; 'sync' will be removed in a later release"]


def test_both_toml_keys_are_refused(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('strategy = "fedavg"\nsync = "linear"\ntrigger = "periodic"\n')
    with pytest.raises(ValueError, match=r"^--config .*: 'sync' and 'trigger' both given; 'sync' is the old name"):
        parse_args(["--config", str(path)])


def test_old_averager_keyword_warns_once_and_builds_the_same():
    torch.manual_seed(0)
    with pytest.warns(DeprecationWarning, match=r"^ModelAverager: sync= is now trigger=; sync= will be removed") as seen:
        old = ModelAverager(torch.nn.Linear(3, 1), LocalCommunicator(), "fedavg", sync="linear", theta=2.0)
    assert len([w for w in seen if issubclass(w.category, DeprecationWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new keyword warns nothing
        new = ModelAverager(torch.nn.Linear(3, 1), LocalCommunicator(), "fedavg", trigger="linear", theta=2.0)
    assert type(old.strategy.trigger) is type(new.strategy.trigger) and old.strategy.trigger.name == "linear"
    with pytest.raises(ValueError, match=r"^ModelAverager: sync= and trigger= both given"):
        ModelAverager(torch.nn.Linear(3, 1), LocalCommunicator(), "fedavg", sync="linear", trigger="sketch")


def test_model_bytes_are_counted_under_model():
    comm = LocalCommunicator()
    comm.allreduce_mean_(torch.zeros(5), "model")
    assert comm.bytes_sent["model"] == 20 and "sync" not in PURPOSES
    with pytest.raises(ValueError, match="purpose 'sync': unknown"):
        comm.allreduce_mean_(torch.zeros(5), "sync")
    comm.load_state_dict({"bytes_sent": {"sync": 7, "monitor": 1, "eval": 0, "control": 0}})  # an older checkpoint's
    assert comm.bytes_sent == {"model": 7, "monitor": 1, "eval": 0, "control": 0}


def test_old_run_file_config_labels_its_trigger(tmp_path):
    """A run file written before the rename (config key ``sync``, no layout attribute): its
    label still names Θ, which it shows only when the trigger compares with Θ."""
    config = dict(strategy="fedavg", theta=2.0, partition="iid")
    attrs = dict(mode="sync", strategy="fedavg", world_size=2)
    old = layout_of(dict(attrs, config=json.dumps(dict(config, sync="linear"))))
    new = layout_of(dict(attrs, config=json.dumps(dict(config, trigger="linear"))))
    plain = layout_of(dict(attrs, config=json.dumps(dict(config, sync=None))))
    assert old["label"] == new["label"] == "fedavg workers=2 θ=2 iid" and plain["label"] == "fedavg workers=2 iid"


def _as_written_before(folder: str) -> None:
    """Rewrite checkpoint ``folder`` (one rank) as the version before the rename wrote it:
    the option ``sync`` for ``trigger``, the byte purpose ``sync`` for ``model``."""
    manifest = checkpoint.read_manifest(folder)
    state = checkpoint.load_rank(folder, manifest, 0)

    def old(counts):
        return {("sync" if k == "model" else k): v for k, v in counts.items()}

    state["comm"]["bytes_sent"] = old(state["comm"]["bytes_sent"])
    state["strategy"]["bytes_at_reset"] = old(state["strategy"]["bytes_at_reset"])
    state["progress"]["bytes_before"] = old(state["progress"]["bytes_before"])
    name = "rank-00000.pt"
    assert name in manifest["files"]
    nbytes, crc = checkpoint._write_atomic(os.path.join(folder, name), lambda f: torch.save(checkpoint._plain(state), f))
    manifest["files"][name] = {"bytes": nbytes, "crc32": crc}
    manifest["sync"] = manifest.pop("trigger")
    manifest["config"]["sync"] = manifest["config"].pop("trigger")
    with open(os.path.join(folder, checkpoint.MANIFEST), "w") as f:
        json.dump(manifest, f)


def test_a_checkpoint_written_before_the_rename_resumes_bit_for_bit(tmp_path, capsys):
    """10 steps, the checkpoint rewritten with the old names, 10 more from it: the same model,
    syncs and bytes as 20 steps straight (the identity check and the byte counters read the
    old names), and a changed trigger is still refused under its new flag."""
    base = ["--strategy", "fedavg", "--trigger", "linear", "--theta", "0.5", "--batch-size", "16", "--log-every", "1000",
            "--eval-every", "10"]
    ck, out, straight = str(tmp_path / "ck"), str(tmp_path / "run.h5"), str(tmp_path / "straight.h5")
    assert main([*base, "--max-steps", "20", "--out", straight]) == 0
    assert main([*base, "--max-steps", "10", "--checkpoint-dir", ck, "--out", out]) == 0
    _as_written_before(checkpoint.latest(ck))
    capsys.readouterr()
    other = list(base)
    other[other.index("--trigger") + 1] = "sketch"
    assert main([*other, "--max-steps", "20", "--checkpoint-dir", ck, "--resume", "auto"]) == 2
    assert "--trigger 'linear' (this run: 'sketch')" in capsys.readouterr().err
    assert main([*base, "--max-steps", "20", "--checkpoint-dir", ck, "--resume", "auto"]) == 0
    with h5py.File(out, "r") as a, h5py.File(straight, "r") as b:
        assert (a["final/model"][()] == b["final/model"][()]).all() and a["sync/step"][()].tolist() == b["sync/step"][()].tolist()
        assert len(b["sync/step"]) > 0
        for name in ("syncs", "comm_bytes", "comm_bytes_rank0"):
            assert a.attrs[name] == b.attrs[name], name
        assert json.loads(a.attrs["config"])["trigger"] == "linear" and "sync" not in json.loads(a.attrs["config"])


def test_old_flag_note_is_one_line_from_two_mpi_ranks(tmp_path):
    """Under mpiexec every rank parses ``--sync``; the note comes once, from rank 0."""
    from conftest import run_python

    out = tmp_path / "run.h5"
    proc = run_python(["-m", "fdahpc.train", "--strategy", "fedavg", "--sync", "linear", "--theta", "1", "--model", "mlr",
                       "--max-steps", "4", "--log-every", "1000", "--out", str(out)], ranks=2, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count(NOTE) == 1, proc.stderr
    with h5py.File(out, "r") as h5:
        assert json.loads(h5.attrs["config"])["trigger"] == "linear"
