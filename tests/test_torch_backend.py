"""The torch.distributed backend: launcher detection, the same runs as MPI under gloo,
torchrun and mpirun start-ups, failures that end the job, and one-line start-up errors.

GPU paths (NCCL, ``--device cuda``) need a GPU machine: ``benchmarks/gpu_check.sh``.
"""

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from conftest import REPO, run_python, train_cli
from fdahpc.comm import LaunchError, make_communicator, resolve_backend
from fdahpc.comm.launch import detect, env_rank, first_host

TRAIN = ["-m", "fdahpc.train", "--dataset", "mnist5k", "--model", "lenet5", "--batch-size", "16", "--log-every", "1000000"]


# Launcher detection (pure: environments as dicts) -------------------------------------

def test_torchrun_environment():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
           "MASTER_ADDR": "node7", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}
    got = detect(env)
    assert (got.launcher, got.rank, got.world_size, got.local_rank, got.local_size) == ("torchrun", 3, 8, 1, 4)
    assert (got.master_addr, got.master_port, got.env_store) == ("node7", 29500, True)


@pytest.mark.parametrize("env,missing", [
    ({"RANK": "0"}, "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "1"}, "MASTER_ADDR"),
])
def test_incomplete_torchrun_environment_names_what_is_missing(env, missing):
    with pytest.raises(LaunchError, match=f"torchrun environment incomplete: .* set but {missing} missing"):
        detect(env)


def test_slurm_step_environment():
    env = {"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "2", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
           "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "7", "SLURM_NTASKS": "8",
           "SLURM_STEP_NODELIST": "gpu[03-04,07]", "SLURM_STEP_TASKS_PER_NODE": "4,2(x2)"}
    got = detect(env)
    assert (got.launcher, got.rank, got.world_size, got.local_rank, got.local_size) == ("slurm", 5, 7, 1, 2)
    assert got.master_addr == "gpu03"
    assert got.master_port == 20000 + (1234 * 16 + 2) % 40000
    pinned = detect({**env, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "4000"})
    assert (pinned.master_addr, pinned.master_port) == ("10.0.0.1", 4000)
    with pytest.raises(LaunchError, match="SLURM environment incomplete: .* set but SLURM_JOB_NODELIST missing"):
        detect({k: v for k, v in env.items() if k != "SLURM_STEP_NODELIST" and k != "SLURM_JOB_NODELIST"})


def test_the_batch_script_itself_is_not_a_step():
    batch = {"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n1"}
    assert detect(batch).launcher == "single"
    assert detect({**batch, "SLURM_STEP_ID": "batch"}).launcher == "single"


@pytest.mark.parametrize("nodelist,first", [
    ("node1", "node1"), ("gpu[03-04,07],login1", "gpu03"), ("a1,b[2-3]", "a1"),
    ("rack[2-3]-n[010-012]", "rack2-n010"), ("c[7]", "c7"),
])
def test_first_host_of_a_slurm_node_list(nodelist, first):
    assert first_host(nodelist) == first


def test_rank_before_any_communicator():
    assert env_rank({"PMI_RANK": "1", "MPI_LOCALRANKID": "0"}) == (1, 0)
    assert env_rank({"RANK": "0", "LOCAL_RANK": "0", "SLURM_PROCID": "6"}) == (0, 0)
    assert env_rank({}) == (None, None)


def test_auto_backend_follows_the_launcher(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_ID", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    assert resolve_backend("auto") == "local"
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert resolve_backend("auto") == "torch"  # srun without an MPI plugin
    monkeypatch.setenv("PMI_RANK", "0")
    assert resolve_backend("auto") == "mpi"  # srun --mpi=pmi2, mpirun
    monkeypatch.setenv("RANK", "0")
    assert resolve_backend("auto") == "torch"  # torchrun


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusals of a machine without GPUs")
@pytest.mark.parametrize("backend,device,needle", [
    ("torch", "cuda", "no CUDA GPU visible"),
    ("nccl", "auto", "no CUDA GPU visible"),
    ("nccl", "cpu", "--backend nccl reduces GPU tensors"),
    ("mpi", "cuda", "--backend mpi reduces CPU buffers"),
    ("local", "cuda", "no CUDA GPU visible"),
])
def test_gpu_requests_without_gpus_are_refused(backend, device, needle):
    with pytest.raises(LaunchError, match=needle):
        make_communicator(backend, device)


def test_gloo_with_one_rank_is_a_real_process_group():
    # One process, a real gloo group: the whole collective interface, on the CPU.
    proc = subprocess.run([sys.executable, "-c", (
        "import numpy as np, torch; from fdahpc.comm import make_communicator;"
        "c = make_communicator('gloo');"
        "a = np.arange(3, dtype=np.float64); c.allreduce_mean_(a, 'eval');"
        "t = torch.ones(4); c.bcast_(t, 'control');"
        "print(type(c).__name__, c.backend, c.device, a.tolist(), c.allgather(np.array([7]), 'control').tolist(),"
        "      c.allgather_obj('x'), c.bytes_sent['eval'], c.bytes_sent['control']);"
        # Left open, gloo's threads can abort the interpreter at exit under load.
        "c.close()")],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=dict(os.environ, MASTER_PORT=""))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["TorchCommunicator", "gloo", "cpu", "[0.0,", "1.0,", "2.0]", "[[7]]", "['x']", "24", "24"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads the thread list from /proc")
def test_close_leaves_no_gloo_thread_behind(tmp_path):
    """The cause of "terminate called without an active exception" after a finished run: a
    world group that destroy_process_group() cannot free (torch.distributed.nn.functional's
    default arguments, imported by the first optimizer, held it) keeps gloo's threads into
    interpreter teardown. After comm.close() a rank must have no gloo thread left."""
    res = run_python(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "tests/teardown_probe.py",
                      *TRAIN[2:], "--strategy", "linearfda", "--max-steps", "4", "--backend", "torch",
                      "--out", str(tmp_path / "t.h5")], timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [line for line in res.stdout.splitlines() if line.startswith("threads after teardown:")]
    assert len(rows) == 2, res.stdout
    assert not [r for r in rows if "gloo" in r], rows


# Whole runs ---------------------------------------------------------------------------

def _run(tmp_path, name, launcher, args, *, env=None, timeout=180):
    out = tmp_path / f"{name}.h5"
    return train_cli(out, *TRAIN[2:], *args, ranks=2, torchrun=launcher == "torchrun", env=env, timeout=timeout), out


def _read(path):
    with h5py.File(path, "r") as f:
        return (f["sync/step"][:].tolist(), f["final/model"][:], dict(f.attrs),
                f["eval/accuracy"][:].tolist())


@pytest.mark.slow
@pytest.mark.parametrize("strategy,extra", [
    ("linearfda", ["--theta", "0.5"]),
    ("sketchfda", ["--theta", "0.5"]),
    ("fedadam", ["--tau", "10"]),
])
def test_mpi_and_gloo_give_the_same_run(tmp_path, strategy, extra):
    """Same seed, strategy and data under --backend mpi and --backend torch (gloo, 2 ranks
    on the CPU): the same synchronization steps and the same parameters."""
    args = ["--strategy", strategy, *extra, "--max-steps", "80", "--eval-every", "40"]
    runs = {}
    for backend in ("mpi", "torch"):
        proc, out = _run(tmp_path, backend, "mpirun", [*args, "--backend", backend])
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[backend] = _read(out)
    (sync_m, w_m, attrs_m, acc_m), (sync_t, w_t, attrs_t, acc_t) = runs["mpi"], runs["torch"]
    assert len(sync_m) >= 2 and sync_m == sync_t
    np.testing.assert_allclose(w_t, w_m, rtol=1e-5, atol=1e-6)
    assert attrs_m["comm_bytes"] == attrs_t["comm_bytes"] and attrs_m["comm_bytes_rank0"] == attrs_t["comm_bytes_rank0"]
    np.testing.assert_allclose(acc_t, acc_m, atol=1e-3)
    assert attrs_t["world_size"] == 2 and attrs_t["status"] == "finished"


@pytest.mark.slow
def test_torchrun_starts_a_gloo_job(tmp_path):
    proc, out = _run(tmp_path, "torchrun", "torchrun", ["--strategy", "sketchfda", "--max-steps", "40", "--backend", "torch"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    syncs, w, attrs, acc = _read(out)
    assert attrs["world_size"] == 2 and attrs["status"] == "finished" and attrs["steps"] == 40
    assert json_config(attrs)["backend"] == "torch"


@pytest.mark.slow
def test_torchrun_picks_the_torch_backend_by_itself(tmp_path):
    proc, out = _run(tmp_path, "auto", "torchrun", ["--strategy", "fedavg", "--tau", "5", "--max-steps", "20"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _read(out)[2]["world_size"] == 2


def json_config(attrs):
    import json

    return json.loads(attrs["config"])


FAILING_RANK = """
import os, sys
from fdahpc.strategies.base import Synchronizer
original = Synchronizer.after_step
def after_step(self, loss=None):
    if self.comm.rank == 1 and self.steps == 3:
        raise RuntimeError("injected failure on rank 1")
    return original(self, loss)
Synchronizer.after_step = after_step
from fdahpc.train import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["mpirun", "torchrun"])
def test_an_exception_on_one_rank_ends_a_torch_backend_job(tmp_path, launcher):
    script = tmp_path / "fail.py"
    script.write_text(FAILING_RANK)
    args = [str(script), "--backend", "torch", "--strategy", "synchronous", "--epochs", "50", "--out", str(tmp_path / "f.h5")]
    if launcher == "torchrun":
        proc = run_python(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args], timeout=120)
    else:
        proc = run_python(args, ranks=2, timeout=120)
    assert proc.returncode != 0
    assert "injected failure on rank 1" in proc.stderr and "[rank 1]" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("env,args,needle", [
    ({"RANK": "0"}, ["--max-steps", "1"], "torchrun environment incomplete: RANK set but WORLD_SIZE"),
    ({}, ["--device", "cuda", "--backend", "gloo", "--max-steps", "1"], "no CUDA GPU visible"),
    ({}, ["--backend", "nccl", "--max-steps", "1"], "no CUDA GPU visible"),
    ({}, ["--mode", "semiasync", "--backend", "torch", "--rounds", "1"], "needs MPI's probe"),
])
def test_start_up_errors_are_one_line(tmp_path, env, args, needle):
    if torch.cuda.is_available() and "GPU" in needle:
        pytest.skip("this machine has a GPU")
    proc = run_python([*TRAIN, *args, "--out", str(tmp_path / "x.h5")], timeout=60, env_extra=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.slow
def test_semiasync_under_torchrun_is_refused_in_one_line(tmp_path):
    proc, out = _run(tmp_path, "semi", "torchrun", ["--mode", "semiasync", "--clients", "4", "--buffer", "2", "--rounds", "2"],
                     timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.count("needs MPI's probe") == 1, proc.stderr[-2000:]


@pytest.mark.slow
def test_collectives_contract_over_gloo():
    """Every ``distributed``/``mpi`` test of the suite, rerun with the communicator fixture
    on torch.distributed (gloo) under ``mpiexec -n 2``."""
    if shutil.which("mpiexec") is None:
        pytest.skip("mpiexec not found: pip install 'fdahpc[mpich]'")
    proc = run_python(["-m", "pytest", "-q", "--with-mpi", "-m", "mpi or distributed", "-p", "no:cacheprovider",
                       "tests/test_comm.py", "tests/test_train.py", "tests/test_fda.py", "tests/test_fedopt.py", "tests/test_reference.py"],
                      ranks=2, timeout=300, env_extra={"FDAHPC_TEST_BACKEND": "torch"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
