"""Resume honesty: every option either belongs to the checkpoint's identity (a changed value
is refused, naming its flag) or takes effect on ``--resume`` and is recorded in the run file.
No option is silently ignored."""

import json
import logging

import h5py
import numpy as np
import pytest

from conftest import run_python
from fdahpc import checkpoint
from fdahpc.config import OPTION_FIELDS, RESUMABLE, TrainConfig
from fdahpc.provenance import segments_of
from fdahpc.run import mode_of, resolve
from fdahpc.run import MODES

#: A valid value other than the default for every option (the test fails for an option
#: missing here, so a new option must be classified and tried).
CHANGED = dict(
    mode=None,  # the other mode, per case
    strategy="fedavg", trigger="linear", model="mlr", dataset="synthetic", data_dir="/data", partition="dirichlet:0.5",
    context=32, gpt_layers=2, gpt_heads=2, gpt_width=32,
    batch_size=16, optimizer="sgd", lr=0.05, weight_decay=1e-4, epochs=2.0, max_steps=100, target_accuracy=0.9,
    target_loss=1.5, eval_samples=100, train_samples=1000,
    eval_every=7, seed=1, drop_last=True, clip_grad_norm=5.0, theta=4.0, theta_auto_epochs=2.0, fda_lag=1, tau=5,
    local_epochs=2.0, warmup_steps=3, lr_schedule="linear", lr_warmup_steps=4, lr_floor=0.1, qsr_h_base=3,
    qsr_alpha=0.05, fda_every=2, theta_round_epochs=2.0, theta_fabric="1,10,5",
    theta_calibrate="estimate",
    sketch_rows=3, sketch_cols=100, sketch_eps=0.05, log_variance=True, fda_log_every=2, server_lr=0.5,
    server_momentum=0.5, server_betas=(0.8, 0.99), server_tau=1e-3, server_bias_correction=True, weighting="samples",
    clients_per_round=1, fedadp_alpha=3.0, fedadp_angles="sketch", clients=50, buffer=5, rounds=10, speed_ratio=10,
    clock="ticks", scenario="fluctuate:10", aggregate="hosts", model_cache_gb=0.5, spill_dir="/scratch", fedqs_a=0.01, fedqs_m0=0.2, fedqs_k=0.3, fedqs_lr_min=0.002, fedqs_lr_max=0.3,
    fedqs_variant="authors", fedqs_similarity="euclidean", fedqs_feedback="authors", fedqs_authors_momentum=True,
    fedqs_sketch_similarity=True, fedqs_no_momentum=True, fedqs_no_feedback=True, out="other.h5", checkpoint_dir="elsewhere", checkpoint_every=5,
    resume="auto", stop_check_every=3, backend="mpi", device="cpu", comm_timeout=60.0, threads=2, log_every=5,
)


def test_every_option_is_tried():
    assert set(CHANGED) == {f.name for f in OPTION_FIELDS}


#: The character models' shape options, read only by a run of one (tried on such a run).
TEXT_MODEL_OPTIONS = {"context", "gpt_layers", "gpt_heads", "gpt_width"}
TEXT_RUN = dict(model="gpt", dataset="shakespeare")
#: Options that are read only beside another's value (tried on a run that has it).
REQUIRES = dict(theta_auto_epochs=dict(theta="auto-once"), theta_round_epochs=dict(theta="auto"),
                theta_fabric=dict(theta="auto"), theta_calibrate=dict(theta="auto"),
                lr_floor=dict(lr_schedule="cosine"), qsr_h_base=dict(trigger="qsr", lr_schedule="cosine"),
                qsr_alpha=dict(trigger="qsr", lr_schedule="cosine"), fedqs_authors_momentum=dict(fedqs_variant="authors"))


def _resume_check(mode: str, name: str):
    """(refused?, message, changed options) when a checkpoint of the mode's default run, or of
    the first of its strategies that reads ``name``, is resumed with ``name`` changed; None
    when no strategy of the mode can be given the option (it refuses it outright)."""
    base = dict(mode=mode, checkpoint_dir="ck", **(TEXT_RUN if name in TEXT_MODEL_OPTIONS else {}), **REQUIRES.get(name, {}))
    value = next(m for m in MODES if m != mode) if name == "mode" else CHANGED[name]
    for strategy in (None, *mode_of(mode).strategies()):
        base_s = base if strategy is None or name == "strategy" else dict(base, strategy=strategy)
        try:
            new = resolve(TrainConfig(**{**base_s, name: value})).cfg
            break
        except ValueError:
            continue
    else:
        return None  # this mode cannot be given the option at all, so it cannot ignore it
    old = resolve(TrainConfig(**base_s)).cfg
    manifest = dict(checkpoint.identity(old, 2, 1000), config=json.loads(old.to_json()), position=10)
    try:
        checkpoint.check_identity(manifest, checkpoint.identity(new, 2, 1000), "ck")
    except checkpoint.CheckpointError as exc:
        return True, str(exc), {}
    return False, "", checkpoint.changed_options(new, checkpoint.Resumed("ck", manifest, {}))


