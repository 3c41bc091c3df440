"""Checkpoint files, the run file's continuation and fdahpc.summary, without MPI.

The end-to-end resume, signal and divergence tests under mpiexec are in
tests/test_resume.py.
"""

import json
import os
import pickle

import h5py
import numpy as np
import pytest
import torch

from fdahpc import checkpoint
from fdahpc.comm import LocalCommunicator
from fdahpc.config import TrainConfig
from fdahpc.run import resolve
from fdahpc.metrics import RunFile
from fdahpc.summary import main as summary_main
from fdahpc.worker import BatchStream

META = dict(mode="sync", world_size=1, strategy="fedavg", model="lenet5", dataset="mnist5k")


def _state():
    return {"w": torch.arange(10, dtype=torch.float32), "angles": np.linspace(0, 1, 4),
            "step": np.int64(7), "rng": np.random.default_rng(3).bit_generator.state, "name": "x", "none": None}


def test_round_trip_keeps_tensors_arrays_and_plain_values(tmp_path):
    folder = checkpoint.save(LocalCommunicator(), str(tmp_path), 5, _state(), META)
    manifest = checkpoint.read_manifest(folder)
    back = checkpoint.load_rank(folder, manifest, 0)
    assert torch.equal(back["w"], torch.arange(10, dtype=torch.float32))
    assert isinstance(back["angles"], np.ndarray) and np.array_equal(back["angles"], np.linspace(0, 1, 4))
    assert back["step"] == 7 and back["name"] == "x" and back["none"] is None
    assert back["rng"] == np.random.default_rng(3).bit_generator.state
    assert manifest["strategy"] == "fedavg" and manifest["position"] == 5


def test_keeps_the_newest_two_and_ignores_incomplete_ones(tmp_path):
    comm = LocalCommunicator()
    for position in (10, 20, 30):
        checkpoint.save(comm, str(tmp_path), position, _state(), META)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000020", "ckpt-000000030"]
    os.makedirs(tmp_path / "ckpt-000000040")  # a write cut before its manifest
    (tmp_path / "ckpt-000000040" / "rank-00000.pt").write_bytes(b"partial")
    assert checkpoint.latest(str(tmp_path)).endswith("ckpt-000000030")
    assert checkpoint.resolve(str(tmp_path), None).endswith("ckpt-000000030")
    assert checkpoint.resolve("auto", str(tmp_path / "none-yet")) is None  # auto: fresh start


@pytest.mark.parametrize("damage, needle", [
    (lambda p: p.write_bytes(p.read_bytes()[:-100]), "does not match its manifest"),
    (lambda p: p.write_bytes(p.read_bytes()[:500] + b"X" + p.read_bytes()[501:]), "does not match its manifest"),
    (lambda p: p.unlink(), "cannot read rank-00000.pt"),
])
def test_truncated_tampered_or_missing_rank_file_is_one_line(tmp_path, damage, needle):
    folder = checkpoint.save(LocalCommunicator(), str(tmp_path), 1, _state(), META)
    damage(tmp_path / "ckpt-000000001" / "rank-00000.pt")
    with pytest.raises(checkpoint.CheckpointError, match=needle) as err:
        checkpoint.load_rank(folder, checkpoint.read_manifest(folder), 0)
    assert "\n" not in str(err.value)


class Payload:
    def __reduce__(self):
        return (os.system, ("echo owned > /dev/null",))


def test_a_pickled_object_is_refused_even_with_a_matching_checksum(tmp_path):
    folder = checkpoint.save(LocalCommunicator(), str(tmp_path), 1, _state(), META)
    path = os.path.join(folder, "rank-00000.pt")
    torch.save({"w": Payload()}, path)  # a tampered file whose manifest was updated too
    manifest = checkpoint.read_manifest(folder)
    import zlib

    data = open(path, "rb").read()
    manifest["files"]["rank-00000.pt"] = {"bytes": len(data), "crc32": zlib.crc32(data)}
    with open(os.path.join(folder, checkpoint.MANIFEST), "w") as f:
        json.dump(manifest, f)
    with pytest.raises(checkpoint.CheckpointError, match="not a plain tensor archive"):
        checkpoint.load_rank(folder, manifest, 0)


