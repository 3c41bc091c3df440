"""The job scripts in jobs/ on a real (one-node) SLURM cluster: submitted with
``sbatch --wait``, shortened through FDAHPC_ARGS, checked by exit code and run file.

The module fixture stands the cluster up with ``jobs/slurm_cluster.sh start`` (installing
slurm-wlm and munge with apt-get when needed); where SLURM cannot be had (not root, no
apt-get) the tests are skipped with the script's reason, and any other failure to start
is a test failure. Jobs run from the repository root and inherit this process's
environment (sbatch's default --export=ALL), so the `python` they start is this one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, run_python

pytestmark = pytest.mark.slow

CLUSTER = os.path.join(REPO, "jobs", "slurm_cluster.sh")
CANNOT = 3  # slurm_cluster.sh: SLURM cannot be installed or started here
TIMEOUT = 300  # seconds for one sbatch --wait; the jobs themselves get --time=5 (minutes)
TINY = "--dataset mnist5k --model lenet5 --strategy linearfda --max-steps 40 --eval-every 20 --log-every 1000"


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory):
    """Start (or find running) the local cluster; the environment the jobs inherit. A cluster
    this fixture started is stopped when the module's tests are done, pass or fail."""
    try:
        proc = subprocess.run(["bash", CLUSTER, "start"], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"jobs/slurm_cluster.sh start: no answer in {exc.timeout:.0f} s")
    if proc.returncode == CANNOT:
        pytest.skip(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "SLURM not available")
    started = proc.returncode == 0 and "already running" not in proc.stdout
    if proc.returncode != 0 and proc.returncode != CANNOT:
        subprocess.run(["bash", CLUSTER, "stop"], capture_output=True, timeout=120)  # what it did start
    assert proc.returncode == 0, f"jobs/slurm_cluster.sh start failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
    # Nothing of an enclosing job or launcher leaks into the submissions.
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(("SBATCH_", "SRUN_", "SALLOC_", "PMI_", "PMIX_", "OMPI_")) or (k.startswith("SLURM_") and k != "SLURM_CONF"))}
    env.update(
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
        NUMBA_CACHE_DIR=str(tmp_path_factory.mktemp("numba")),  # not .numba_cache in the repository
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),  # `python` is this one
        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    yield env
    if started:
        subprocess.run(["bash", CLUSTER, "stop"], capture_output=True, text=True, timeout=120)


def _log(path) -> str:
    text = ""
    for f in sorted(path.parent.glob(path.name.replace("%a", "*"))):
        text += f"--- {f.name}\n{f.read_text(errors='replace')[-4000:]}"
    return text or f"(no job output at {path})"


def sbatch(env, log, *args, extra_env=None):
    """``sbatch --wait ARGS`` from the repository root, output into ``log``: the finished
    sbatch process (its return code is the job's exit code) and the job's output."""
    cmd = ["sbatch", "--wait", "--time=5", f"--chdir={REPO}", f"--output={log}", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env={**env, **(extra_env or {})})
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        job = re.search(r"Submitted batch job (\d+)", out)
        if job:
            subprocess.run(["scancel", job.group(1)], capture_output=True, timeout=30)
        pytest.fail(f"{' '.join(cmd)}: not done in {TIMEOUT} s (cancelled)\n{_log(log)}")
    return proc, f"$ {' '.join(cmd)}\nexit {proc.returncode}\n{proc.stderr}{_log(log)}"


def _finished(path, world_size, why):
    from fdahpc.metrics import read_run_file

    assert path.is_file(), f"no run file {path}\n{why}"
    attrs, s = read_run_file(str(path), ("eval/step", "eval/accuracy"))
    assert attrs["status"] == "finished", why
    assert int(attrs["world_size"]) == world_size, why
    assert len(s["eval/step"]) >= 2 and s["eval/step"][-1] == 40, why
    return attrs


