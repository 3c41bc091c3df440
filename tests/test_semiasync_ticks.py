"""``--clock ticks`` (the FedQS authors' simulator): its schedule against a hand trace, its
figures at the paper's setting, and ``--drop-last``'s step counts. Pure, one process."""

import numpy as np
import pytest

from fdahpc.semiasync.ticks import Read, TickClock, tick_statistics
from fdahpc.worker import BatchStream, steps_per_job


def test_five_clients_against_a_hand_trace():
    """r = (1, 1, 2, 2, 2), K = 3, traced by hand from the rules in ticks.py: a job lasts
    r + 1 ticks; an entry reads its client's latest result at aggregation."""
    c = TickClock(5, 2, seed=0, buffer_size=3, speeds=np.array([1, 1, 2, 2, 2]))
    R = Read
    expected = [
        # tick 1: everyone trains on version 0
        ([0, 1, 2, 3, 4], None),
        # tick 2: clients 0 and 1 queue (2 < K)
        ([], None),
        # tick 3: 0 and 1 retrain on v0 (their job 0 is overwritten, never read); 2, 3, 4
        # queue; the first three entries are aggregated: 0 and 1 read their job 1
        ([0, 1], [R(0, 0, 1, 0, 0, 0, 0, False), R(1, 0, 1, 0, 0, 0, 0, False), R(2, 0, 0, 0, 0, 0, 0, False)]),
        # tick 4 (v1): 2, 3, 4 retrain on v1; 0 and 1 queue their job 1; the carried entries
        # of 3 and 4 read job 1 (fresh, stamp 1 stale); 0's job 1 is read a second time
        ([2, 3, 4], [R(3, 0, 1, 0, 1, 0, 1, False), R(4, 0, 1, 0, 1, 0, 1, False), R(0, 1, 1, 0, 0, 1, 1, True)]),
        # tick 5 (v2): 0 and 1 retrain on v2; one entry waits
        ([0, 1], None),
        # tick 6 (v2): all five queue; 1's carried entry reads its job 2, and so does its
        # own entry for job 2: a repeat with staleness 0
        ([], [R(1, 1, 2, 0, 2, 0, 2, False), R(0, 2, 2, 2, 2, 0, 0, False), R(1, 2, 2, 2, 2, 0, 0, True)]),
    ]
    for tick, (starts, reads) in enumerate(expected, 1):
        got_starts, got_reads = c.step()
        assert (got_starts, got_reads) == (starts, reads), f"tick {tick}"
    assert c.version == 3 and c.tick == 6
    assert [q[0] for q in c.queue] == [2, 3, 4]  # carried: 2, 3, 4's entries for their job 1
    # overwritten jobs: 0 and 1 two each, 2, 3, 4 one each; read: 0/1's job 1 and 2's job 0
    assert c.never_aggregated() == (4, 7)


def test_same_speeds_as_the_event_clock_and_seeded():
    from fdahpc.semiasync.clock import VirtualClock

    assert np.array_equal(TickClock(100, 50, 3, 10).r, VirtualClock(100, 50, 3).r)
    a, b = TickClock(30, 10, 1, 5), TickClock(30, 10, 1, 5)
    for _ in range(40):
        assert a.step() == b.step()


def test_paper_setting_figures_near_the_issue():
    """N = 100, K = 10, 1:50, 400 aggregations: the issue measured ≈ 2.5 real staleness
    (half 0) against ≈ 9.8 by start stamp, ≈ 13 % repeats, ≈ 15 % jobs never aggregated,
    on the authors' own speed table; ours is drawn (seed 0), so only the regime is checked.
    benchmarks/tick_clock.py prints the figures."""
    s = tick_statistics(100, 10, 50, 400, seed=0)
    assert 2.0 < s["staleness_mean"] < 3.5 and 0.4 < s["staleness_zero"] < 0.65
    assert 8.5 < s["stamp_staleness_mean"] < 11
    assert 0.10 < s["repeats"] < 0.20 and 0.12 < s["never_aggregated"] < 0.22


