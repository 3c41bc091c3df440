"""The virtual clock, the wire format and the convergence measures: pure, one process."""

import numpy as np
import pytest

from fdahpc.semiasync.clock import VirtualClock, parse_scenarios
from fdahpc.semiasync.protocol import Down, DownMessage, Up, UpKind, pack_down, pack_up, unpack_down
from fdahpc.semiasync.server import convergence_metrics


def test_speeds_are_seeded_integers_in_range():
    a, b = VirtualClock(200, 50, seed=3), VirtualClock(200, 50, seed=3)
    assert np.array_equal(a.r, b.r)
    assert a.r.min() >= 1 and a.r.max() <= 50 and len(np.unique(a.r)) > 30
    assert not np.array_equal(a.r, VirtualClock(200, 50, seed=4).r)
    assert np.all(VirtualClock(10, 1, seed=0).r == 1)


def test_events_come_in_time_order_ties_by_client():
    clock = VirtualClock(5, 1, seed=0)  # equal speeds: everything ties
    for c in (3, 1, 4, 0, 2):
        assert clock.start(c, 10) == 11
    assert [clock.pop() for _ in range(5)] == [(11, c) for c in range(5)]
    assert clock.pop() is None
    clock = VirtualClock(50, 50, seed=1)
    for c in range(50):
        clock.start(c, 0)
    order = [clock.pop() for _ in range(50)]
    assert order == sorted((int(clock.r[c]), c) for c in range(50))


def test_fluctuation_moves_each_update_within_bounds():
    clock = VirtualClock(30, 50, seed=2, scenarios=parse_scenarios("fluctuate:10"))
    before = clock.r.copy()
    for c in range(30):
        clock.start(c, 0)  # the first job keeps the drawn speed
    assert np.array_equal(clock.r, before)
    moves = []
    for _ in range(20):
        for c in range(30):
            prev = int(clock.r[c])
            clock.start(c, 0)
            moves.append(int(clock.r[c]) - prev)
            assert 1 <= clock.r[c] <= 50
    assert max(moves) <= 10 and min(moves) >= -10 and len(set(moves)) > 10


def test_shift_rescales_keeping_the_order_and_dropout_removes_a_seeded_fraction():
    clock = VirtualClock(40, 50, seed=5, scenarios=parse_scenarios("shift@3:100,dropout@4:0.5"))
    before = clock.r.copy()
    assert clock.on_round(2) == []
    clock.on_round(3)
    assert clock.ratio == 100 and clock.r.min() >= 1 and clock.r.max() <= 100
    assert np.all(np.diff(clock.r[np.argsort(before, kind="stable")]) >= 0)  # fast clients stay fast
    for c in range(40):
        clock.start(c, 0)
    left = clock.on_round(4)
    assert len(left) == 20 and clock.active.sum() == 20 and not clock.active[left].any()
    popped = [clock.pop() for _ in range(20)]
    assert all(clock.active[c] for _, c in popped) and clock.pop() is None
    again = VirtualClock(40, 50, seed=5, scenarios=parse_scenarios("shift@3:100,dropout@4:0.5"))
    again.on_round(3)
    assert again.on_round(4) == left


@pytest.mark.parametrize("bad", ["shift@200", "shift:100", "fluctuate@3:10", "dropout@10:1.0", "dropout@0:0.5",
                                 "wobble:3", "fluctuate:x", "fluctuate:2,fluctuate:3"])
def test_bad_scenarios_name_the_fix(bad):
    with pytest.raises(ValueError, match="--scenario.*e.g."):
        parse_scenarios(bad)


def test_headers_round_trip():
    msg = DownMessage(Down.MODEL, version=7, now=123.0, f_bar=1.0, s_bar=0.25, clients=(4, 9), speeds=(0.5, 1.5),
                      done_at=(130.0, 140.0))
    buf = np.zeros(64)
    packed = pack_down(msg)
    buf[: len(packed)] = packed
    assert unpack_down(buf, packed.nbytes) == msg
    up = pack_up(UpKind.UPDATE, client=5, version=3, similarity=-0.5, feedback=1.0)
    assert up[Up.KIND] == UpKind.UPDATE and up[Up.CLIENT] == 5 and up[Up.SIMILARITY] == -0.5 and up[Up.TYPE] == -1


def test_convergence_metrics_closed_form():
    acc = np.array([0.1, np.nan, 0.5, 0.8, 0.6, 0.9, 0.9, 0.9])
    m = convergence_metrics(acc, window=3, drop=0.15)
    assert m["convergence_accuracy"] == pytest.approx(0.9)
    assert m["rounds_to_95pct"] == 6  # 1-based round of the first 0.9 (>= 0.855)
    assert m["oscillations"] == 1  # 0.6 after a best of 0.8
