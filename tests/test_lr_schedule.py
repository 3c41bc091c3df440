"""Learning-rate schedules (``--lr-schedule``, ``--lr-warmup-steps``, ``--lr-floor``) and the
QSR trigger that reads them: factors against ``torch.optim.lr_scheduler`` step by step, the
rate each training step used (the run file's ``eval/lr``), QSR's periods against its
formula, an exact resume mid-schedule, the ModelAverager, and the refusals."""

import math
import shutil

import h5py
import numpy as np
import pytest
import torch

from conftest import train_cli, train_inprocess
from fdahpc.lr_schedule import LRSchedule
from fdahpc.strategies.qsr import QSRTrigger, paper_constants


def _torch_rates(make, steps: int, peak: float = 0.5) -> list[float]:
    """The rate torch's scheduler gives each of ``steps`` optimizer steps (read before the step)."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    sched = make(opt)
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


@pytest.mark.parametrize("kind", ["cosine", "linear"])
@pytest.mark.parametrize("floor", [0.0, 0.1])
def test_factors_match_torch_schedulers_step_by_step(kind, floor):
    peak, warmup, total = 0.5, 7, 40
    s = LRSchedule(kind, warmup, floor, total)
    ours = [peak * s.factor(i) for i in range(total)]
    warm = _torch_rates(lambda o: torch.optim.lr_scheduler.LinearLR(o, 1 / warmup, 1.0, total_iters=warmup - 1), warmup)
    if kind == "cosine":
        decay = _torch_rates(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, total - warmup, floor * peak),
                             total - warmup)
    else:
        decay = _torch_rates(lambda o: torch.optim.lr_scheduler.LinearLR(o, 1.0, floor, total_iters=total - warmup),
                             total - warmup)
    np.testing.assert_allclose(ours, warm + decay, rtol=1e-9, atol=1e-12)
    assert ours[warmup - 1] == peak and min(ours) >= floor * peak


def test_constant_schedule_and_its_warm_up():
    s = LRSchedule("constant", 4, 0.0, 10)
    assert [s.factor(i) for i in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert not s.decays and s.changes and not LRSchedule().changes


def test_each_step_trains_at_the_scheduled_rate(tmp_path):
    """The run file's eval/lr is the rate of the evaluated step; the optimizer's own groups
    (read inside the loop through the strategy's QSR view) agree."""
    out = tmp_path / "cos.h5"
    proc = train_cli(out, "--strategy", "fedavg", "--tau", "5", "--lr", "0.002", "--lr-schedule", "cosine",
                     "--lr-warmup-steps", "10", "--lr-floor", "0.1", "--max-steps", "60", "--eval-every", "5",
                     "--dataset", "mnist5k", "--batch-size", "16", "--log-every", "1000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = LRSchedule("cosine", 10, 0.1, 60)
    with h5py.File(out) as f:
        steps, lrs = f["eval/step"][:], f["eval/lr"][:]
    np.testing.assert_allclose(lrs, [0.002 * s.factor(int(t) - 1) for t in steps], rtol=1e-12)
    assert lrs[-1] == pytest.approx(0.002 * (0.1 + 0.9 * (1 + math.cos(math.pi * 49 / 50)) / 2))


def _qsr_syncs(h_base, alpha, lr_at, warmup_end, steps):
    t = QSRTrigger(h_base, alpha, lr_at, warmup_end)
    return [s for s in range(1, steps + 1) if t.should_sync(s, None, None)]


def test_qsr_period_follows_its_formula():
    """Each round lasts max(H_base, ⌊(α/η)²⌋) with η the rate of its first step; H_base
    inside the learning-rate warm-up."""
    s = LRSchedule("cosine", 20, 0.05, 2000)
    lr_at = lambda step: 0.01 * s.factor(step - 1)  # noqa: E731
    syncs = _qsr_syncs(2, 0.03, lr_at, 20, 2000)
    start, expected = 1, []
    while True:
        h = 2 if start <= 20 else max(2, math.floor((0.03 / lr_at(start)) ** 2))
        if start + h - 1 > 2000:
            break
        expected.append(start + h - 1)
        start += h
    assert syncs == expected
    rounds = np.diff([0] + syncs)
    assert rounds[0] == 2 and rounds[-1] > 10 * rounds[15]  # rounds lengthen as the rate falls
    assert paper_constants("adamw") == (4, 0.0175) and paper_constants("momentum") == (2, 0.2)


def test_qsr_run_syncs_where_the_formula_says(tmp_path):
    out = tmp_path / "qsr.h5"
    proc = train_cli(out, "--strategy", "qsr", "--lr-schedule", "linear", "--lr-floor", "0.1", "--qsr-alpha", "0.006",
                     "--warmup-steps", "3", "--max-steps", "120", "--dataset", "mnist5k", "--batch-size", "16",
                     "--log-every", "1000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = LRSchedule("linear", 0, 0.1, 120)
    # The sync warm-up (--warmup-steps 3) averages steps 1-3; QSR counts its rounds from there.
    expected = [1, 2, 3] + [3 + t for t in _qsr_syncs(4, 0.006, lambda t: 1e-3 * s.factor(t + 3 - 1), -3, 117)]
    with h5py.File(out) as f:
        assert f["sync/step"][:].tolist() == expected + ([120] if expected[-1] != 120 else [])
        assert f.attrs["final_sync"] == int(expected[-1] != 120)


@pytest.mark.slow
@pytest.mark.distributed
def test_resume_mid_schedule_is_bit_for_bit(comm, tmp_path):
    options = dict(strategy="qsr", lr_schedule="cosine", lr_warmup_steps=5, lr_floor=0.1, qsr_alpha=0.004,
                   eval_every=10)
    ck = comm.bcast_obj(str(tmp_path / "ck"))
    train_inprocess(comm, tmp_path / "straight.h5", max_steps=50, **options)
    # The same run checkpointed at step 25 (and 50); the one at 50 is dropped to resume from 25.
    train_inprocess(comm, tmp_path / "first.h5", max_steps=50, checkpoint_dir=ck, checkpoint_every=25, **options)
    if comm.is_root:
        shutil.rmtree(tmp_path / "ck" / "ckpt-000000050")
    comm.barrier()
    train_inprocess(comm, tmp_path / "again.h5", max_steps=50, checkpoint_dir=ck, resume="auto", **options)
    if comm.is_root:
        with h5py.File(tmp_path / "straight.h5") as a, h5py.File(tmp_path / "again.h5") as b:
            assert np.array_equal(a["final/model"][()], b["final/model"][()])
            for name in ("sync/step", "qsr/h", "eval/lr", "eval/accuracy"):
                assert np.array_equal(a[name][()], b[name][()]), name


def test_resume_with_another_horizon_is_refused(tmp_path):
    ck = tmp_path / "ck"
    base = ["--lr-schedule", "cosine", "--strategy", "fedavg", "--tau", "5", "--dataset", "mnist5k", "--batch-size",
            "16", "--log-every", "1000", "--checkpoint-dir", str(ck)]
    assert train_cli(tmp_path / "a.h5", *base, "--max-steps", "10").returncode == 0
    proc = train_cli(tmp_path / "b.h5", *base, "--max-steps", "20", "--resume", "auto")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr  # refused at setup: one line, nothing written
    assert "the checkpoint's rate decays over 10 steps, this run has 20" in lines[0]
    assert not (tmp_path / "b.h5").exists()


@pytest.mark.parametrize("flags,message", [
    (["--lr-schedule", "step"], "--lr-schedule 'step': unknown; choose one of constant, cosine, linear"),
    (["--lr-floor", "1.5", "--lr-schedule", "cosine"], "--lr-floor 1.5: must be a fraction of --lr in [0, 1]"),
    (["--lr-floor", "0.1"], "--lr-floor 0.1: where --lr-schedule cosine or linear ends"),
    (["--lr-warmup-steps", "-1"], "--lr-warmup-steps -1: must be an integer >= 0"),
    (["--lr-warmup-steps", "50", "--max-steps", "20"], "--lr-warmup-steps 50: longer than the run's 20 steps"),
    (["--strategy", "qsr", "--lr-schedule", "constant"], "--lr-schedule constant: qsr lengthens its rounds as the "
                                                         "learning rate decays"),
    (["--strategy", "fedavg", "--trigger", "qsr"], "--trigger qsr: qsr lengthens its rounds"),
    (["--strategy", "fedavg", "--trigger", "qsr", "--lr-schedule", "cosine", "--lr-floor", "1"],
     "--trigger qsr: qsr lengthens its rounds"),
    (["--strategy", "fedavg", "--qsr-alpha", "0.1"], "--qsr-alpha"),
    (["--strategy", "qsr", "--lr-schedule", "cosine", "--qsr-h-base", "0"], "--qsr-h-base 0: must be an integer >= 1"),
    (["--mode", "semiasync", "--strategy", "fedqs-avg", "--lr-schedule", "cosine"], "--lr-schedule"),
])
def test_bad_schedule_flags_one_line_exit_2(capsys, flags, message):
    from fdahpc.train import main

    assert main(["--dataset", "mnist5k", *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_the_qsr_preset_decays_on_a_cosine_and_the_others_keep_their_rate():
    from fdahpc.config import TrainConfig
    from fdahpc.run import resolve

    assert resolve(TrainConfig(strategy="qsr")).cfg.lr_schedule == "cosine"
    assert resolve(TrainConfig(strategy="fedavg")).cfg.lr_schedule == "constant"
    assert resolve(TrainConfig(strategy="qsr", lr_schedule="linear")).options.lr.lr_schedule == "linear"


def test_model_averager_sets_the_rate_and_qsr_reads_a_users_scheduler():
    from fdahpc import ModelAverager
    from fdahpc.comm import LocalCommunicator

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    avg = ModelAverager(model, LocalCommunicator(), "fedavg", tau=4, optimizer=opt, total_steps=30,
                        lr_schedule="linear", lr_warmup_steps=3, lr_floor=0.2)
    s, seen = LRSchedule("linear", 3, 0.2, 30), []
    for _ in range(30):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        avg.step()
    np.testing.assert_allclose(seen, [0.01 * s.factor(i) for i in range(30)], rtol=1e-12)
    state = avg.state_dict()
    # Resuming: a fresh optimizer at the peak, a new averager (the warm-up's first rate), then the state.
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    again = ModelAverager(model, LocalCommunicator(), "fedavg", tau=4, optimizer=opt, total_steps=30,
                          lr_schedule="linear", lr_warmup_steps=3, lr_floor=0.2)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01 / 3)
    again.load_state_dict(state)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01 * s.factor(30)) == 0.01 * 0.2

    # QSR under the user's own torch scheduler: the period reads the rate when a round starts.
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.1)
    avg = ModelAverager(model, LocalCommunicator(), "fedavg", trigger="qsr", optimizer=opt, qsr_alpha=0.2)
    synced, periods = [], []
    for step in range(1, 61):
        opt.step()
        sched.step()
        if avg.step():
            synced.append(step)
            periods.append((avg.strategy.trigger.h, math.floor((0.2 / opt.param_groups[0]["lr"]) ** 2)))
    # SGD: H_base 2; (0.2/0.1)² = 4 while the rate is 0.1, then (0.2/0.01)² ≈ 400 from step 20
    assert synced == [4, 8, 12, 16, 20]
    assert all(h == expected for h, expected in periods) and periods[-1][0] in (399, 400)  # 0.1·0.1 rounds
    with pytest.raises(ValueError, match="pass optimizer="):
        ModelAverager(torch.nn.Linear(3, 2), LocalCommunicator(), "fedavg", trigger="qsr")


@pytest.mark.slow
def test_semiasync_jobs_train_at_the_rate_of_their_start_version(tmp_path):
    """Full buffer, equal speeds: round t's jobs all start from version t. A constant schedule
    whose one-step warm-up is already over changes nothing bit for bit; a linear decay over
    the rounds changes the model (and FedQS, which sets its clients' rates, refuses it)."""
    common = ["--mode", "semiasync", "--strategy", "fedavg", "--clients", "2", "--buffer", "2", "--rounds", "3",
              "--speed-ratio", "1", "--optimizer", "sgd", "--lr", "0.05", "--tau", "5", "--dataset", "mnist5k",
              "--batch-size", "16", "--log-every", "1000"]
    models = {}
    for name, extra in (("plain", []), ("warm1", ["--lr-warmup-steps", "1"]),
                        ("linear", ["--lr-schedule", "linear"])):
        proc = train_cli(tmp_path / f"{name}.h5", *common, *extra, ranks=2)
        assert proc.returncode == 0, proc.stderr[-2000:]
        with h5py.File(tmp_path / f"{name}.h5") as f:
            models[name] = f["final/model"][()]
            if name == "linear":  # round t aggregates the jobs that started from version t - 1
                np.testing.assert_allclose(f["round/lr_mean"][()], [0.05, 0.05 * 2 / 3, 0.05 / 3], rtol=1e-6)
    assert np.array_equal(models["plain"], models["warm1"])
    assert not np.allclose(models["plain"], models["linear"])