@pytest.mark.parametrize("clients, ratio, K", [(5, 2, 3), (100, 50, 10)])
def test_next_starts_are_the_next_ticks_starts(clients, ratio, K):
    """The server sends the next tick's starters their model before it scores the new
    version (rounds.TickRounds._send_ahead): next_starts() must name exactly the clients the tick
    then starts, at every tick, an aggregation's included."""
    speeds = np.array([1, 1, 2, 2, 2]) if clients == 5 else None
    clock = TickClock(clients, ratio, 0, K, speeds=speeds)
    aggregations, starting = 0, 0
    while clock.version < 50:
        ahead = clock.next_starts()
        starts, reads = clock.step()
        assert starts == ahead, clock.tick
        aggregations += reads is not None
        starting += bool(starts)
    assert aggregations == 50 and starting > 50


@pytest.mark.parametrize("n, steps", [(49, 0), (50, 2), (99, 2), (100, 4), (173, 6), (1000, 40)])
def test_drop_last_steps_are_two_floor_n_over_50(n, steps):
    assert steps_per_job(n, 50, 2.0, drop_last=True) == steps
    assert steps_per_job(n, 50, 2.0) == max(1, -(-2 * n // 50))  # without it: ⌈2n/50⌉, at least 1


def test_drop_last_batches_are_full_and_each_epoch_one_permutation():
    n, B = 173, 50
    x, y = np.arange(n, dtype=np.float32).reshape(n, 1), np.arange(n, dtype=np.int64)
    s = BatchStream(x, y, B, seed=4, stream=2, drop_last=True)
    for _ in range(3):  # three epochs: 3 full batches each, distinct samples, 23 dropped
        seen = np.concatenate([s.next()[1].numpy() for _ in range(n // B)])
        assert len(seen) == 150 and len(np.unique(seen)) == 150
    small = BatchStream(x[:10], y[:10], B, seed=0, stream=0, drop_last=True)
    with pytest.raises(ValueError, match="--drop-last"):
        small.next()


@pytest.mark.parametrize("clients, ratio, K, at", [(5, 2, 3, 3), (30, 10, 5, 17)])
def test_state_dict_written_and_read_back_continues_the_same_ticks(tmp_path, clients, ratio, K, at):
    """A clock saved at an aggregation in the checkpoint format (file, manifest,
    weights_only read) and loaded into a fresh clock continues exactly like the clock that
    ran on: the same starts and reads, queue, never-aggregated counts. (5, 2, 3) at version
    3 is the hand trace's end above, with three carried entries."""
    from fdahpc import checkpoint
    from fdahpc.comm import LocalCommunicator

    speeds = np.array([1, 1, 2, 2, 2]) if clients == 5 else None
    straight = TickClock(clients, ratio, 0, K, speeds=speeds)
    while straight.version < at:
        straight.step()
    if clients == 5:
        assert len(straight.queue) == 3
    folder = checkpoint.save(LocalCommunicator(), str(tmp_path), at, {"clock": straight.state_dict()}, {})
    state = checkpoint.load_rank(folder, checkpoint.read_manifest(folder), 0)["clock"]
    resumed = TickClock(clients, ratio, 0, K)  # the seed's table; the saved one wins
    resumed.load_state_dict(state)
    assert (resumed.tick, resumed.version, resumed.queue) == (straight.tick, straight.version, straight.queue)
    assert resumed.never_aggregated() == straight.never_aggregated()
    for _ in range(60):
        assert resumed.step() == straight.step()
    assert resumed.never_aggregated() == straight.never_aggregated()
    assert straight.read_jobs == resumed.read_jobs and np.array_equal(straight.last_read, resumed.last_read)
    with pytest.raises(ValueError, match="same --clients"):
        TickClock(clients + 1, ratio, 0, K).load_state_dict(state)