def test_foreign_or_incomplete_folders_are_refused(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(checkpoint.CheckpointError, match="not an fdahpc checkpoint"):
        checkpoint.read_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{ not json")
    with pytest.raises(checkpoint.CheckpointError, match="unreadable"):
        checkpoint.read_manifest(str(tmp_path))
    with pytest.raises(checkpoint.CheckpointError, match="no complete checkpoint"):
        checkpoint.resolve(str(tmp_path / "empty"), None)


def test_identity_mismatch_names_each_difference(tmp_path):
    cfg = resolve(TrainConfig(strategy="linearfda")).cfg
    manifest = dict(checkpoint.identity(cfg, 4, 100))
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.check_identity(manifest, checkpoint.identity(resolve(TrainConfig(strategy="fedavg")).cfg, 2, 100), "ck")
    assert "world size 4 (this run: 2)" in str(err.value) and "--strategy 'linearfda' (this run: 'fedavg')" in str(err.value)


def test_unwritable_checkpoint_dir_fails_at_setup(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PermissionError, match="--checkpoint-dir"):
        checkpoint.check_folder(str(tmp_path / "file" / "sub"))


def test_batch_stream_resumes_its_order():
    x, y = np.zeros((50, 1, 2, 2), np.float32), np.arange(50)
    a = BatchStream(x, y, 8, seed=1, stream=0)
    for _ in range(4):
        a.next()
    b = BatchStream(x, y, 8, seed=1, stream=0)
    b.load_state_dict(pickle.loads(pickle.dumps(a.state_dict())))
    for _ in range(10):
        assert torch.equal(a.next()[1], b.next()[1])


def test_run_file_resume_cuts_rows_back_to_the_checkpoint(tmp_path):
    path = str(tmp_path / "r.h5")
    run = RunFile(path, {"strategy": "fedavg"})
    for step in range(1, 6):
        run.append("eval/step", step)
    run.append("round/weights", np.ones(3))
    run.flush()
    rows = {"eval/step": 3}
    for step in (6, 7):  # rows written after the checkpoint: the resumed run repeats them
        run.append("eval/step", step)
    run.close("stopped")
    resumed = RunFile.resume(path, {"strategy": "fedavg"}, rows)
    resumed.append("eval/step", 4)
    resumed.close()
    with h5py.File(path, "r") as h5:
        assert h5["eval/step"][()].tolist() == [1, 2, 3, 4]
        assert "round/weights" not in h5  # not in the checkpoint's rows
        assert h5.attrs["status"] == "finished"
    with pytest.raises(ValueError, match="holds 4 rows of eval/step, the checkpoint recorded 9"):
        RunFile.resume(path, {}, {"eval/step": 9})


def test_run_file_is_readable_while_open_and_leaves_no_temporary_files(tmp_path):
    path = str(tmp_path / "r.h5")
    run = RunFile(path, {"strategy": "sketchfda", "world_size": 2, "target_accuracy": 0.5})
    run.append("eval/step", 10)
    run.append("eval/accuracy", 0.6)
    run.append("eval/comm_bytes", 2e9)
    run.flush()
    with h5py.File(path, "r") as h5:  # the writer still holds the object
        assert h5.attrs["status"] == "running" and h5["eval/step"][()].tolist() == [10]
    assert os.listdir(tmp_path) == ["r.h5"]
    run.close()


def test_summary_lines_for_running_and_finished_files(tmp_path, capsys):
    running = RunFile(str(tmp_path / "a.h5"), {"strategy": "sketchfda", "world_size": 2, "target_accuracy": 0.5})
    for step, acc in ((10, 0.4), (20, 0.6)):
        running.append("eval/step", step)
        running.append("eval/accuracy", acc)
        running.append("eval/comm_bytes", step * 1e8)
        running.append("eval/wall_seconds", step * 1.5)
    running.append("sync/step", 15)
    running.flush()
    empty = RunFile(str(tmp_path / "b.h5"), {"strategy": "fedavg", "world_size": 4})
    assert summary_main([running.path, empty.path]) == 0
    out = capsys.readouterr().out.splitlines()
    # conv20 (the FedQS paper's convergence accuracy) is the semi-asynchronous mode's: "-" here; the
    # target's step and the wall seconds there; a file without the wall series shows "-"
    assert out[1].split()[:11] == ["running", "sketchfda", "2", "20", "1", "2.0000", "30.0", "0.6000", "-", "0.5@20",
                                   "(30.0"]
    assert out[2].split()[:4] == ["running", "fedavg", "4", "0"] and out[2].split()[6] == "-"
    (tmp_path / "junk.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)  # HDF5 signature, nothing behind it
    assert summary_main([str(tmp_path / "junk.h5")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "damaged or truncated" in err