def test_cluster_start_is_idempotent(slurm_env):
    proc = subprocess.run(["bash", CLUSTER, "start"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "already running" in proc.stdout, proc.stdout + proc.stderr
    sinfo = subprocess.run(["sinfo", "-h", "-o", "%T %c"], capture_output=True, text=True, timeout=30)
    assert re.match(r"(idle|mixed|allocated|completing)\b", sinfo.stdout), sinfo.stdout + sinfo.stderr


def test_mpi_cpu_job_on_two_ranks(slurm_env, tmp_path):
    out, log = tmp_path / "cpu.h5", tmp_path / "cpu.out"
    # -n2 and --ntasks-per-node=2 win over the script's 2 nodes x 22 tasks.
    proc, why = sbatch(slurm_env, log, "-N1", "-n2", "--ntasks-per-node=2", "jobs/mpi_cpu.sbatch",
                       extra_env={"FDAHPC_ARGS": f"{TINY} --out {out}"})
    assert proc.returncode == 0, why
    attrs = _finished(out, 2, why)
    assert json.loads(attrs["config"])["dataset"] == "mnist5k", why  # FDAHPC_ARGS won over the script's flags


def test_failing_job_returns_its_exit_code(slurm_env, tmp_path):
    out, log = tmp_path / "bad.h5", tmp_path / "bad.out"
    proc, why = sbatch(slurm_env, log, "-N1", "-n2", "--ntasks-per-node=2", "jobs/mpi_cpu.sbatch",
                       extra_env={"FDAHPC_ARGS": f"{TINY} --max-steps 0 --out {out}"})
    assert proc.returncode == 2, why  # fdahpc.train's bad-input exit code, through srun and sbatch
    assert "--max-steps" in log.read_text(), why
    assert not out.exists()


def test_sweep_array(slurm_env, tmp_path):
    sweep, log = tmp_path / "sweep", tmp_path / "sweep-%a.out"
    grid = {"THETAS": "1 4", "WORKERS": "1 2", "STRATEGIES": "linearfda", "OUT_DIR": str(sweep),
            "FDAHPC_ARGS": TINY.replace("--strategy linearfda ", "")}
    # 1 strategy x 2 thetas x 2 K = 4 array tasks, each allocation sized for the largest K.
    proc, why = sbatch(slurm_env, log, "--array=0-3", "-N1", "-n2", "jobs/sweep.sbatch", extra_env=grid)
    assert proc.returncode == 0, why
    files = []
    for k in (1, 2):
        for theta in ("1", "4"):
            path = sweep / f"linearfda-theta{theta}-K{k}.h5"
            attrs = _finished(path, k, why)
            assert json.loads(attrs["config"])["theta"] == float(theta), why
            files.append(str(path))
    summary = run_python(["-m", "fdahpc.summary", *sorted(map(str, sweep.glob("*.h5")))], timeout=120)
    assert summary.returncode == 0, summary.stderr
    lines = summary.stdout.strip().splitlines()
    assert len(lines) == 5 and all(f in summary.stdout for f in files), summary.stdout
    assert all(line.startswith("finished") for line in lines[1:]), summary.stdout


def test_array_task_outside_the_grid_fails(slurm_env, tmp_path):
    log = tmp_path / "grid-%a.out"
    proc, why = sbatch(slurm_env, log, "--array=2", "-N1", "-n1", "jobs/sweep.sbatch",
                       extra_env={"THETAS": "1", "WORKERS": "1 2", "STRATEGIES": "linearfda", "OUT_DIR": str(tmp_path / "s")})
    assert proc.returncode == 2, why
    assert "use --array=0-1" in why


def test_preemptible_script_runs_short(slurm_env, tmp_path):
    out, log = tmp_path / "long.h5", tmp_path / "long.out"
    proc, why = sbatch(slurm_env, log, "-N1", "-n2", "--ntasks-per-node=2", "jobs/preemptible.sbatch",
                       extra_env={"CKPT": str(tmp_path / "ck"), "FDAHPC_ARGS": f"{TINY} --out {out}"})
    assert proc.returncode == 0, why
    _finished(out, 2, why)
    assert any((tmp_path / "ck").glob("ckpt-*")), why  # the final checkpoint


def test_semiasync_script_runs_short(slurm_env, tmp_path):
    out, log = tmp_path / "sa.h5", tmp_path / "sa.out"
    args = f"--dataset mnist5k --model lenet5 --partition iid --clients 4 --buffer 2 --rounds 6 " \
           f"--checkpoint-dir {tmp_path / 'ck'} --out {out}"
    proc, why = sbatch(slurm_env, log, "-n3", "jobs/semiasync.sbatch", extra_env={"FDAHPC_ARGS": args})
    assert proc.returncode == 0, why
    from fdahpc.metrics import read_run_file

    attrs, s = read_run_file(str(out), ("round/version",))
    assert attrs["status"] == "finished" and int(attrs["world_size"]) == 3, why
    assert list(s["round/version"]) == [1, 2, 3, 4, 5, 6], why


def _has_torch_backend() -> bool:
    from fdahpc.comm import BACKENDS

    return "torch" in BACKENDS


@pytest.mark.skipif(not _has_torch_backend(), reason="fdahpc.train has no --backend torch yet")
@pytest.mark.parametrize("script", ["gpu_node.sbatch", "gpu_nodes.sbatch"])
def test_gpu_scripts_with_torch_backend_on_cpu(slurm_env, tmp_path, script):
    """The GPU job scripts as they are (srun --mpi=none, --backend torch), on the CPU: no
    GPUs (--gres=none), 2 tasks on the one node, gloo instead of NCCL."""
    out, log = tmp_path / "torch.h5", tmp_path / "torch.out"
    proc, why = sbatch(slurm_env, log, "--gres=none", "-N1", "-n2", "--ntasks-per-node=2", "--cpus-per-task=1",
                       f"jobs/{script}", extra_env={"FDAHPC_ARGS": f"{TINY} --device cpu --out {out}"})
    assert proc.returncode == 0, why
    attrs = _finished(out, 2, why)
    assert json.loads(attrs["config"])["backend"] == "torch", why


@pytest.mark.parametrize("script", ["mpi_cpu.sbatch", "preemptible.sbatch", "gpu_node.sbatch", "gpu_nodes.sbatch"])
def test_scripts_are_method_neutral(tmp_path, script):
    """Without SLURM: each script run by bash with an ``srun`` that prints what it was given.
    By default the method is tuning-free FDA; a --strategy in FDAHPC_ARGS brings its own options
    and none of the default's (``--strategy diloco --tau 50`` is not refused for a --theta)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("srun", "scontrol", "nvidia-smi"):
        (fake / tool).write_text('#!/bin/sh\necho "$0 $*"\n')
        (fake / tool).chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path), "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1",
           "SLURM_NTASKS": "2", "SLURM_CPUS_PER_TASK": "1", "SLURM_GPUS_ON_NODE": "1", "SLURM_JOB_NUM_NODES": "1"}

    def flags(args: str) -> str:
        proc = subprocess.run(["bash", os.path.join(REPO, "jobs", script)], cwd=tmp_path, text=True,
                              capture_output=True, env=dict(env, FDAHPC_ARGS=args), timeout=60)
        line = next((x for x in proc.stdout.splitlines() if "fdahpc.train" in x), None)
        assert line is not None, proc.stdout + proc.stderr
        return line

    default = flags("--dataset mnist5k")
    assert "--strategy linearfda --theta auto --theta-fabric measure" in default
    chosen = flags("--strategy diloco --tau 50")
    assert "--theta" not in chosen and chosen.endswith("--strategy diloco --tau 50")
