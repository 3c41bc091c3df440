"""The trainer end to end: in-process runs against the `comm` fixture, and real
``mpiexec`` jobs as subprocesses with timeouts (a hang is a failure, never a wait)."""

import json

import h5py
import numpy as np
import pytest
import torch

from conftest import run_python, train_inprocess
from naive import paper_comm_bytes
from fdahpc.config import TrainConfig

from fdahpc.worker import BatchStream, make_optimizer

@pytest.mark.distributed
@pytest.mark.parametrize("strategy,extra", [("synchronous", {}), ("fedavg", {"tau": 7})])
def test_comm_bytes_follow_the_paper_formula(comm, tmp_path, strategy, extra):
    setup, res = train_inprocess(comm, tmp_path / "run.h5", strategy=strategy, max_steps=30, **extra)
    k, d = comm.world_size, setup.job.flat.dim
    # fedavg: 4 rounds of 7, then the run's closing sync at step 30 hands back the held model
    expected_syncs = 30 if strategy == "synchronous" else 30 // 7 + 1
    assert res["syncs"] == expected_syncs and res["final_sync"] == int(strategy == "fedavg")
    assert res["comm_bytes"] == expected_syncs * 4 * d * k * 2
    # What this rank really handed to training collectives: one model per sync.
    assert res["comm_bytes_rank0"] == expected_syncs * 4 * d


@pytest.mark.distributed
def test_run_file_schema(comm, tmp_path):
    setup, res = train_inprocess(comm, tmp_path / "run.h5", strategy="fedavg", tau=5, max_steps=40, eval_every=10)
    if not comm.is_root:
        return
    with h5py.File(setup.out) as f:
        a = f.attrs
        for key in ("strategy", "model", "dataset", "partition", "world_size", "params", "steps",
                    "syncs", "comm_bytes", "comm_bytes_rank0", "final_accuracy", "target_accuracy",
                    "steps_to_target", "comm_bytes_to_target", "wall_seconds", "config"):
            assert key in a, key
        assert a["strategy"] == "fedavg" and a["world_size"] == comm.world_size and a["params"] == setup.job.flat.dim
        assert a["steps"] == 40 and a["syncs"] == 8 and a["steps_to_target"] == -1
        assert json.loads(a["config"])["tau"] == 5
        assert f["eval/step"][:].tolist() == [10, 20, 30, 40]
        assert f["sync/step"][:].tolist() == [5, 10, 15, 20, 25, 30, 35, 40]
        assert np.all(np.diff(f["eval/comm_bytes"][:]) > 0)
        assert f["eval/accuracy"][-1] == pytest.approx(res["final_accuracy"])


def test_one_rank_synchronous_equals_plain_training(tmp_path):
    """With one worker, averaging is the identity: fdahpc must not perturb training."""
    from fdahpc.comm import LocalCommunicator
    from fdahpc.data import load_dataset
    from fdahpc.models import build_model

    setup, _ = train_inprocess(LocalCommunicator(), tmp_path / "run.h5", strategy="synchronous", max_steps=25, seed=3)
    data = load_dataset("mnist5k")
    torch.manual_seed(3)
    model = build_model("lenet5", 1, 28, 10)
    opt = make_optimizer("adam", 1e-3, model.parameters(), 0.0)
    batches = BatchStream(data.x_train, data.y_train, 16, seed=3, stream=0)
    for _ in range(25):
        xb, yb = batches.next()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    plain = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert torch.equal(plain, setup.job.flat.w)


def test_momentum_is_sgd_with_a_heavy_ball_of_0_9():
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = make_optimizer("momentum", 0.1, [w], 0.0)
    v, expect = torch.zeros(2), w.detach().clone()
    for g in (torch.tensor([0.5, 1.0]), torch.tensor([-1.0, 2.0])):
        w.grad = g.clone()
        opt.step()
        v = 0.9 * v + g
        expect -= 0.1 * v
    assert torch.allclose(w.detach(), expect)


