"""Provenance: every run file and checkpoint says what decided its bits, the summary shows
it, and a resume on other kernels says so in one line."""

import json
import platform

import h5py
import numba
import numpy as np
import pytest
import torch

from conftest import run_python
from fdahpc import provenance
from fdahpc.comm import LocalCommunicator
from fdahpc.summary import main as summary_main
from fdahpc.summary import provenance_of

BASE = ["-m", "fdahpc.train", "--max-steps", "20", "--eval-every", "20", "--log-every", "1000", "--strategy", "fedavg",
        "--tau", "5"]


def test_the_record_holds_this_process_facts():
    record = provenance.gather(LocalCommunicator())
    assert (record["torch"], record["numpy"], record["numba"]) == (torch.__version__, np.__version__, numba.__version__)
    assert record["python"] == platform.python_version() and record["world_size"] == 1
    (group,) = record["ranks"]
    assert group["ranks"] == [0]
    assert group["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert (group["torch_threads"], group["numba_threads"]) == (torch.get_num_threads(), numba.get_num_threads())
    assert group["cpu_model"]


def test_kernel_differences_name_what_changed_and_ignore_hosts():
    a = dict(torch="2.13.0", numpy="2.4.6", numba="0.68.1", world_size=2, device="cpu", slurm_job_id="1",
             ranks=[dict(host="n1", cpu_model="X", torch_cpu_capability="AVX512", torch_threads=1, ranks=[0, 1])])
    moved = dict(a, slurm_job_id="2", ranks=[dict(a["ranks"][0], host="n7")])
    assert provenance.kernel_differences(a, moved) == []
    other = dict(a, numpy="2.5.0", ranks=[dict(a["ranks"][0], torch_cpu_capability="AVX2")])
    assert provenance.kernel_differences(a, other) == ['numpy 2.4.6 -> 2.5.0', 'torch_cpu_capability "AVX512" -> "AVX2"']
    split = dict(a, ranks=[dict(a["ranks"][0], ranks=[0]), dict(a["ranks"][0], cpu_model="Y", ranks=[1])])
    assert provenance.kernel_differences(a, split) == ['cpu_model "X" -> "X"/"Y"']


@pytest.mark.slow
def test_run_files_and_checkpoints_record_it_and_a_resume_on_other_kernels_says_so(tmp_path, capsys):
    out, ck = tmp_path / "run.h5", str(tmp_path / "ck")
    first = run_python([*BASE, "--out", str(out), "--checkpoint-dir", ck], ranks=2, timeout=180,
                       env_extra={"SLURM_JOB_ID": "4242"})
    assert first.returncode == 0, first.stderr[-2000:]
    (segment,) = provenance_of(str(out))
    assert segment["slurm_job_id"] == "4242" and segment["world_size"] == 2 and segment["mpi_library"]
    assert [g["ranks"] for g in segment["ranks"]] == [[0, 1]]  # one machine: one group
    with open(f"{ck}/ckpt-000000020/manifest.json") as f:
        assert json.load(f)["provenance"] == [segment]

    # Same kernels: resumes silently. The portable kernels: one line, and the run goes on.
    same = run_python([*BASE[:2], "--max-steps", "30", *BASE[4:], "--checkpoint-dir", ck, "--resume", "auto"],
                      ranks=2, timeout=180)
    assert same.returncode == 0 and "other kernels" not in same.stdout + same.stderr, same.stderr[-2000:]
    other = run_python([*BASE[:2], "--max-steps", "40", *BASE[4:], "--checkpoint-dir", ck, "--resume", "auto"],
                       ranks=2, timeout=180, env_extra={"ATEN_CPU_CAPABILITY": "default"})
    assert other.returncode == 0, other.stderr[-2000:]
    notes = [line for line in (other.stdout + other.stderr).splitlines() if "other kernels" in line]
    changed = torch.backends.cpu.get_cpu_capability() != "DEFAULT"
    assert len(notes) == (1 if changed else 0), notes
    if changed:
        assert "torch_cpu_capability" in notes[0] and "DEFAULT" in notes[0]
    segments = provenance_of(str(out))
    assert [s["started_at"] for s in segments] == [0, 20, 30]
    assert segments[2]["ranks"][0]["env"]["ATEN_CPU_CAPABILITY"] == "default"
    with h5py.File(out, "r") as h5:
        assert h5.attrs["status"] == "finished" and h5.attrs["steps"] == 40

    assert summary_main(["--provenance", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "[resumed at 30]" in shown and f"torch: {torch.__version__}" in shown and "slurm_job_id: 4242" in shown
    assert "ranks 0-1: host" in shown


@pytest.mark.slow
def test_semiasync_run_files_record_it(tmp_path):
    out = tmp_path / "semi.h5"
    res = run_python(["-m", "fdahpc.train", "--mode", "semiasync", "--strategy", "fedavg", "--clients", "2", "--buffer", "2",
                      "--rounds", "2", "--out", str(out)], ranks=2, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    (segment,) = provenance_of(str(out))
    assert segment["world_size"] == 2 and sum(len(g["ranks"]) for g in segment["ranks"]) == 2


def test_topology_names_each_hosts_ranks_and_local_ranks():
    from fdahpc.provenance import topology

    # two nodes of two ranks, local ranks as a launcher exported them; a third host without any
    places = [("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1), ("n3", None), ("n3", None)]
    assert topology(places) == [dict(host="n1", ranks=[0, 1], local_ranks=[0, 1], local_size=2),
                                dict(host="n2", ranks=[2, 3], local_ranks=[0, 1], local_size=2),
                                dict(host="n3", ranks=[4, 5], local_ranks=[0, 1], local_size=2)]
