"""fdahpc.compare: the same run twice is bit-identical, on the portable kernels it lands
within the tolerance, and a 1 % learning-rate change is called different."""

import pytest

from conftest import train_cli
from fdahpc.compare import compare, main

pytestmark = pytest.mark.slow

TRAIN = ["--max-steps", "30", "--eval-every", "10", "--log-every", "1000", "--strategy", "linearfda",
         "--theta", "0.4"]


def _train(path, *extra):
    """One run through ``fdahpc.train.main`` in this process."""
    from fdahpc.train import main as train

    assert train([*TRAIN, *extra, "--out", str(path)]) == 0
    return str(path)


def test_compare_tells_identical_within_and_different(tmp_path, capsys):
    a, b = _train(tmp_path / "a.h5"), _train(tmp_path / "b.h5")
    # The portable kernels are chosen when torch starts: a process of its own.
    res = train_cli(tmp_path / "portable.h5", *TRAIN, env={"ATEN_CPU_CAPABILITY": "default"})
    assert res.returncode == 0, res.stderr[-2000:]
    portable = str(tmp_path / "portable.h5")
    faster = _train(tmp_path / "lr.h5", "--lr", "0.00101")
    capsys.readouterr()

    verdict, lines = compare(a, b)
    assert verdict == "identical" and "final/model: bit-identical" in lines and "kernels: the same" in lines
    verdict, lines = compare(a, portable)
    assert verdict in ("within", "identical"), lines  # identical only where the CPU has no wider kernels
    assert verdict == "identical" or any("torch_cpu_capability" in line for line in lines)
    assert main([a, faster]) == 1
    assert capsys.readouterr().out.strip().endswith("different")
    assert main([a, str(tmp_path / "missing.h5")]) == 2
