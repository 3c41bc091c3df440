"""The benchmarks' own bookkeeping: entry parsing and the tables that state their goals."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import comm_cost  # noqa: E402
import fedadp_rounds  # noqa: E402


def test_entries_keep_their_flags_in_the_label_but_not_theta():
    e = comm_cost.parse_entry("fedadam+linear:theta=0.05:server-lr=0.01")
    assert (e.family, e.label, e.fixed_theta, e.sweeps_theta) == (
        "fedadam+linear", "fedadam+linear:server-lr=0.01", True, False)
    assert e.flags == ("--theta", "0.05", "--server-lr", "0.01")
    assert comm_cost.parse_entry("sketchfda").sweeps_theta
    with pytest.raises(ValueError, match="empty strategy name"):
        comm_cost.parse_entry("+sketch")


def _row(strategy, gb=None, steps=None, spent=1.0, theta=""):
    family = strategy.split(":")[0]
    reached = gb is not None
    return dict(partition="iid", workers=4, strategy=strategy, family=family, theta=theta, reached=reached,
                gb_to_target=gb if reached else "", steps_to_target=steps if reached else "", gb=spent, steps=5000)


def test_a_baseline_is_its_cheapest_configuration_that_reached_the_target():
    rows = [_row("fedadam", spent=0.02), _row("fedadam:tau=100", gb=0.30, steps=4000),
            _row("fedadam:tau=100:server-lr=0.01", gb=0.12, steps=3000),
            _row("linearfda", gb=0.02, steps=1900, theta=1.0), _row("linearfda", gb=0.04, steps=1700, theta=2.0),
            _row("sketchfda", gb=0.08, steps=1800, theta=1.0)]
    table = {r[2]: r for r in comm_cost.summary_table(rows, "fedadam")}
    assert set(table) == {"linearfda", "sketchfda", "FDA (every Θ and trigger)"}
    lin = table["linearfda"]
    assert lin[3:8] == ["2/2", "0.0300", "fedadam:tau=100:server-lr=0.01", "0.1200", "4.0x"]
    assert table["FDA (every Θ and trigger)"][7] == "3.0x"  # median of 0.02, 0.04, 0.08
    assert comm_cost.summary_table(rows, "synchronous") == []  # no such runs: no table


def test_a_baseline_that_never_reached_the_target_gives_bounds():
    rows = [_row("synchronous", spent=9.0), _row("linearfda", gb=0.09, steps=2000, theta=1.0)]
    (row,) = comm_cost.summary_table(rows, "synchronous")
    assert row[6:] == [">9.000", ">100.0x", "2000", ">5000", "<0.40"]


def test_rounds_to_target_count_only_round_end_evaluations():
    run = {"eval/step": np.array([94, 188, 282, 376]), "eval/accuracy": np.array([0.7, 0.81, 0.79, 0.82]),
           "steps_to_target": 188, "steps_per_epoch": 188}
    assert fedadp_rounds.rounds_to_target(run, 94, 0.80) == 2
    assert fedadp_rounds.rounds_to_target(run, 188, 0.80) == 1
    assert fedadp_rounds.rounds_to_target(run, 94, 0.9) is None
    # 100-step rounds: the run stopped at the epoch-end evaluation, inside round 2
    with pytest.raises(RuntimeError, match="divides the 188-step epoch"):
        fedadp_rounds.rounds_to_target({**run, "eval/step": np.array([100, 188])}, 100, 0.80)


def test_semiasync_benchmark_synchronous_reference_does_the_same_local_work():
    import semiasync

    args = semiasync.parse(["--clients", "40", "--buffer", "5", "--rounds", "200"])
    sync = semiasync.flags_for(args, "sync-fedavg", 1)
    assert sync[sync.index("--buffer") + 1] == "40" and sync[sync.index("--rounds") + 1] == "25"
    assert sync[sync.index("--strategy") + 1] == "fedavg"
    qs = semiasync.flags_for(args, "fedqs-avg", 1)
    assert qs[qs.index("--buffer") + 1] == "5" and qs[qs.index("--rounds") + 1] == "200"


def test_semiasync_benchmark_time_to_accuracy_skips_unscored_rounds():
    import semiasync

    run = {"round/accuracy": np.array([np.nan, 0.4, np.nan, 0.7]), "round/virtual_time": np.array([2, 5, 7, 9])}
    assert semiasync.time_to(run, 0.5) == 9 and semiasync.time_to(run, 0.3) == 5
    assert np.isnan(semiasync.time_to(run, 0.9))


def test_semiasync_benchmark_methods_carry_their_own_flags():
    import semiasync

    args = semiasync.parse([])
    flags = semiasync.flags_for(args, "fedqs-avg:fedqs-feedback=code:fedqs-no-momentum", 0)
    assert flags[flags.index("--strategy") + 1] == "fedqs-avg"
    assert flags[-3:] == ["--fedqs-feedback", "code", "--fedqs-no-momentum"]
