"""The own-training-loop API: the README's example as written, under mpiexec, and the
averager against the trainer's own loop."""

import re
import shutil

import pytest
import torch
from torch import nn

from conftest import REPO, run_python
from fdahpc import ModelAverager
from fdahpc.comm import LocalCommunicator


def _readme_example() -> str:
    with open(f"{REPO}/README.md") as fh:
        text = fh.read()
    m = re.search(r"## Your own training loop.*?```python\n(.*?)```", text, re.S)
    assert m, "README: the 'Your own training loop' section lost its python block"
    return m.group(1)


@pytest.mark.slow
def test_readme_example_runs_as_written_on_two_ranks(tmp_path):
    if shutil.which("mpiexec") is None:
        pytest.skip("mpiexec not found: pip install 'fdahpc[mpich]'")
    script = tmp_path / "loop.py"
    script.write_text(_readme_example())
    proc = run_python([str(script)], ranks=2, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.fullmatch(r"(\d+) syncs in 200 steps, (\d+) bytes, accuracy ([\d.]+)\n", proc.stdout)
    assert m, proc.stdout
    syncs, nbytes, accuracy = int(m.group(1)), int(m.group(2)), float(m.group(3))
    dim = 20 * 64 + 64 + 64 * 2 + 2
    assert 0 < syncs < 200 and nbytes == syncs * 4 * dim * 2 * 2 + 200 * 8 * 2  # the paper's formula, K = 2
    assert accuracy > 0.8


def test_averager_equals_the_synchronizer_it_builds():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    avg = ModelAverager(model, LocalCommunicator(), "fedavg", tau=3)
    assert avg.flat.is_flat() and [avg.step() for _ in range(7)] == [False, False, True, False, False, True, False]
    assert (avg.steps, avg.syncs) == (7, 2) and avg.comm_bytes == 2 * 4 * 15 * 2
    assert set(avg.state_dict()) >= {"steps", "syncs", "trigger", "rule"}


@pytest.mark.parametrize("kwargs,needle", [
    (dict(strategy="fedavg"), "give tau=STEPS"),
    (dict(strategy="fedsgd"), "strategy 'fedsgd': unknown"),
    (dict(strategy="linearfda", thetta=1.0), "option 'thetta': unknown"),
    (dict(strategy="linearfda", theta=-1.0), "--theta -1.0: must be >= 0"),
    (dict(strategy="sketchfda", theta="auto"), "theta auto: its round is counted in epochs and needs the epoch length"),
])
def test_averager_refuses_bad_options_in_one_line(kwargs, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        ModelAverager(nn.Linear(2, 2), LocalCommunicator(), **kwargs)