@pytest.mark.parametrize("mode", MODES)
def test_each_option_is_identity_or_takes_effect(mode):
    tried = 0
    for f in OPTION_FIELDS:
        outcome = _resume_check(mode, f.name)
        if outcome is None:
            continue
        tried += 1
        refused, message, changed = outcome
        flag = "--" + f.name.replace("_", "-")
        if f.name in RESUMABLE:
            assert not refused, f"{flag} is resumable but refused: {message}"
            assert f.name == "resume" or f.name in changed, f"{flag} changed on resume but not recorded"
        else:
            assert refused and f"{flag} " in message and message.count("\n") == 0, f"{flag} changed silently: {message}"
    assert tried > 30


def test_every_option_is_given_in_some_mode():
    usable = {f.name for f in OPTION_FIELDS if any(_resume_check(m, f.name) is not None for m in MODES)}
    assert usable == {f.name for f in OPTION_FIELDS}  # --clock ticks included: it checkpoints too


BASE = ["--strategy", "linearfda", "--theta", "1", "--batch-size", "16", "--log-every", "1000"]


def test_a_changed_theta_is_refused_and_a_changed_schedule_takes_effect(tmp_path, capsys, caplog):
    """Through ``fdahpc.train.main`` in this process (one rank), as the command line runs it."""
    from fdahpc.train import main

    ck, out = str(tmp_path / "ck"), str(tmp_path / "run.h5")
    assert main([*BASE, "--max-steps", "10", "--eval-every", "5", "--checkpoint-dir", ck, "--out", out]) == 0
    capsys.readouterr()
    assert main([*BASE, "--theta", "4", "--max-steps", "20", "--checkpoint-dir", ck, "--resume", "auto"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--theta 1.0 (this run: 4.0)" in err, err
    with caplog.at_level(logging.INFO, logger="fdahpc"):
        assert main([*BASE, "--max-steps", "20", "--eval-every", "4", "--checkpoint-dir", ck, "--resume", "auto"]) == 0
    assert "--eval-every now 4 (was 5)" in caplog.text and "--max-steps now 20 (was 10)" in caplog.text
    with h5py.File(out, "r") as h5:
        assert h5["eval/step"][()].tolist() == [5, 10, 12, 16, 20]  # the new schedule, from the checkpoint on
        assert json.loads(h5.attrs["config"])["eval_every"] == 4 and h5.attrs["mode"] == "sync"
        last = segments_of(dict(h5.attrs))[-1]
    assert last["started_at"] == 10 and last["options_changed"]["eval_every"] == [5, 4]


def test_semiasync_resume_refuses_a_new_buffer_and_runs_more_rounds(tmp_path):
    ck, out = str(tmp_path / "ck"), str(tmp_path / "run.h5")
    base = ["-m", "fdahpc.train", "--mode", "semiasync", "--clients", "4", "--buffer", "2", "--tau", "2",
            "--checkpoint-dir", ck, "--log-every", "1000"]
    first = run_python([*base, "--rounds", "3", "--out", out], ranks=2)
    assert first.returncode == 0, first.stderr[-2000:]
    refused = run_python([*base, "--buffer", "3", "--rounds", "5", "--resume", "auto"], ranks=2)  # the last --buffer wins
    assert refused.returncode == 2 and "--buffer 2 (this run: 3)" in refused.stderr, refused.stderr
    more = run_python([*base, "--rounds", "5", "--resume", "auto"], ranks=2)
    assert more.returncode == 0, more.stderr[-2000:]
    with h5py.File(out, "r") as h5:
        assert h5.attrs["rounds_done"] == 5 and h5.attrs["mode"] == "semiasync"
        assert np.array_equal(h5["round/version"][()], np.arange(1, 6))
        assert segments_of(dict(h5.attrs))[-1]["options_changed"]["rounds"] == [3, 5]
