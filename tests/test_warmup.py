"""--warmup-steps (post-local SGD): every step synchronizes during the warm-up, then the
trigger decides from the warm-up's end. Against a hand computation (rank-dependent drifts,
in one process and under mpiexec) and against torch's PeriodicModelAverager on the same
run over gloo."""

import shutil

import numpy as np
import pytest
import torch

from conftest import run_python
from fdahpc.comm import LocalCommunicator
from fdahpc.config import TrainConfig
from fdahpc.run import resolve
from fdahpc.strategies import build_strategy, strategy_options

D = 4


def drive(comm, strategy, steps, **options):
    """Each step rank k's model moves by k+1 in every coordinate; the steps that synchronized
    and the final model."""
    w = torch.zeros(D)
    strat = build_strategy(strategy_options(strategy, options.pop("trigger", None), options), comm, w, steps_per_epoch=3, num_samples=10)
    strat.reset()
    synced = []
    for t in range(1, steps + 1):
        w.add_(float(comm.rank + 1))
        if strat.after_step():
            synced.append(t)
    return synced, w, strat


@pytest.mark.distributed
def test_warmup_then_periodic_rounds_match_a_hand_computation(comm):
    """τ = 3, W = 4, 12 steps: syncs at 1, 2, 3, 4 (warm-up), then 7 and 10 (rounds counted
    from step 4). Each step the mean moves by (K+1)/2, so after the sync at 10 rank k holds
    10·(K+1)/2 + 2·(k+1)."""
    k = comm.world_size
    synced, w, _ = drive(comm, "fedavg", 12, tau=3, warmup_steps=4)
    assert synced == [1, 2, 3, 4, 7, 10]
    np.testing.assert_allclose(w.numpy(), 10 * (k + 1) / 2 + 2 * (comm.rank + 1))
    # Without a warm-up the same trigger syncs at 3, 6, 9, 12.
    assert drive(comm, "fedavg", 12, tau=3)[0] == [3, 6, 9, 12]


@pytest.mark.distributed
def test_warmup_drives_every_trigger_and_rule(comm):
    # A Θ no drift reaches: only the warm-up synchronizes.
    assert drive(comm, "linearfda", 9, theta=1e9, warmup_steps=3)[0] == [1, 2, 3]
    assert drive(comm, "sketchfda", 9, theta=1e9, warmup_steps=3, sketch_cols=20)[0] == [1, 2, 3]
    # --theta auto-once: the calibration round (1 epoch = 3 steps here) starts after the warm-up.
    synced, _, strat = drive(comm, "linearfda", 8, theta="auto-once", warmup_steps=4)
    assert synced[:5] == [1, 2, 3, 4, 7]
    assert not strat.trigger.calibrating
    # --theta auto: warm-up syncs restart the round without re-calibrating (Θ stays the prior 4e-5·d).
    synced, _, strat = drive(comm, "linearfda", 4, theta="auto", warmup_steps=4)
    assert synced == [1, 2, 3, 4] and strat.trigger.theta == pytest.approx(4e-5 * D) and strat.trigger.round_start == 0
    # DiLoCo's outer step during the warm-up too: W = all steps is Synchronous under DiLoCo.
    synced, w, strat = drive(comm, "diloco", 5, tau=100, warmup_steps=5)
    assert synced == [1, 2, 3, 4, 5] and strat.rule.optimizer.step_count == 5
    got = comm.allgather(w.numpy(), "control")
    assert all(np.array_equal(g, got[0]) for g in got)


def test_warmup_refusals_and_averager():
    from fdahpc import ModelAverager

    with pytest.raises(ValueError, match="--warmup-steps -1: must be an integer >= 0"):
        resolve(TrainConfig(strategy="fedavg", warmup_steps=-1))
    with pytest.raises(ValueError, match="--warmup-steps: only used with --mode sync; add --mode sync or drop --warmup-steps"):
        resolve(TrainConfig(mode="semiasync", warmup_steps=3))
    avg = ModelAverager(torch.nn.Linear(3, 1), LocalCommunicator(), "fedavg", tau=5, warmup_steps=2)
    assert [avg.step() for _ in range(7)] == [True, True, False, False, False, False, True]


def test_warmup_beyond_the_run_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "run.h5"
    proc = run_python(["-m", "fdahpc.train", "--strategy", "fedavg", "--warmup-steps", "50", "--max-steps", "20",
                       "--out", str(out)], timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "fdahpc.train: error: --warmup-steps 50: beyond the run's 20 steps; give at most 20 or lengthen the run "
        "(--epochs, --max-steps)"]
    assert not out.exists()


def _torch_group_or_skip(comm):
    import torch.distributed as dist

    if comm.world_size < 2 or not dist.is_available() or not dist.is_initialized():
        pytest.skip("needs torch.distributed with 2 ranks: FDAHPC_TEST_BACKEND=torch mpiexec -n 2 ... --with-mpi")


def _batch(rank, t):
    g = torch.Generator().manual_seed(1000 * rank + t)
    return torch.randn(8, 5, generator=g), torch.randn(8, 3, generator=g)


@pytest.mark.distributed
@pytest.mark.parametrize("warmup,period", [(4, 3), (1, 5), (6, 2)])
def test_warmup_matches_torch_periodic_model_averager(comm, warmup, period):
    """The same run twice, plain SGD on rank-dependent batches: fdahpc's --warmup-steps W with
    rounds of τ, and torch's post-local SGD: DDP's gradient average during its warm-up, then
    ``PeriodicModelAverager(period=τ, warmup_steps=W-1)``. Torch's averager counts its calls
    from 0 and averages first at its warm-up's end, i.e. right after step W (models equal
    before it: step W is the last averaged step of both); its W-1 is fdahpc's W."""
    import torch.distributed as dist
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

    from fdahpc import ModelAverager

    _torch_group_or_skip(comm)
    torch.manual_seed(0)
    ours, theirs = torch.nn.Linear(5, 3), torch.nn.Linear(5, 3)
    theirs.load_state_dict(ours.state_dict())
    avg = ModelAverager(ours, comm, "fedavg", tau=period, warmup_steps=warmup)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.05)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.05)
    reference = PeriodicModelAverager(period=period, warmup_steps=warmup - 1)
    apart = 0
    for t in range(1, 20):
        x, y = _batch(comm.rank, t)
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
        if t <= warmup - 1:  # what DDP does during post-local SGD's warm-up
            for p in theirs.parameters():
                dist.all_reduce(p.grad)
                p.grad /= comm.world_size
        opt_ours.step()
        opt_theirs.step()
        avg.step()
        reference.average_parameters(theirs.parameters())
        for a, b in zip(ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6)
        got = comm.allgather(avg.flat.w.detach().numpy().copy(), "control")
        apart += not np.array_equal(got[0], got[1])
    # The ranks' models did drift apart between rounds (a test that could fail).
    assert avg.syncs == warmup + (19 - warmup) // period
    assert apart == 19 - avg.syncs


@pytest.mark.slow
def test_warmup_against_torch_over_gloo():
    """The test above needs torch.distributed: rerun under mpiexec -n 2 on the torch backend (gloo)."""
    if shutil.which("mpiexec") is None:
        pytest.skip("mpiexec not found: pip install 'fdahpc[mpich]'")
    proc = run_python(["-m", "pytest", "-q", "--with-mpi", "-p", "no:cacheprovider", "tests/test_warmup.py", "-k",
                       "torch_periodic"], ranks=2, timeout=300, env_extra={"FDAHPC_TEST_BACKEND": "torch"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout and "skipped" not in proc.stdout