def test_target_accuracy_stops_early(tmp_path):
    from fdahpc.comm import LocalCommunicator

    setup, res = train_inprocess(LocalCommunicator(), tmp_path / "run.h5", strategy="fedavg", tau=10, epochs=3,
                               eval_every=10, target_accuracy=0.5)
    assert 0 < res["steps_to_target"] < setup.job.total_steps
    assert res["final_accuracy"] >= 0.5
    assert res["comm_bytes_to_target"] == paper_comm_bytes(
        syncs=res["steps_to_target"] // 10, steps=res["steps_to_target"], dim=setup.job.flat.dim, workers=1, state_bytes=0)


@pytest.mark.slow
def test_mpiexec_default_job_learns(tmp_path):
    """The README's main command, shortened: 4 ranks, SketchFDA, LeNet-5, MNIST-5k."""
    out = tmp_path / "default.h5"
    proc = run_python(["-m", "fdahpc.train", "--epochs", "3", "--out", str(out)], ranks=4, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done:" in proc.stdout and proc.stdout.count("done:") == 1  # rank 0 alone reports
    with h5py.File(out) as f:
        assert f.attrs["strategy"] == "sketchfda" and f.attrs["world_size"] == 4
        assert f.attrs["final_accuracy"] >= 0.90
        assert 0 < f.attrs["syncs"] < f.attrs["steps"]
        assert f.attrs["comm_bytes"] == paper_comm_bytes(
            syncs=int(f.attrs["syncs"]), steps=int(f.attrs["steps"]), dim=int(f.attrs["params"]),
            workers=4, state_bytes=5004)
        assert f.attrs["comm_bytes_rank0"] == f.attrs["syncs"] * 4 * f.attrs["params"] + f.attrs["steps"] * 5004


BAD_INPUT = [
    (["--model", "lenet"], "--model 'lenet': unknown"),
    (["--max-steps", "0"], "--max-steps 0"),
    (["--partition", "dirichlet:-1"], "dirichlet:-1"),
    (["--dataset", "mnist", "--data-dir", "/nonexistent"], "--data-dir"),
    (["--out", "/proc/fdahpc/run.h5"], "--out /proc/fdahpc/run.h5"),
    (["--bogus-flag"], "--bogus-flag"),
    (["--lr", "fast"], "--lr"),
    (["--checkpoint-dir", "/proc/fdahpc/ck"], "--checkpoint-dir /proc/fdahpc/ck: not writable"),
    (["--checkpoint-every", "10"], "--checkpoint-every: needs --checkpoint-dir"),
    (["--resume", "/nonexistent/ck"], "--resume /nonexistent/ck: no complete checkpoint"),
    (["--comm-timeout", "0"], "--comm-timeout 0"),
    # Ranges a strategy's own classes check, at build time, in the same one line:
    (["--theta", "-1"], "--theta -1.0: must be >= 0"),
    (["--theta", "often"], "--theta 'often': not a number"),
    (["--strategy", "fedavg", "--theta", "auto"], "--theta: --strategy fedavg does not read it"),
    (["--theta", "auto", "--theta-auto-epochs", "0"], "--theta-auto-epochs 0.0: must be > 0"),
    (["--fda-lag", "2"], "--fda-lag 2: must be 0"),
    (["--theta", "0", "--fda-lag", "1"], "--fda-lag 1: theta 0 averages every step"),
    (["--sketch-cols", "0"], "cols (--sketch-cols) 0: must be in [1, 16384]"),
    (["--strategy", "fedadam", "--tau", "5", "--server-tau", "0"], "tau (--server-tau) 0.0: must be a positive"),
]


def _bad_input_argv(tmp_path, args):
    defaults = {"--max-steps": "1", "--out": str(tmp_path / "x.h5")}
    return [*args, *(tok for flag, value in defaults.items() if flag not in args for tok in (flag, value))]


def _one_error_line(code, stderr, needle, tmp_path):
    assert code == 2, (code, stderr[-2000:])
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "error" in lines[0] and needle in lines[0], stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("args,needle", BAD_INPUT)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, needle):
    """Each bad input through ``fdahpc.train.main`` itself, in this process (one rank)."""
    from fdahpc.train import main

    code = main(_bad_input_argv(tmp_path, args))
    _one_error_line(code, capsys.readouterr().err, needle, tmp_path)


#: Under mpiexec, one case per place an error is caught (the flags, the options' checks,
#: setup on every rank, the communicator): every rank agrees and rank 0 alone says it.
MPI_BAD_INPUT = [case for case in BAD_INPUT if case[0][0] in ("--model", "--dataset", "--sketch-cols")] + [
    (["--device", "cuda"], "--device cuda: --backend mpi reduces CPU buffers"),  # the MPI backend's own check
]


@pytest.mark.slow
@pytest.mark.parametrize("args,needle", MPI_BAD_INPUT)
def test_bad_input_on_two_ranks_is_one_line_and_exit_2(tmp_path, args, needle):
    proc = run_python(["-m", "fdahpc.train", *_bad_input_argv(tmp_path, args)], ranks=2, timeout=120)
    _one_error_line(proc.returncode, proc.stderr, needle, tmp_path)


@pytest.mark.slow
def test_bad_toml_key(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('strategy = "fedavg"\nbatch-sise = 8\n')
    proc = run_python(["-m", "fdahpc.train", "--config", str(cfg)], timeout=120)
    assert proc.returncode == 2 and "batch-sise" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_toml_config_and_command_line_precedence(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('strategy = "fedavg"\ntau = 4\nmax-steps = 12\nbatch_size = 8\n')
    out = tmp_path / "t.h5"
    proc = run_python(["-m", "fdahpc.train", "--config", str(cfg), "--tau", "6", "--out", str(out)], timeout=120)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(out) as f:
        conf = json.loads(f.attrs["config"])
        assert (conf["strategy"], conf["tau"], conf["batch_size"]) == ("fedavg", 6, 8)
        assert f.attrs["syncs"] == 2 and f.attrs["steps"] == 12


FAILING_RANK = """
import sys
from fdahpc.strategies.base import Synchronizer
from fdahpc.comm import make_communicator
rank = make_communicator("mpi").rank
original = Synchronizer.after_step
def after_step(self, loss=None):
    if rank == 1 and self.steps == 3:
        raise RuntimeError("injected failure on rank 1")
    return original(self, loss)
Synchronizer.after_step = after_step
from fdahpc.train import main
sys.exit(main(["--strategy", "synchronous", "--epochs", "50", "--out", sys.argv[1]]))
"""


@pytest.mark.slow
def test_exception_on_one_rank_aborts_the_job(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(FAILING_RANK)
    proc = run_python([str(script), str(tmp_path / "f.h5")], ranks=2, timeout=120)
    assert proc.returncode != 0
    assert "injected failure on rank 1" in proc.stderr and "[rank 1]" in proc.stderr


def test_every_flag_is_in_one_family_and_toml_tables_work(tmp_path):
    from fdahpc.cli import parse_args
    from fdahpc.config import FAMILIES, OPTION_FIELDS

    grouped = [n for names in FAMILIES.values() for n in names]
    assert sorted(grouped) == sorted(f.name for f in OPTION_FIELDS)
    cfg_file = tmp_path / "run.toml"
    cfg_file.write_text('strategy = "fedadam"\nsync = "linear"\n[server]\nserver-lr = 0.02\nserver-betas = [0.8, 0.99]\n[fda]\ntheta = 3.0\n')
    cfg = parse_args(["--config", str(cfg_file), "--server-betas", "0.5,0.9"]).cfg
    assert (cfg.server_lr, cfg.server_betas, cfg.theta) == (0.02, (0.5, 0.9), 3.0)
    cfg_file.write_text('[fda]\nserver-lr = 0.02\n')
    with pytest.raises(ValueError, match=r"\[fda\] has no key 'server-lr'"):
        parse_args(["--config", str(cfg_file)])
