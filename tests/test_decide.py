"""The loops' end-of-step and end-of-round decisions, without training (fdahpc.decide)."""

from fdahpc.decide import reached, round_plan, step_plan


def _steps(total=25, **kw):
    args = dict(total=total, steps_per_epoch=10, eval_every=None, check_every=10, checkpoint_every=None,
                checkpointing=False)
    args.update(kw)
    return {s: step_plan(s, **args) for s in range(1, total + 1)}


def test_sync_evaluates_at_epoch_ends_every_n_steps_and_at_the_end_once():
    plans = _steps(eval_every=4)
    assert [s for s, p in plans.items() if p.evaluate] == [4, 8, 10, 12, 16, 20, 24]
    assert [s for s, p in plans.items() if p.evaluate_last] == [25]  # not a scheduled one
    assert not any(p.evaluate_last for p in _steps(total=20).values())  # step 20 ends an epoch: scored once


def test_sync_agrees_every_check_and_at_the_end():
    assert [s for s, p in _steps(check_every=7).items() if p.check] == [7, 14, 21, 25]


def test_sync_checkpoints_on_schedule_and_at_the_end_only_with_a_folder():
    assert [s for s, p in _steps(checkpoint_every=10, checkpointing=True).items() if p.checkpoint] == [10, 20, 25]
    assert [s for s, p in _steps(checkpointing=False).items() if p.checkpoint] == []
    assert [s for s, p in _steps(checkpointing=True).items() if p.checkpoint] == [25]


def test_rounds_score_every_n_and_the_last_and_checkpoint_only_with_a_folder():
    plans = {v: round_plan(v, rounds=7, eval_every=3, checkpoint_every=2, checkpointing=True) for v in range(1, 8)}
    assert [v for v, p in plans.items() if p.evaluate] == [3, 6, 7]
    assert [v for v, p in plans.items() if p.checkpoint] == [2, 4, 6, 7]
    assert not any(round_plan(v, rounds=7, eval_every=3, checkpoint_every=2, checkpointing=False).checkpoint
                   for v in range(1, 8))


def test_targets_both_must_hold_and_none_never_does():
    assert reached(0.9, None, 0.91, 5.0) and not reached(0.9, None, 0.89, 0.1)
    assert reached(None, 1.5, 0.0, 1.5) and not reached(None, 1.5, 1.0, 1.6)
    assert not reached(0.9, 1.5, 0.95, 1.6) and reached(0.9, 1.5, 0.95, 1.4)
    assert not reached(None, None, 1.0, 0.0)
    assert not reached(0.5, None, float("nan"), float("nan"))  # an unscored round reaches nothing
