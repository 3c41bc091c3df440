"""The benchmarks' own bookkeeping: entry parsing and the tables that state their goals."""

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import comm_cost  # noqa: E402
from fdahpc.data import FASHION_MNIST_DIR  # noqa: E402
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


def test_scaling_fit_recovers_alpha_beta_from_noiseless_times():
    import cost_model

    alpha, beta = 3.5e-6, 2.5e-10  # 3.5 µs, 4 GB/s
    sizes = [8, 64, 5004, 246824, 6653480, 44691240]
    points = [(k, n, cost_model.allreduce_seconds(n, k, alpha, beta)) for k in (2, 4, 8, 16, 32, 44) for n in sizes]
    a, b, residuals = cost_model.fit_alpha_beta(points)
    assert a == pytest.approx(alpha, rel=1e-9) and b == pytest.approx(beta, rel=1e-9)
    assert max(abs(r) for r in residuals) < 1e-9
    # The model itself: 2⌈log2 K⌉ latency terms, 2(K-1)/K·n bytes; one rank costs nothing.
    assert cost_model.allreduce_seconds(1000, 44, 1.0, 0.0) == 12.0
    assert cost_model.allreduce_seconds(1000, 4, 0.0, 1.0) == 1500.0
    assert cost_model.allreduce_seconds(1000, 1, 1.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="at least two"):
        cost_model.fit_alpha_beta([(2, 8, 1e-5)])


def test_scaling_projection_follows_the_stated_cost_model():
    import cost_model
    import scaling_measure

    alpha, beta = 2e-6, 8 / 100e9
    d, c = 1000, {"synchronous": 0.010, "fedavg": 0.008, "linearfda": 0.009, "sketchfda": 0.011}
    models = {"m": dict(params=d, compute=c, state_bytes={"synchronous": 0, "fedavg": 0, "linearfda": 8, "sketchfda": 5004})}
    rows = cost_model.project(models, [2, 1024], alpha, beta, samples=60000, batch=32)
    got = {(r["ranks"], r["strategy"]): r for r in rows}
    assert cost_model.steps_per_epoch(60000, 2, 32) == 938 and cost_model.steps_per_epoch(60000, 1024, 32) == 2
    full = cost_model.allreduce_seconds(4 * d, 1024, alpha, beta)
    sync = got[1024, "synchronous"]
    assert sync["steps_per_epoch"] == 2 and sync["comm_seconds"] == pytest.approx(full)
    assert sync["epoch_seconds"] == pytest.approx(2 * (0.010 + full))
    assert sync["bytes_per_step"] == pytest.approx(1024 * 2 * 4 * d)  # the FDA paper's count
    fedavg = got[2, "fedavg"]  # one model AllReduce per epoch of 938 steps
    assert fedavg["comm_seconds"] == pytest.approx(cost_model.allreduce_seconds(4 * d, 2, alpha, beta) / 938)
    sketch = got[2, "sketchfda"]
    assert sketch["comm_seconds"] == pytest.approx(cost_model.allreduce_seconds(5004, 2, alpha, beta)
                                                   + cost_model.allreduce_seconds(4 * d, 2, alpha, beta) / 938)
    assert sketch["bytes_per_step"] == pytest.approx(2 * (2 * 4 * d / 938 + 5004))
    assert sketch["comm_share"] == pytest.approx(sketch["comm_seconds"] / (0.011 + sketch["comm_seconds"]))
    # fixed periods and a faster device
    rows = cost_model.project(models, [4], alpha, beta, 60000, 32, fedavg_tau="10", fda_steps_per_sync="5",
                              compute_scale=10)
    got = {r["strategy"]: r for r in rows}
    full = cost_model.allreduce_seconds(4 * d, 4, alpha, beta)
    assert got["fedavg"]["comm_seconds"] == pytest.approx(full / 10)
    assert got["linearfda"]["comm_seconds"] == pytest.approx(cost_model.allreduce_seconds(8, 4, alpha, beta) + full / 5)
    assert got["fedavg"]["compute_seconds"] == pytest.approx(0.0008)
    assert scaling_measure.message_sizes("8,5004", [246824]) == [8, 5004]
    auto = scaling_measure.message_sizes("auto", [246824])
    assert auto[:2] == [8, 64] and 246824 in auto


def test_fabric_allreduce_seconds_is_the_model_on_the_stated_fabrics():
    import cost_model
    import scaling

    t = cost_model.fabric_allreduce_seconds
    # By hand: 4 MB over 8 ranks on 10 Gb/s Ethernet: 2·3 rounds · 25 µs + 2·7/8 · 4e6 B · 0.8 ns/B = 150 µs + 5.6 ms.
    assert t(4e6, 8, "ethernet-10g") == pytest.approx(150e-6 + 5.6e-3, rel=1e-12)
    # LeNet-5's 4d = 246 824 B over 2 ranks on 100 Gb/s InfiniBand: 2 · 2 µs + 246 824 B · 0.08 ns/B.
    assert t(246824, 2, "infiniband-100g") == pytest.approx(4e-6 + 19.74592e-6, rel=1e-12)
    # 8 B over 1024 hosts across sites: 20 rounds of 10 ms, plus 2·1023/1024 · 8 B · 8 ns/B.
    assert t(8, 1024, "cross-site-1g") == pytest.approx(0.2 + 2 * 1023 / 1024 * 64e-9, rel=1e-12)
    assert t(1e9, 1, "ethernet-10g") == 0.0
    with pytest.raises(ValueError, match="known: ethernet-10g"):
        t(8, 2, "token-ring")
    # scaling.py projects on the table's InfiniBand row unless told otherwise.
    args = scaling.parse([])
    assert (args.fabric_gbps, args.fabric_latency_us) == (100.0, 2.0)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST_DIR), reason="dataset-fashion-mnist not installed")
def test_scaling_quick_run_measures_and_projects(tmp_path):
    """``scaling.py --quick`` on 2 ranks end to end: the numbers are timings, so only the
    report's structure and the byte counts (exact) are checked."""
    import csv

    from conftest import run_python

    out = tmp_path / "s"
    proc = run_python(["benchmarks/scaling.py", "--quick", "--ranks", "2", "--wait-idle", "0", "--out", str(out),
                       "--workdir", str(tmp_path / "w")], timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = (tmp_path / "s.txt").read_text()
    for heading in ("MEASURED here: AllReduce", "MEASURED here: fdahpc.train's loop", "PROJECTED (not measured)"):
        assert heading in text
    assert (tmp_path / "s.png").stat().st_size > 10_000
    rows = list(csv.DictReader(open(tmp_path / "s.csv")))
    parts = {r["part"] for r in rows}
    assert parts == {"allreduce", "measured", "projected"}
    measured = {r["strategy"]: r for r in rows if r["part"] == "measured"}
    params = 61706  # LeNet-5 on 1x28x28, 10 classes (fdahpc/models.py)
    assert float(measured["synchronous"]["bytes_per_step"]) == 2 * 2 * 4 * params
    assert float(measured["fedavg"]["bytes_per_step"]) == 0
    assert float(measured["linearfda"]["bytes_per_step"]) == 2 * 8
    assert float(measured["sketchfda"]["bytes_per_step"]) == 2 * 5004
    projected = [r for r in rows if r["part"] == "projected"]
    assert {int(r["ranks"]) for r in projected} == {2 ** i for i in range(1, 11)}
    assert all(float(r["epoch_seconds"]) > 0 for r in projected)


def test_frontier_reads_every_target_from_one_run_and_compares_on_the_frontier(capsys):
    import frontier_analysis

    run = {"eval/step": [100, 200, 300], "eval/accuracy": [0.85, 0.881, 0.905], "eval/comm_bytes": [1e6, 2e6, 4e6]}
    assert frontier_analysis.crossing(run, 0.88) == (200, 0.002) and frontier_analysis.crossing(run, 0.90) == (300, 0.004)
    assert frontier_analysis.crossing(run, 0.95) is None
    # A target met between syncs is charged the sync that hands back the evaluated (held) model.
    held = dict(run, **{"eval/held_bytes": [5e5, 5e5, 0]})
    assert frontier_analysis.crossing(held, 0.88) == (200, 0.0025)
    assert frontier_analysis.crossing(held, 0.90) == (300, 0.004)

    def pt(family, knob, steps, gb, reached=True):
        return dict(setting="s", target=0.9, family=family, knob=knob, auto=knob.startswith("auto"), reached=reached,
                    steps=steps, gb=gb, syncs=1, final_accuracy=0.9, seeds=1, reached_seeds=int(reached))

    pts = [pt("synchronous", "", 1000, 10.0), pt("fedavg", "1 ep", 1200, 0.02), pt("fedavg", "2 ep", 1500, 0.01),
           pt("fedavg-sgd", "1 ep, sgd 0.05", 1450, 0.012),
           pt("linearfda", "Θ=4", 1100, 0.008), pt("linearfda", "Θ=16", 1400, 0.006), pt("linearfda", "Θ=64", 1600, 0.0055),
           pt("linearfda", "Θ=2", 900, 0.05), pt("linearfda", "auto (1 ep)", 1300, 0.009), pt("sketchfda", "Θ=8", 1000, 0.3, False)]
    assert [p["knob"] for p in frontier_analysis.pareto([p for p in pts if p["family"] == "linearfda"])] == ["Θ=2", "Θ=4", "Θ=16", "Θ=64"]  # auto: Θ=4 beats it in both
    assert frontier_analysis.cheapest_within(pts[4:9], 1450)["knob"] == "Θ=16"
    verdicts = frontier_analysis.report(pts)
    text = capsys.readouterr().out
    # 1 ep (0.02 GB): Θ=4 in fewer steps at 0.008 -> 2.5x; 2 ep (0.01): Θ=16 at 0.006 -> 1.67x, not dominated
    assert "FDA dominates 1 of 2 FedAvg points" in "\n".join(verdicts)
    assert "2.50x" in text and "1.67x" in text
    # Synchronous (1000 steps): the cheapest tuned FDA run in <= 1000 steps is Θ=2 (0.05 GB): 200x
    assert any("200x fewer bytes than Synchronous" in v for v in verdicts)
    # auto 0.009 GB at 1300 steps; cheapest tuned Θ=64 (0.0055) -> 1.64x; in <= 1300 steps: Θ=4 (0.008) -> 1.12x
    line = next(v for v in verdicts if "linearfda auto (1 ep)" in v)
    assert "1.64x its GB" in line and "Θ=4 0.0080 GB (1.12x)" in line and "auto check missed" in line
    best = pts[6]  # Θ=64: 1600 steps, 0.0055 GB
    assert frontier_analysis.auto_check(dict(steps=1760, gb=0.00825), best)  # exactly 1.1x the steps, 1.5x the bytes
    assert not frontier_analysis.auto_check(dict(steps=1761, gb=0.0055), best) and not frontier_analysis.auto_check(dict(steps=1000, gb=0.0083), best)
    # the FDA paper's SGD FedAvg: reported apart (Θ=16 in <= 1450 steps: 0.012 / 0.006 = 2x), not counted above
    # FDA's lead, at each FDA budget against FedAvg's cheapest within 1.1x it: 1100 and 1300 -> 1 ep (0.02) / 0.008
    # = 2.5, 1400 -> 2 ep (0.01, 1500 <= 1540) / 0.006, 1600 -> 0.01 / 0.0055 (900: no FedAvg within 990); best 2.5.
    # FedAvg's: 1200 -> 0.02 against Θ=4's 0.008 within 1320 (0.4), 1500 -> 0.01 against Θ=64's 0.0055 within 1650
    (fda_lead, w, l), (fedavg_lead, _, _) = frontier_analysis.frontier_leads([p for p in pts if p["reached"]])
    assert fda_lead == 2.5 and fedavg_lead == pytest.approx(0.55)
    assert (w["knob"], l["knob"]) == ("Θ=4", "1 ep")  # the first budget with the best ratio: the pair to confirm
    assert frontier_analysis.screen_verdict(fda_lead, fedavg_lead) == "FDA ahead"
    assert frontier_analysis.screen_verdict(0.9, 1.6) == "FDA behind" and frontier_analysis.screen_verdict(1.6, 1.6) == "mixed"
    assert frontier_analysis.screen_verdict(1.5, 1.5) == "even" and frontier_analysis.screen_verdict(None, 2.0) == "FDA behind"
    assert frontier_analysis.screen_verdict(None, None) == "no shared budget"
    # the slack: FedAvg 1 ep one evaluation later than an FDA run no longer counts as beaten
    near = [pt("fedavg", "1 ep", 1050, 0.02), pt("linearfda", "Θ=4", 1000, 0.008)]
    assert [x[0] for x in frontier_analysis.frontier_leads(near)] == pytest.approx([2.5, 0.4])
    # FedAvg reaching the target before its first sync (0 GB) leads without bound, not by a division error
    free = [pt("fedavg", "8 ep", 1000, 0.0), pt("linearfda", "Θ=64", 1000, 0.004)]
    assert frontier_analysis.frontier_leads(free)[1][0] == math.inf and frontier_analysis.screen_verdict(0.0, math.inf) == "FDA behind"
    row = frontier_analysis.regimes(pts)[0]
    assert row[2:5] == ["900 / 1200", "2.50x (Θ=4 vs 1 ep, 1 seed) / 0.55x (2 ep vs Θ=64, 1 seed)", "FDA ahead"]
    assert frontier_analysis.seed_count(dict(seeds=3), dict(seeds=3)) == "3 seeds"
    assert frontier_analysis.seed_count(dict(seeds=3), dict(seeds=1)) == "3/1 seeds"
    assert row[6] == "Θ=64 (grid top)"  # the cheapest tuned LinearFDA is the largest Θ tried
    missed = [dict(p, reached=False) if p["knob"] == "Θ=64" else p for p in pts]
    assert frontier_analysis.cheapest_theta_edge(missed) == "Θ=16 (reach edge)"  # Θ=64 missed: 16 is as far as the cap allows
    cheap16 = [dict(p, gb=0.005) if p["knob"] == "Θ=16" else p for p in pts]
    assert frontier_analysis.cheapest_theta_edge(cheap16) == "Θ=16 (inside)" and frontier_analysis.cheapest_theta_edge(pts[:4]) == "-"
    # an auto run where no tuned Θ of its trigger reached the target: reported, neither met nor missed
    lone = [pt("fedavg", "1 ep", 1200, 0.02), pt("linearfda", "Θ=64", 3000, 0.004, False), pt("linearfda", "auto (1 ep)", 2500, 0.01)]
    assert frontier_analysis.regimes(lone)[0][7] == "linearfda auto (1 ep) reached it (2500 steps, 0.0100 GB) where no tuned Θ did: no check"
    assert any(v.endswith("linearfda auto (1 ep) not reached, nor by any tuned Θ: no check")
               for v in frontier_analysis.report([dict(p, reached=False) for p in lone[1:]] + lone[:1]))
    paper = next(v for v in verdicts if "FDA paper's comparison" in v)
    assert "fedavg-sgd 1 ep, sgd 0.05 1450 steps 0.0120 GB" in paper and "linearfda Θ=16 0.0060 GB (2.00x fewer bytes)" in paper


def test_frontier_settings_carry_the_local_optimizer_into_every_run():
    import frontier
    import frontier_analysis

    s = frontier.parse_setting("lenet5/mix:2*iid+2*classes:2@8/momentum:0.05=0.85;0.9")
    assert (s.partition, s.workers, s.optimizer, s.lr, s.targets) == ("mix:2*iid+2*classes:2", 8, "momentum", 0.05, "0.85,0.9")
    assert s.name == "lenet5/mix:2*iid+2*classes:2@8/momentum:0.05" and s.folder.endswith("-k8-momentum0.05")
    args = frontier.parse(["--settings", "lenet5/iid@4/sgd:0.1", "--dry-run"])
    jobs = frontier.comm_cost.plan(frontier.comm_cost_args(args, args.settings[0]))
    assert jobs and all(" ".join(j.flags).endswith("--optimizer sgd --lr 0.1") for j in jobs)
    plain = frontier.parse_setting("lenet5/iid@4")
    assert plain.flags() == [] and plain.folder == "lenet5-iid-k4"  # the folders earlier runs were made in
    # --paper-baseline: one more FedAvg run, with SGD, its own family
    args = frontier.parse(["--settings", "lenet5/iid@4", "--paper-baseline", "0.05"])
    jobs = frontier.comm_cost.plan(frontier.comm_cost_args(args, args.settings[0]))
    sgd = [j for j in jobs if "--optimizer" in j.flags]
    assert len(sgd) == 1 and "--local-epochs 1 --optimizer sgd --lr 0.05" in " ".join(sgd[0].flags)
    row = dict(family="fedavg", entry="fedavg:local-epochs=1:optimizer=sgd:lr=0.05", theta="")
    assert (frontier_analysis.family_of(row), frontier_analysis.knob_of(row)) == ("fedavg-sgd", "1 ep, sgd 0.05")
    with pytest.raises(SystemExit):
        frontier.parse(["--settings", "lenet5/iid@4/sgd:0.1", "--paper-baseline", "0.05"])
    for bad, message in [("lenet5/iid@4/sgd", "OPTIMIZER:LR"), ("lenet5/iid@4/rmsprop:0.1", "optimizer 'rmsprop' unknown"),
                         ("lenet5/iid@4/sgd:fast", "learning rate 'fast'")]:
        with pytest.raises(ValueError, match=message):
            frontier.parse_setting(bad)


def test_frontier_runs_the_fabric_cadences_and_a_diloco_grid():
    """--auto-cadences H:M: LinearFDA --theta auto with a horizon of H steps (as epochs that round
    back to H) and --fda-every M, labelled so the time report finds them; --diloco-steps: DiLoCo's
    rounds, labelled 'H=...'."""
    import frontier
    import frontier_analysis
    import time_to_accuracy as tta

    args = frontier.parse(["--settings", "lenet5/iid@8", "--only", "auto,diloco", "--auto-rules", "auto",
                           "--auto-round-epochs", "", "--auto-cadences", "43:43,1:1", "--diloco-steps", "50,500"])
    jobs = frontier.comm_cost.plan(frontier.comm_cost_args(args, args.settings[0]))
    flags = [" ".join(j.flags) for j in jobs]
    assert len(jobs) == 4 and sum("--strategy diloco --tau" in f for f in flags) == 2
    fda = [f for f in flags if "--fda-every 43" in f]
    assert len(fda) == 1 and "--theta auto --theta-round-epochs 0.182978723" in fda[0]  # 43 / 235 steps an epoch
    assert round(0.182978723 * frontier.steps_per_epoch(8)) == 43
    row = dict(family="linearfda", entry="linearfda:theta=auto:theta-round-epochs=0.182978723:fda-every=43", theta="auto")
    knob = frontier_analysis.knob_of(row)
    assert knob == "auto (H 0.182978723 ep, every 43)" and tta.run_cadence(dict(knob=knob, workers="8")) == (43, 43)
    assert frontier_analysis.knob_of(dict(family="diloco", entry="diloco:tau=500", theta="")) == "H=500"
    args = frontier.parse(["--settings", "lenet5/iid@8", "--only", "auto", "--auto-rules", "auto", "--auto-round-epochs",
                           "", "--auto-cadences", "43:43", "--auto-cadence-family", "diloco+linear"])
    flags = " ".join(frontier.comm_cost.plan(frontier.comm_cost_args(args, args.settings[0]))[0].flags)
    assert flags.startswith("--strategy diloco --trigger linear --theta auto --theta-round-epochs 0.182978723")
    row = dict(family="diloco+linear", entry="diloco+linear:theta=auto:theta-round-epochs=0.182978723:fda-every=43",
               theta="auto")
    assert frontier_analysis.knob_of(row) == "auto (H 0.182978723 ep, every 43)"
    for bad in (["--auto-cadences", "43"], ["--auto-cadences", "0:1"], ["--diloco-steps", "x"],
                ["--auto-cadence-family", "fedavg"]):
        with pytest.raises(SystemExit):
            frontier.parse(["--settings", "lenet5/iid@8", *bad])


def test_frontier_merges_earlier_csvs_and_runs_only_the_families_asked(tmp_path, capsys):
    """The CSV is what outlives a machine: a report rebuilt from it equals the original, and a
    new run replaces the same point or adds its own."""
    import frontier
    import frontier_analysis

    def pt(family, knob, steps, gb, target=0.9):
        return dict(setting="lenet5/iid@4", model="lenet5", partition="iid", workers=4, optimizer="adam", lr=0.001,
                    seed="0", target=target, family=family, knob=knob, auto=False, seeds=1, reached_seeds=1,
                    reached=True, steps=steps, gb=gb, syncs=3.0, final_accuracy=0.91, run_files="r.h5",
                    commit="83715d4274e8", machine="vm AMD EPYC AVX512", torch="2.13.0+cpu", numpy="2.4.6",
                    wall_seconds="233.6")

    old = [pt("fedavg", "1 ep", 1200, 0.02), pt("linearfda", "Θ=4", 1100, 0.008)]
    path = tmp_path / "old.csv"
    frontier_analysis.write_points(str(path), old)
    back = frontier_analysis.read_points([str(path)])
    assert back == old  # typed as points() makes them
    frontier_analysis.report(back)
    first = capsys.readouterr().out
    frontier_analysis.report(old)
    assert capsys.readouterr().out == first
    again = pt("linearfda", "Θ=4", 1000, 0.007)
    paper = dict(pt("fedavg-sgd", "1 ep, sgd 0.1", 1500, 0.02))
    assert frontier_analysis.merge(back, [again, paper]) == [old[0], again, paper]

    args = frontier.parse(["--settings", "lenet5/iid@4", "--paper-baseline", "0.1", "--only", "paper,synchronous",
                           "--merge", str(path)])
    entries = [j.flags for j in frontier.comm_cost.plan(frontier.comm_cost_args(args, args.settings[0]))]
    assert len(entries) == 2 and any("--optimizer" in f for f in entries) and any("synchronous" in f for f in entries)
    assert frontier.parse(["--merge", str(path)]).settings == []  # rebuild only
    # resuming from the CSV alone: a configuration with every asked seed merged is not run again ...
    args = frontier.parse(["--settings", "lenet5/iid@4", "--thetas", "linear=4,8;sketch=8", "--fedavg-epochs", "1",
                           "--no-auto", "--seeds", "0"])
    jobs = frontier.comm_cost.plan(frontier.comm_cost_args(args, args.settings[0]))
    left = frontier.unmeasured(args.settings[0], jobs, back)  # back: fedavg 1 ep and Θ=4, seed 0
    assert sorted(frontier.job_key(j) for j in left) == [("linearfda", "Θ=8"), ("sketchfda", "Θ=8"), ("synchronous", "")]
    # ... unless a target asked is not among its points: then it is scored again (with --resume, from its run file)
    targets = sorted({float(p["target"]) for p in back})
    assert frontier.unmeasured(args.settings[0], jobs, back, targets) == left
    again = frontier.unmeasured(args.settings[0], jobs, back, targets + [0.5])
    assert sorted(frontier.job_key(j) for j in again) == sorted(frontier.job_key(j) for j in jobs)
    # ... and one missing a seed runs all its seeds, so that its point is a median over them all
    args = frontier.parse(["--settings", "lenet5/iid@4", "--thetas", "linear=4;sketch=8", "--fedavg-epochs", "1",
                           "--no-auto", "--seeds", "0,1", "--only", "linearfda"])
    jobs = frontier.comm_cost.plan(frontier.comm_cost_args(args, args.settings[0]))
    assert sorted(j.seed for j in frontier.unmeasured(args.settings[0], jobs, back)) == [0, 1]
    for bad in (["--only", "fedavg,nope"], ["--only", "paper"], ["--merge", str(tmp_path / "missing.csv")]):
        with pytest.raises(SystemExit):
            frontier.parse(bad)


def test_time_to_accuracy_recovers_the_syncs_and_prices_them_on_a_fabric():
    import time_to_accuracy as tta
    from cost_model import FABRICS, fabric_alpha_beta
    from cost_model import fabric_allreduce_seconds as T

    def tree(n, k, fabric):  # a message under 64 kB: latency-bound, ceil(log2 K)·α + n·β
        alpha, beta = fabric_alpha_beta(FABRICS[fabric].gbps, FABRICS[fabric].latency_us)
        return math.ceil(math.log2(k)) * alpha + n * beta

    d, k, steps, syncs = 20_000, 4, 100, 3  # an 80 kB model: Rabenseifner's time
    fedavg = dict(workers=k, steps=steps, gb=syncs * 2 * k * 4 * d / 1e9, family="fedavg", auto="False", knob="1 ep",
                  run_files="x")
    t, got = tta.seconds(fedavg, d, 0.01, "ethernet-10g")
    assert got == syncs and t == pytest.approx(steps * 0.01 + syncs * T(4 * d, k, "ethernet-10g"))
    # a median over seeds, as frontier.csv writes it ("950.0", "1062.5"), is read as it is
    t, got = tta.seconds(dict(fedavg, steps="1062.5"), d, 0.01, "ethernet-10g")
    assert got == syncs and t == pytest.approx(1062.5 * 0.01 + syncs * T(4 * d, k, "ethernet-10g"))
    # LinearFDA with --theta auto: the first round (1 epoch = ceil(60000/4/32) = 469 steps) is unmonitored.
    monitored = 600 - 469
    auto = dict(fedavg, family="linearfda", auto="True", knob="auto (1 ep)", steps=600,
                gb=(syncs * 2 * k * 4 * d + k * (monitored * 8 + 4)) / 1e9)
    t, got = tta.seconds(auto, d, 0.01, "cross-site-1g")
    assert got == syncs
    assert t == pytest.approx(600 * 0.01 + syncs * T(4 * d, k, "cross-site-1g")
                              + monitored * tree(8, k, "cross-site-1g") + tree(4, k, "cross-site-1g"))


def test_time_to_accuracy_names_the_fastest_family_even_when_it_is_the_only_one(tmp_path, capsys):
    """A target only one family reached is reported as that family's, not a crash."""
    import time_to_accuracy as tta

    scaling = tmp_path / "scaling.csv"
    scaling.write_text("model,strategy,part,compute_seconds\nlenet5,synchronous,projected,0.004\n"
                       "lenet5,fedavg,projected,0.004\n")
    head = "setting,model,workers,target,family,knob,auto,reached,steps,gb,run_files\n"
    d = tta.model_params("lenet5")
    sync_gb = 600 * 2 * 8 * 4 * d / 1e9
    frontier = tmp_path / "frontier.csv"
    frontier.write_text(head + f"s,lenet5,8,0.85,synchronous,,False,True,600,{sync_gb},x\n"
                        f"s,lenet5,8,0.85,fedavg,1 ep,False,False,6000,0.01,y\n")
    assert tta.main(["--frontier", str(frontier), "--scaling", str(scaling)]) == 0
    out = capsys.readouterr().out
    summary = out.split("Fastest family")[1].split("Time to the target")[0]
    assert "synchronous (alone)" in summary and "fedavg" not in summary.split("\n", 1)[1]
    assert " 600 " in out  # the recovered model syncs: one per step


def test_time_to_accuracy_markdown_joins_the_regime_row_and_the_modelled_times(tmp_path, capsys):
    """--markdown prints docs/results.md's regime table: frontier's lead (pair and seeds) beside the time columns."""
    import time_to_accuracy as tta

    assert tta.regime_name("lenet5/classes:2@8/sgd:0.1") == "classes:2, K=8, SGD lr 0.1"
    assert tta.regime_name("cnn/iid@8") == "iid, K=8, Adam, cnn"
    scaling = tmp_path / "scaling.csv"
    scaling.write_text("model,strategy,part,compute_seconds\nlenet5,fedavg,projected,0.004\n"
                       "lenet5,linearfda,projected,0.004\n")
    d = tta.model_params("lenet5")
    model_gb = 2 * 4 * 4 * d / 1e9  # one model AllReduce at K = 4
    head = "setting,model,workers,target,family,knob,auto,reached,steps,gb,syncs,seeds,reached_seeds,run_files\n"
    # FedAvg: 10 syncs in 1000 steps; LinearFDA: 2 syncs in 1000 steps plus 1000 monitored 8-byte states;
    # its auto run: twice Θ=1's bytes in 1100 steps (leaves both leads and the times as they are)
    fda_gb = 2 * model_gb + 4 * 1000 * 8 / 1e9
    frontier = tmp_path / "frontier.csv"
    frontier.write_text(head + f"lenet5/iid@4/sgd:0.1,lenet5,4,0.9,fedavg,0.25 ep,False,True,1000,{10 * model_gb},10,3,3,x\n"
                        f"lenet5/iid@4/sgd:0.1,lenet5,4,0.9,linearfda,Θ=1,False,True,1000,{fda_gb},2,1,1,y\n"
                        f"lenet5/iid@4/sgd:0.1,lenet5,4,0.9,linearfda,auto (1 ep),True,True,1100,{2 * fda_gb},4,1,1,z\n")
    assert tta.main(["--frontier", str(frontier), "--scaling", str(scaling), "--markdown"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| regime | target |") and len(lines) == 3
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    lead = 10 * model_gb / fda_gb
    assert cells[:5] == ["iid, K=4, SGD lr 0.1", "0.9", "1000 / 1000",
                         f"{lead:.2f}x (Θ=1 vs 0.25 ep, 1/3 seeds) / {1 / lead:.2f}x (0.25 ep vs Θ=1, 3/1 seeds)", "FDA ahead"]
    assert cells[5] == "2.00x GB, 1.10x steps: missed"  # auto against the cheapest tuned Θ (1.1x the steps is within)
    # the time columns agree with each other: FDA is fastest exactly where FedAvg's time over FDA's is above 1
    ratios, winners = [float(x.rstrip("x")) for x in cells[6].split(" / ")], cells[7].split(" / ")
    assert winners == ["linearfda" if r > 1 else "fedavg" for r in ratios] and len(winners) == 3
    assert winners[2] == "fedavg"  # across sites, 1000 per-step state reductions at α = 10 ms outweigh 8 model syncs


def test_ring_allreduce_is_the_stated_formula_by_hand():
    import cost_model

    ring = cost_model.ring_allreduce_seconds
    # 2·(K−1) latency steps: K = 4 pays 6 α where the Rabenseifner schedule pays 2·ceil(log2 4) = 4.
    assert ring(1000, 4, 1.0, 0.0) == 6.0 and cost_model.allreduce_seconds(1000, 4, 1.0, 0.0) == 4.0
    # the bandwidth term is the same in both: 2·(K−1)/K·n = 1500 bytes per rank
    assert ring(1000, 4, 0.0, 1.0) == 1500.0
    # 40 MB over 8 ranks on 10 Gb/s, α = 25 µs: 14 · 25 µs + 2·7/8 · 4e7 B · 0.8 ns/B = 0.35 ms + 56 ms.
    assert ring(4e7, 8, 25e-6, 0.8e-9) == pytest.approx(0.35e-3 + 56e-3, rel=1e-12)
    assert ring(1e6, 2, 1e-3, 1e-9) == cost_model.allreduce_seconds(1e6, 2, 1e-3, 1e-9)
    assert ring(1e6, 1, 1.0, 1.0) == 0.0
    assert set(cost_model.COLLECTIVES) == {"ring", "rabenseifner"}


def test_time_model_prices_a_run_by_hand_at_a_stated_step_and_model_size():
    import time_to_accuracy as tta

    alpha, beta, k, d = 1e-3, 1e-9, 4, 1000
    model = 2 * k * 4 * d  # bytes of one model sync in the FDA paper's convention
    fedavg = dict(workers=k, steps="400", gb=5 * model / 1e9, family="fedavg", auto="False", knob="1 ep", run_files="x")
    p = tta.price(fedavg, d, 0.02, alpha, beta, "ring", d_price=10**6)
    # syncs from the bytes with the model that ran (5), priced at the stated size: 5 · (6 ms + 1.5 · 4e6 B · 1 ns/B)
    assert (p.syncs, p.steps, p.monitored) == (5, 400.0, 0)
    assert p.compute == pytest.approx(8.0) and p.sync == pytest.approx(5 * (6e-3 + 6e-3)) and p.monitor == 0.0
    assert p.total == pytest.approx(8.0 + 0.06)
    # LinearFDA with a tuned Θ: every step reduces its 8-byte state, a small message: latency-bound
    # (ceil(log2 4) α + 8 B · β each, not the ring's 6 α + 1.5 · 8 B · β); so is a 4 kB model (d = 1000)
    fda = dict(fedavg, family="linearfda", knob="Θ=2", gb=(3 * model + k * 400 * 8) / 1e9)
    p = tta.price(fda, d, 0.02, alpha, beta, "ring")
    assert p.syncs == 3 and p.monitored == 400
    assert p.monitor == pytest.approx(400 * (2e-3 + 8e-9))
    assert p.sync == pytest.approx(3 * (2e-3 + 4000 * 1e-9))
    assert tta.allreduce_time(64 * 1024, k, alpha, beta, "ring") == pytest.approx(6e-3 + 1.5 * 65536e-9)
    # '--fda-every 4' in a knob: one step in four is checked
    every = dict(fda, knob="Θ=2, every 4", gb=(3 * model + k * 100 * 8) / 1e9)
    assert tta.price(every, d, 0.02, alpha, beta).monitored == 100
    # auto (1 ep): the first 469 steps (ceil(60000 / 4 / 32)) unchecked, then one 4-byte reduction
    auto = dict(fda, knob="auto (1 ep)", auto="True", steps="600", gb=(3 * model + k * (131 * 8 + 4)) / 1e9)
    p = tta.price(auto, d, 0.01, alpha, beta, "rabenseifner")
    assert p.monitored == 131 and p.syncs == 3
    assert p.monitor == pytest.approx(131 * (2e-3 + 8e-9) + (2e-3 + 4e-9))
    # Synchronous hides each AllReduce behind the backward share b of its step: (1 − b)·step + max(b·step, T)
    sync = dict(fedavg, family="synchronous", knob="", steps="100", gb=100 * model / 1e9)
    big = 10**6  # T(4 MB, 4) = 4 ms + 1.5 · 4e6 B · 1 ns = 10 ms
    p = tta.price(sync, d, 0.02, alpha, beta, "rabenseifner", d_price=big, backward_share=0.25)
    assert p.total == pytest.approx(100 * (0.75 * 0.02 + max(0.25 * 0.02, 10e-3)))
    p = tta.price(sync, d, 0.02, alpha, beta, "rabenseifner", d_price=big, backward_share=0.75)
    assert p.total == pytest.approx(100 * 0.02) and p.sync == 0.0  # hidden whole
    periodic = dict(fedavg, steps="100", gb=100 * model / 1e9)
    p = tta.price(periodic, d, 0.02, alpha, beta, d_price=big, backward_share=0.75)
    assert p.total == pytest.approx(100 * (0.02 + 10e-3))  # a periodic sync waits for the model: no overlap


def test_time_model_step_is_measured_or_stated_with_each_strategys_own_share():
    import time_to_accuracy as tta

    compute = {("m", "fedavg"): 0.004, ("m", "linearfda"): 0.005, ("m", "synchronous"): 0.0042}
    assert tta.step_seconds(compute, "m", "linearfda", None) == 0.005  # measured: FedAvg's step + FDA's own work
    assert tta.step_seconds(compute, "m", "synchronous", None) == 0.004  # the same local work: FedAvg's step
    assert tta.step_seconds(compute, "m", "synchronous", 0.020) == 0.020
    assert tta.step_seconds(compute, "m", "diloco+linear", 0.020) == pytest.approx(0.025)  # LinearFDA's trigger
    assert tta.step_seconds(compute, "m", "linearfda", 0.020) == pytest.approx(0.025)  # FDA's work keeps its +25 %
    assert tta.step_seconds(compute, "m", "fedavg", 0.020) == pytest.approx(0.020)
    assert tta.step_seconds(compute, "m", "diloco", 0.020) == pytest.approx(0.020)  # not measured: FedAvg's local work
    assert tta.step_seconds(compute, "m", "fedavg-sgd", None) == 0.004
    assert tta.step_seconds(compute, "gpt", "fedavg", 0.1) == 0.1 and tta.step_seconds(compute, "gpt", "fedavg", None) is None


def test_time_model_verdicts_and_why_a_row_misses():
    import time_to_accuracy as tta

    assert [tta.verdict(x) for x in (0.5, 1.15, 1.151, 2.0, 2.001, None)] == [
        "met", "met", "missed", "missed", "far", "not reached"]
    best = tta.Priced(compute=10.0, sync=1.0, monitor=0.0, steps=1000, syncs=10, monitored=0)
    # 3 s more monitoring and 1 s more compute (100 more steps), fewer syncs: 4 s of excess, 75 % / 25 %
    free = tta.Priced(compute=11.0, sync=0.5, monitor=3.0, steps=1100, syncs=5, monitored=900)
    assert free.total - best.total == pytest.approx(3.5)
    assert tta.why(free, best) == "monitoring 86% (900 vs 0 checks); extra steps 29% (1100 vs 1000)"
    assert tta.why(best, free) == "-"  # not behind overall: nothing to explain
    assert tta.why(best, best) == "-"


def test_time_model_rows_name_the_fastest_the_best_tuned_and_the_comm_bound_family():
    import time_to_accuracy as tta
    from cost_model import FABRICS, fabric_alpha_beta

    d, k = 20_000, 4  # an 80 kB model: Rabenseifner's time; FDA's state a small message
    model = 2 * k * 4 * d
    base = dict(setting="s", model="m", workers=str(k), target="0.9", run_files="x", auto="False")
    runs = [dict(base, family="synchronous", knob="", steps="100", gb=100 * model / 1e9),
            dict(base, family="fedavg", knob="1 ep", steps="300", gb=3 * model / 1e9),
            dict(base, family="linearfda", knob="Θ=2", steps="200", gb=(2 * model + k * 200 * 8) / 1e9),
            dict(base, family="linearfda", knob="auto (4 ep)", auto="True", steps="150", gb=(model + k * 4) / 1e9),
            dict(base, family="linearfda", knob="auto (0.4 ep)", auto="True", steps="250",
                 gb=(2 * model + k * (250 - 188) * 8 + k * 4) / 1e9)]
    compute = {("m", f): 0.01 for f in ("fedavg", "linearfda", "synchronous")}
    rows = tta.time_rows(runs, {"m": d}, compute, [None], [None, 0.001], fabrics=("cross-site-1g",),
                         tuning_free=("linearfda auto (0.4 ep)",))
    assert len(rows) == 2
    measured, stated = rows
    a, b = fabric_alpha_beta(FABRICS["cross-site-1g"].gbps, FABRICS["cross-site-1g"].latency_us)
    t = lambda n: 4 * a + 1.5 * n * b if n >= 65536 else 2 * a + n * b  # noqa: E731  (K = 4; small: a tree)
    # by hand at 10 ms a step: Synchronous 1 s + 100 syncs; FedAvg 3 s + 3 syncs; Θ=2 2 s + 2 syncs + 200 checks
    sync, fedavg, theta = 1 + 100 * t(4 * d), 3 + 3 * t(4 * d), 2 + 2 * t(4 * d) + 200 * t(8)
    free = 2.5 + 2 * t(4 * d) + 62 * t(8) + t(4)  # 0.4 ep = round(187.6) = 188 unchecked steps
    assert fedavg < sync and fedavg < theta
    assert measured["tuned"] == "fedavg 1 ep" and measured["tuned_s"] == pytest.approx(fedavg)
    assert measured["fastest"] == "linearfda auto (4 ep)"  # an auto run with a knob is fastest, never the tuned best
    assert measured["free_s"] == pytest.approx(free) and measured["ratio"] == pytest.approx(free / fedavg)
    assert measured["verdict"] == tta.verdict(free / fedavg) == "missed"
    assert measured["why"].startswith("monitoring")
    assert measured["sync_share"] == pytest.approx(t(4 * d) / (0.01 + t(4 * d)))
    assert measured["sync_s"] == pytest.approx(sync)
    # at a stated 1 ms step the communication weighs more: the synchronous share rises
    assert stated["sync_share"] == pytest.approx(t(4 * d) / (0.001 + t(4 * d)))
    bound = tta.comm_bound(rows)
    assert len(bound) == 2 and bound[0][9] == f"{sync / free:.2f}x" and bound[0][10] == "not met"  # 0.98x < 1.5x
    c = tta.counts(rows)
    assert c["missed"] + c["met"] + c["far"] == 2 and "of 2 met" in tta.count_line(c)
    assert stated["verdict"] == "far" and stated["why"].startswith("monitoring")  # 62 checks of 10 ms against 0.3 s
    assert tta.causes(rows) == "monitoring 2" and tta.fastest_families(rows) == "linearfda 2"
    # on the slow link, against FedAvg's fastest τ: later in both rows, and by the monitoring alone
    assert measured["fedavg_s"] == pytest.approx(fedavg) and measured["free_monitor"] == pytest.approx(62 * t(8) + t(4))
    assert [row[:6] for row in tta.versus_fedavg(rows)] == [["own", "measured", 1, 0, 1, 1], ["own", "1 ms", 1, 0, 1, 1]]
    assert tta.versus_fedavg(rows, fabric="ethernet-10g") == []  # no row on that fabric
    # a stated model size leaves out the measured step (the CPU measured the model as it is) and prices 4·d_price bytes
    big = tta.time_rows(runs, {"m": d}, compute, [{"*": 1e6}], [None, 0.001], fabrics=("cross-site-1g",),
                        tuning_free=("linearfda auto (0.4 ep)",))
    assert len(big) == 1 and big[0]["size"] == 10**6 and big[0]["step"] == 0.001
    assert big[0]["tuned_s"] == pytest.approx(min(0.1 + 100 * t(4e6), 0.3 + 3 * t(4e6), 0.2 + 2 * t(4e6) + 200 * t(8)))


def test_time_to_accuracy_rejects_bad_step_times_and_model_sizes(capsys):
    import time_to_accuracy as tta

    for bad in (["--step-ms", "0"], ["--step-ms", "fast"], ["--step-ms", ","], ["--model-size", "0"],
                ["--model-size", "cnn=big"], ["--tuning-free", ";"], ["--collective", "tree"], ["--params", "gpt=1.5"],
                ["--params", "=5"]):
        with pytest.raises(SystemExit) as exc:
            tta.parse(bad)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
    args = tta.parse(["--step-ms", "measured,5,20", "--model-size", "actual", "--model-size", "cnn=1e7"])
    assert args.steps == [None, 0.005, 0.02] and args.sizes == [None, {"cnn": 1e7}]
    assert tta.priced_d({"cnn": 1e7}, "lenet5", 61706) == 61706 and tta.priced_d({"*": 2e6}, "cnn", 5) == 2 * 10**6


def test_time_to_accuracy_prices_a_model_it_cannot_build_from_params_at_stated_steps_only(tmp_path, capsys):
    """A model scaling.csv never measured and this script cannot build (a GPT's rows): its
    size from --params, its rows priced at the stated step times only; without --params, said."""
    import time_to_accuracy as tta

    scaling = tmp_path / "scaling.csv"
    scaling.write_text("model,strategy,part,compute_seconds\nlenet5,fedavg,projected,0.004\n")
    d, k = 200_000, 4
    head = "setting,model,workers,target,family,knob,auto,reached,steps,gb,run_files\n"
    frontier = tmp_path / "frontier.csv"
    frontier.write_text(head + f"gpt/roles@4,gpt,{k},0.5,synchronous,,False,True,100,{100 * 2 * k * 4 * d / 1e9},x\n"
                        f"gpt/roles@4,gpt,{k},0.5,fedavg,10 steps,False,True,120,{12 * 2 * k * 4 * d / 1e9},y\n")
    args = ["--frontier", str(frontier), "--scaling", str(scaling), "--step-ms", "measured,20", "--model-size", "actual"]
    assert tta.main(args) == 0
    assert "gpt's runs left out" in capsys.readouterr().out
    assert tta.main(args + ["--params", "gpt=200000"]) == 0
    out = capsys.readouterr().out.split("Verdict counts")[0]  # the per-row table
    rows = [line for line in out.splitlines() if "gpt/roles@4" in line and "20 ms" in line]
    assert len(rows) == 3 and not any("measured" in line for line in out.splitlines() if "gpt/roles@4" in line
                                      and "cross-site" in line)
    # by hand with the Rabenseifner schedule, T(800 kB, 4) = 2·2·α + 1.5 · 800 kB · β: on 10 Gb/s Synchronous
    # (100 · 0.02 + 100 · T) beats FedAvg (120 · 0.02 + 12 · T); across sites FedAvg wins
    # (100 steps, each (1 − b)·0.02 + max(b·0.02, T): T = 1.06 ms hides behind the backward pass) beats FedAvg
    # (120 · 0.02 + 12 · T); across sites FedAvg wins
    t, b = 4 * 25e-6 + 1.5 * 4 * d * 0.8e-9, tta.BACKWARD_SHARE["gpt"]
    assert t < b * 0.02 and 100 * 0.02 < 120 * 0.02 + 12 * t
    assert f"synchronous {100 * 0.02:.1f}" in next(r for r in rows if "ethernet-10g" in r)
    t = 4 * 10e-3 + 1.5 * 4 * d * 8e-9
    assert f"fedavg 10 steps {120 * 0.02 + 12 * t:.1f}" in next(r for r in rows if "cross-site-1g" in r)

def test_slow_link_model_and_its_measures_by_hand():
    import slow_link as sl

    assert sl.rate_bps("1gbit") == 1e9 and sl.rate_bps("100mbit") == 1e8 and sl.rate_bps("10Mbit") == 1e7
    assert sl.rate_bps("1mbps") == 8e6  # tc's bytes per second
    with pytest.raises(ValueError, match="e.g. 1gbit"):
        sl.rate_bps("fast")
    # noiseless two-rank times give back α and β: T(n) = 2α + nβ
    alpha, beta = 1e-4, 8e-8
    a, b = sl.fit([(n, 2 * alpha + n * beta) for n in sl.SIZES])
    assert a == pytest.approx(alpha, rel=1e-9) and b == pytest.approx(beta, rel=1e-9)
    # 3 syncs of 4d bytes and 100 checks of 8 bytes, by hand
    d = sl.D
    assert sl.comm_model(3, 100, alpha, beta) == pytest.approx(3 * (2e-4 + 4 * d * 8e-8) + 100 * (2e-4 + 64e-8))
    assert sl.predict(100, 3, 100, 0.01, alpha, beta) == pytest.approx(1.0 + sl.comm_model(3, 100, alpha, beta))
    # the segment starts at the stamp of step `first` (stamps[first - 1]) and holds the calls started inside it
    stamps = [1.0, 2.0, 3.0, 4.0]
    calls = [(0.5, 0.9, 8), (2.0, 2.25, 8), (3.5, 3.75, 8), (4.0, 4.5, 8)]
    assert sl.segment(stamps, calls, 2) == (2.0, [0.25, 0.25])
    # the link's time: per call the shorter of the ranks' times (the other also waited for its peer)
    assert sl.link_seconds([[0.5, 0.1], [0.2, 0.3]]) == pytest.approx(0.3)
    assert sl.link_seconds([[0.5, 0.1], [0.2]]) == pytest.approx(0.6)  # unmatched: rank 0's own


def test_semiasync_aggregate_projection_is_the_stated_model():
    import semiasync_aggregate as sa

    alpha, beta = 2e-6, 0.08e-9  # 100 Gb/s InfiniBand
    n = 4e6
    # Server path, K = 10, H = 4 hosts: 10 uploads in, 4 models out, one after another.
    assert sa.server_seconds(n, n, 10, 4, alpha, beta) == pytest.approx(14 * (alpha + n * beta), rel=1e-12)
    # Host path, H = 7 (8 ranks): T(2n, 8) + T(n, 8), each 2·3 latency rounds and 2·7/8 of its bytes.
    want = 6 * alpha + 2 * 7 / 8 * 2 * n * beta + 6 * alpha + 2 * 7 / 8 * n * beta
    assert sa.hosts_seconds(n, n, 7, alpha, beta) == pytest.approx(want, rel=1e-12)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST_DIR), reason="dataset-fashion-mnist not installed")
def test_peers_fdahpc_and_the_bare_loop_train_the_same_clients_to_the_same_model(tmp_path):
    """The harness times real runs by their round lines; fdahpc's run file names the
    scheduled clients, and the bare loop, handed the same clients and batches, scores the same."""
    import peers

    args = peers.parse(["--clients", "20", "--rounds", "2"])
    out = str(tmp_path / "f.h5")
    cmds = peers.commands(args, 20, out, eval_every=1)
    want = [peers.job.schedule(20, r, 0) for r in (1, 2)]
    runs = {way: peers.run_one(args, way, cmds[way], str(tmp_path / f"{way}.loads"), out, want) for way in ("fdahpc", "bare")}
    for way, r in runs.items():
        assert len(r["accuracy"]) == 2 and all(0.05 < a < 1 for a in r["accuracy"]), way
        assert r["per_round"] > 0 and r["peak_gb"] > 0.05, way
    peers.check_curves({w: r["accuracy"] for w, r in runs.items()}, 0.005)


def test_peers_client_job_draws_the_batches_of_a_stream_kept_across_jobs():
    """A client's j-th job rebuilt from scratch (the bare loop, Flower's actors) takes the
    batches fdahpc's host draws from the client's one stream kept across its jobs."""
    import peers_job
    from fdahpc.worker import BatchStream

    x, y = np.arange(50, dtype=np.float32).reshape(50, 1), np.arange(50)
    steps = 2  # ceil(50 / 32): each job ends inside a permutation
    kept = BatchStream(x, y, 32, 3, 7)
    for j in range(4):
        want = [kept.next()[1].tolist() for _ in range(steps)]
        fresh = BatchStream(x, y, 32, 3, 7)
        peers_job._skip(fresh, j * steps)
        assert [fresh.next()[1].tolist() for _ in range(steps)] == want, j


def test_peers_schedule_is_fdahpcs_sampler_and_the_bare_split_is_greedy():
    import peers
    import peers_job
    from fdahpc.semiasync.clock import VirtualClock

    clock = VirtualClock(100, 1, 5, per_round=10)
    rounds = [peers_job.schedule(100, r, 5) for r in range(1, 7)]
    assert rounds == [clock.starters(None if r == 0 else rounds[r - 1], r) for r in range(6)]
    assert all(len(set(r)) == 10 for r in rounds) and rounds[0] != rounds[1]
    c = rounds[5][0]
    assert peers_job.jobs_before(100, c, 6, 5) == sum(c in r for r in rounds[:5])
    split = peers.greedy_split({1: 50, 2: 40, 3: 30, 4: 30, 5: 20}, 2)
    assert split == [[1, 4], [2, 3, 5]]  # largest first, each to the lighter process: loads 80 and 90
    assert sorted(sum(split, [])) == [1, 2, 3, 4, 5]


def test_peers_load_guard_fails_a_run_whose_cache_did_not_hold(tmp_path, monkeypatch):
    """Every training-set load is recorded; more loads than worker processes fail the run."""
    import peers_job

    path = str(tmp_path / "loads")
    monkeypatch.setenv(peers_job.LOADS_ENV, path)
    with pytest.raises(RuntimeError, match="no data load recorded"):
        peers_job.check_loads(path, 2, "Flower")
    peers_job.record_load()
    peers_job.record_load()
    assert peers_job.check_loads(path, 2, "Flower") == 2
    peers_job.record_load()
    with pytest.raises(RuntimeError, match="3 loads of the training set in 1 processes for 2 workers"):
        peers_job.check_loads(path, 2, "Flower")


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST_DIR), reason="dataset-fashion-mnist not installed")
def test_peers_flower_app_from_a_module_keeps_its_cache_and_one_from_the_script_does_not(tmp_path, monkeypatch):
    """Shipped as Flower's Ray backend ships it (cloudpickle, with every message), the module's
    ClientApp finds its data cached; the one defined in the script (by value) reloads every call.
    Runs where Flower is installed (its own venv: run pytest with that interpreter)."""
    pytest.importorskip("flwr", reason="Flower absent: pip install -e '.[peers]'")
    cloudpickle = pytest.importorskip("ray.cloudpickle", reason="Ray absent: pip install -e '.[peers]'")
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict

    import peers
    import peers_flower_app
    import peers_job

    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):  # set by a SuperLink in a real run
        monkeypatch.setattr(TaskIdentity, name, 1)
    arrays = ArrayRecord(peers_job.new_lenet(0).state_dict())
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})

    def loads_after_two_calls(app, name):
        path = str(tmp_path / name)
        monkeypatch.setenv(peers_job.LOADS_ENV, path)
        for job in range(2):
            cfg = ConfigRecord({"server-round": job + 1, "clients": 20, "seed": 0, "client": 3, "job": job})
            msg = Message(content=RecordDict({"arrays": arrays, "config": cfg}), message_type=MessageType.TRAIN,
                          dst_node_id=1)
            reply = cloudpickle.loads(cloudpickle.dumps(app))(msg, context)  # a fresh copy per call, as an actor gets it
            assert reply.content["metrics"]["num-examples"] > 0
        return peers_job.count_loads(path)[0]

    peers_flower_app._CACHE.clear()
    assert loads_after_two_calls(peers_flower_app.app, "module") == 1
    assert loads_after_two_calls(peers.inline_client_app(), "inline") == 2
    with pytest.raises(RuntimeError, match="does not hold"):
        peers_job.check_loads(str(tmp_path / "inline"), 1, "Flower")


def test_fda_rounds_reads_each_rounds_end_from_the_series():
    import fda_rounds

    run = {"sync/step": np.array([3, 7]), "fda/step": np.array([4, 5, 6, 7]),
           "fda/h": np.array([1.0, 2.0, 3.0, 4.0]), "fda/variance": np.array([0.5, 1.0, 1.5, 2.5])}
    # round 1 (steps 1-3) was not monitored (a calibration round); round 2 ends at step 7: H 4, Var 2.5
    assert fda_rounds.rounds(run) == [dict(first=1, last=3, length=3, synced=True),
                                      dict(first=4, last=7, length=4, synced=True, step=7, var=2.5, h=4.0, h_max=4.0)]
    del run["fda/variance"]  # a run made without --log-variance: no Var
    assert fda_rounds.rounds(run)[1] == dict(first=4, last=7, length=4, synced=True, step=7, h=4.0, h_max=4.0)
    # a run that ends inside a round: that round comes last, unsynced, with its largest H
    run.update({"fda/step": np.array([4, 5, 6, 7, 8, 9]), "fda/h": np.array([1.0, 2.0, 3.0, 4.0, 6.0, 5.0])})
    assert fda_rounds.rounds(run)[2] == dict(first=8, last=9, length=2, synced=False, step=9, h=5.0, h_max=6.0)


def test_theta_probe_runs_its_schedule_and_reports_the_first_round(capsys):
    """One rank, the bundled MNIST-5k: the first round ends in a sync, then the fixed Θ runs."""
    import theta_probe

    assert theta_probe.main(["--dataset", "mnist5k", "--partition", "iid", "--epochs", "0.5", "--first", "10",
                             "--theta", "1e9", "--eval-every", "20", "--targets", "0.99"]) == 0
    out = capsys.readouterr().out
    assert "first round 10 steps, then Θ=1e+09: 1 syncs" in out and "target 0.99: not reached" in out
    assert theta_probe.main(["--dataset", "mnist5k", "--partition", "iid", "--first", "10", "--theta", "1",
                             "--first-only"]) == 0
    assert "first round 10 steps: Var 0, " in capsys.readouterr().out  # one worker: nothing to disagree with
    with pytest.raises(SystemExit):
        theta_probe.parse(["--theta", "1", "--first-only"])  # no first round to report on


def test_an_overhead_goal_is_judged_only_when_the_ratios_stand_clear_of_the_noise():
    import fda_overhead
    # the 2026-12-02 idle run: baseline spread 6.7 %, both ratios well over 1.03
    assert fda_overhead.goal_verdict(1.143, 1.104, 1.03, 0.067) == "missed"
    assert fda_overhead.goal_verdict(1.01, 1.02, 1.03, 0.0) == "met"
    assert fda_overhead.goal_verdict(1.01, 1.05, 1.03, 0.0) == "borderline"
    # a drifting host (baseline 15.6-20.2 ms/step): a paired 0.993 says nothing about a 3 % goal
    assert fda_overhead.goal_verdict(0.810, 0.993, 1.03, 0.24) == "inconclusive"


def test_one_theta_for_every_target_is_named_or_ruled_out():
    import frontier_analysis

    def pt(setting, knob, target, steps, gb, reached=True):
        return dict(setting=setting, family="linearfda", auto=False, knob=knob, target=target, reached=reached,
                    steps=steps, gb=gb)
    pts = [  # "a": Θ=4 is cheapest at 0.8 but misses 0.85, which only Θ=1 reaches; Θ=1 costs 3x at 0.8
        pt("a", "Θ=1", 0.8, 300, 0.3), pt("a", "Θ=4", 0.8, 300, 0.1),
        pt("a", "Θ=1", 0.85, 500, 0.5), pt("a", "Θ=4", 0.85, 900, 0.2, reached=False),
        # "b": Θ=8 within 1.5x the GB and 1.1x the steps of the cheapest at both targets
        pt("b", "Θ=8", 0.8, 300, 0.12), pt("b", "Θ=16", 0.8, 300, 0.1),
        pt("b", "Θ=8", 0.85, 500, 0.2), pt("b", "Θ=16", 0.85, 900, 0.1, reached=False),
        pt("c", "Θ=8", 0.8, 300, 0.1)]  # one target: no row
    rows = {r[0]: r for r in frontier_analysis.target_blind(pts)}
    assert set(rows) == {"a", "b"}
    assert rows["a"][1:] == ["0.8: Θ=4, 0.85: Θ=1", "none"]
    assert rows["b"][1:] == ["0.8: Θ=16, 0.85: Θ=8", "Θ=8"]


def test_benchmarks_run_as_modules_from_the_repository_root():
    """``python -m benchmarks.NAME`` finds the scripts' siblings (``_common``, ``comm_cost``)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.frontier", "--help"], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "usage: frontier.py" in proc.stdout, proc.stderr[-2000:]


def test_default_outputs_and_inputs_are_in_benchmarks_results():
    """Every script's default output (and the committed CSVs its defaults read) lies in
    benchmarks/results/, the folder the committed outputs are in."""
    import fedqs_regime
    import frontier
    import scaling
    import time_to_accuracy
    from _common import RESULTS

    assert RESULTS == os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results")
    assert os.path.isfile(os.path.join(RESULTS, "frontier.csv"))
    prefixes = [comm_cost.parse([]).out, scaling.parse([]).out, frontier.parse([]).out]
    assert prefixes == [os.path.join(RESULTS, name) for name in ("comm_cost", "scaling", "frontier")]
    tta = time_to_accuracy.parse([])
    # the grids' CSV, and the --theta-fabric cadences' runs where they exist
    assert tta.frontier[0] == os.path.join(RESULTS, "frontier.csv") and tta.scaling == os.path.join(RESULTS, "scaling.csv")
    assert tta.frontier[1:] in ([], [os.path.join(RESULTS, "frontier_fabric.csv")])
    argv = fedqs_regime.semiasync_argv(fedqs_regime.parse([]), "dirichlet:0.1")
    assert argv[argv.index("--csv") + 1] == os.path.join(RESULTS, "fedqs_regime_dirichlet0.1.csv")
    assert len(fedqs_regime.table("dirichlet:0.1", list(fedqs_regime.METHODS))) > 2  # reads the committed CSV


def test_time_model_fabric_auto_takes_each_rows_own_cadence():
    """'linearfda auto (fabric)': in each row, the run of the (H, m) that --theta-fabric picks for
    that row's fabric and step; a row whose cadence never ran gets no verdict and is listed."""
    import frontier
    import time_to_accuracy as tta
    from cost_model import FABRICS, fabric_alpha_beta
    from fdahpc.theta import check_every, horizon_steps

    d, k, spe = 61706, 4, frontier.steps_per_epoch(4)
    assert spe == 469
    # 1 Gb/s, 10 ms, 10 ms steps: T_sync = 40 ms + 1.5·246 824 B·8 ns = 42.96 ms -> H = 43 (<= 10 % of compute);
    # the 8-byte state costs 40 ms, 80x 5 % of a step -> m = 81, capped at H
    assert tta.cadence(d, k, 1.0, 10_000.0, 0.01, "linearfda") == (43, 43)
    assert (43, 43) == (horizon_steps(spe, d, k, fabric=(1, 10_000, 10)), check_every(8, k, (1, 10_000, 10), 43))
    model = 2 * k * 4 * d
    base = dict(setting="s", model="m", workers=str(k), target="0.9", run_files="x", auto="True", family="linearfda")
    mine = dict(base, knob=f"auto (H {43 / spe:.9g} ep, every 43)", steps="301", gb=(3 * model + k * 7 * 8) / 1e9)
    other = dict(base, knob=f"auto (H {5 / spe:.9g} ep, every 1)", steps="200", gb=(20 * model + k * 200 * 8) / 1e9)
    sync = dict(base, family="synchronous", knob="", auto="False", steps="100", gb=100 * model / 1e9)
    assert tta.run_cadence(mine) == (43, 43) and tta.run_cadence(other) == (5, 1) and tta.run_cadence(sync) is None
    compute = {("m", f): 0.01 for f in ("fedavg", "linearfda", "synchronous")}
    ran = {("s", "linearfda", (43, 43)), ("s", "linearfda", (5, 1))}
    missing: dict = {}
    rows = tta.time_rows([mine, other, sync], {"m": d}, compute, [None], [None], fabrics=("cross-site-1g", "ethernet-10g"),
                         tuning_free=("linearfda auto (fabric)", "diloco+linear auto (fabric)"), ran=ran, missing=missing)
    a, b = fabric_alpha_beta(FABRICS["cross-site-1g"].gbps, FABRICS["cross-site-1g"].latency_us)
    t = lambda n: 4 * a + 1.5 * n * b if n >= 65536 else 2 * a + n * b  # noqa: E731  (small: a latency-bound tree)
    # on 10 Gb/s a 10 ms step asks for H = 1, m = 1: the synchronous limit, so Synchronous's run is the rule's there
    fast = [r for r in rows if r["fabric"] == "ethernet-10g" and r["method"] == "linearfda auto (fabric)"]
    assert len(fast) == 1 and fast[0]["cadence"] == (1, 1) and fast[0]["free_s"] == fast[0]["sync_s"]
    assert tta.rule_cadence(sync, "linearfda") == (1, 1) and tta.rule_cadence(sync, "diloco+linear") is None
    # ... under DiLoCo's outer step it is that rule at every step, never run here: no row, and said
    assert missing == {("s", "diloco+linear"): {(1, 1), (43, 43)}}
    # a cadence run at H = 1 made before the limit (it skipped syncs) is left out of the report
    assert tta.before_the_limit(dict(base, knob=f"auto (H {1 / spe:.9g} ep, every 1)"))
    assert not tta.before_the_limit(mine) and not tta.before_the_limit(sync)
    rows = [r for r in rows if r["fabric"] == "cross-site-1g" and r["method"] == "linearfda auto (fabric)"]
    # by hand: 301 steps, 3 syncs, 301/43 = 7 checks of 8 bytes
    assert len(rows) == 1
    assert rows[0]["free_s"] == pytest.approx(3.01 + 3 * t(4 * d) + 7 * t(8))
    assert rows[0]["tuned_s"] == pytest.approx(1.0 + 100 * t(4 * d))  # only Synchronous is tuned here
    # in hindsight: the best of every cadence run of the family in that row (here the rule's own:
    # the other cadence's 200 checks cost 8 s), never a run without a cadence
    assert 2.0 + 20 * t(4 * d) + 200 * t(8) > rows[0]["free_s"]
    assert rows[0]["hindsight_s"] == pytest.approx(rows[0]["free_s"])
    assert rows[0]["hindsight_cadence"] == (43, 43) and tta.horizon_ratios(rows) == "1 (1-1)"
    assert tta.horizon_ratios([dict(hindsight_cadence=(h, 1), cadence=(10, 1)) for h in (1, 5, 40)]) == "0.5 (0.1-4)"
    quick = dict(base, knob="auto (1 ep)", steps="100", gb=(model + k * 4) / 1e9)  # faster, but no cadence
    again = tta.time_rows([mine, other, sync, quick], {"m": d}, compute, [None], [None], fabrics=("cross-site-1g",),
                          tuning_free=("linearfda auto (fabric)",), ran=ran)
    assert again[0]["hindsight_s"] == pytest.approx(rows[0]["free_s"])
    # the best of all the family's runs counts it (what no Θ rule beats): 100 steps, 1 sync, one 4-byte reduction
    assert again[0]["any_s"] == pytest.approx(1.0 + t(4 * d) + t(4)) and again[0]["any_s"] < again[0]["hindsight_s"]
    # a rule under LinearFDA's trigger (DiLoCo's outer step, rounds ended by the variance) is priced like it
    assert tta.state_bytes("diloco+linear") == 8 and tta.cadence(d, k, 1.0, 10_000.0, 0.01, "diloco+linear") == (43, 43)


def test_comm_cost_resume_reuses_a_finished_run_whose_csv_row_was_rewritten(tmp_path, capsys):
    """--resume: a finished run file of exactly the job's flags is reused even when its sweep's
    CSV no longer lists it (a later sweep in the same folder rewrote the CSV): its own wall time,
    others' share unknown; a run of other flags is not."""
    import comm_cost

    argv = ["--strategies", "fedavg:tau=5", "--workers", "2", "--partitions", "iid", "--skip", "", "--target", "0.5",
            "--max-epochs", "0.1", "--seeds", "0", "--eval-every", "5", "--dataset", "mnist5k",
            "--workdir", str(tmp_path / "runs"), "--out", str(tmp_path / "cc")]
    args = comm_cost.parse(argv)
    jobs = comm_cost.plan(args)
    assert len(jobs) == 1
    rows, failed, reused = comm_cost.run_jobs(jobs, args, str(tmp_path / "first.csv"))
    assert not failed and reused == 0
    (tmp_path / "first.csv").write_text("")  # the row is gone, the run file stays
    args = comm_cost.parse(argv + ["--resume"])
    again, failed, reused = comm_cost.run_jobs(jobs, args, str(tmp_path / "first.csv"))
    assert not failed and reused == 1 and "reused from an earlier sweep" in capsys.readouterr().out
    run = comm_cost.read_run(str(tmp_path / "runs" / jobs[0].file_name))
    assert again[0]["job_seconds"] == pytest.approx(float(f"{float(run['wall_seconds']):.1f}"))
    assert math.isnan(again[0]["others_cpu"]) and again[0]["steps"] == rows[0]["steps"]
    other = comm_cost.plan(comm_cost.parse([*argv[:1], "fedavg:tau=7", *argv[2:], "--resume"]))[0]
    assert comm_cost._reusable(None, other, str(tmp_path / "runs" / jobs[0].file_name)) is None


def test_shakespeare_cadence_runs_round_trip_their_horizon_and_read_as_the_time_models_cadences():
    """shakespeare.py gives a cadence's horizon as epochs; the training code rounds them back to
    the same H, and the time report reads the knob as that (H, m)."""
    import shakespeare
    import time_to_accuracy as tta
    from fdahpc.theta import horizon_steps

    d, k, spe = 209_088, 4, 26_654
    pairs = shakespeare.fabric_cadences(d, k, [5, 20, 100])
    # fast fabrics: H = 1, Synchronous's run, so not among them; across sites long rounds
    assert pairs == sorted(set(pairs)) and min(pairs)[0] > 1 and max(pairs)[0] > 50
    assert (1, 1) in {tta.cadence(d, k, 100, 2, 0.1, "linearfda")}
    for h, m in pairs:
        label, (family, knob, flags) = shakespeare.cadence_method(h, m, spe)
        epochs = float(flags[flags.index("--theta-round-epochs") + 1])
        assert horizon_steps(spe, d, k, epochs) == h and flags[flags.index("--fda-every") + 1] == str(m)
        assert tta.run_cadence(dict(knob=knob, workers=str(k))) == (h, m) and family == "linearfda"
        assert tta.run_label(dict(knob=knob, workers=str(k), family=family)) == f"linearfda auto (H {h}, m {m})"
    # the same cadence under DiLoCo's outer step: its strategy and trigger, read by the report as that family's
    h, m = pairs[0]
    label, (family, knob, flags) = shakespeare.cadence_method(h, m, spe, "diloco+linear")
    assert label == f"diloco+linear auto H={h} m={m}" and family == "diloco+linear"
    assert flags[:4] == ["--strategy", "diloco", "--trigger", "linear"] and "--theta-round-epochs" in flags
    assert tta.rule_cadence(dict(knob=knob, workers=str(k), family=family), "diloco+linear") == (h, m)
    with pytest.raises(SystemExit) as exc:
        shakespeare.parse(["--auto-cadence-family", "fedavg"])
    assert exc.value.code == 2


@pytest.mark.skipif(not __import__("fdahpc.data.shakespeare", fromlist=["corpus_path"]).corpus_path(None).is_file(),
                    reason="Shakespeare corpus not fetched (python -m fdahpc.data fetch shakespeare)")
def test_shakespeare_frontier_writes_frontier_points_and_reuses_its_runs(tmp_path, capsys):
    """Two real 2-rank GPT runs: the CSV holds frontier.py's columns, steps and bytes at the first
    evaluation at or above each target (bytes = syncs · 2K · 4d for Synchronous), an unreached
    target as not reached; a second call reruns nothing and keeps the points."""
    import csv

    import shakespeare

    out = tmp_path / "gpt"
    argv = ["--ranks", "2", "--max-steps", "20", "--eval-every", "10", "--eval-samples", "64", "--targets", "0.01,0.99",
            "--methods", "synchronous,fedavg tau=10", "--out", str(out), "--workdir", str(tmp_path / "runs")]
    assert shakespeare.main(argv) == 0
    first = capsys.readouterr().out
    assert first.count("shakespeare: ") == 2  # each method ran once (Synchronous first, then reused)
    rows = {(r["family"], r["target"]): r for r in csv.DictReader(open(f"{out}.csv"))}
    sync, fedavg = rows["synchronous", "0.01"], rows["fedavg", "0.01"]
    assert sync["setting"] == "gpt/roles@2" and fedavg["knob"] == "10 steps" and sync["reached"] == "True"
    assert int(sync["steps"]) == 10 and math.isclose(float(sync["gb"]), 10 * 2 * 2 * 4 * 209_088 / 1e9)
    assert rows["synchronous", "0.99"]["reached"] == "False" and float(rows["synchronous", "0.99"]["steps"]) == 20
    assert shakespeare.main(argv) == 0
    assert "shakespeare: " not in capsys.readouterr().out  # every run file reused
    assert {(r["family"], r["target"]) for r in csv.DictReader(open(f"{out}.csv"))} == set(rows)
    with pytest.raises(SystemExit) as exc:
        shakespeare.parse(["--ranks", "1"])
    assert exc.value.code == 2


def test_a_point_names_its_machines_and_says_when_it_pairs_two():
    import json

    import frontier_analysis

    def run(host, commit, wall):
        record = {"git_commit": commit, "torch": "2.13.0+cpu", "numpy": "2.4.6",
                  "ranks": [{"host": host, "cpu_model": "AMD EPYC", "torch_cpu_capability": "AVX512"}]}
        return {"provenance": json.dumps([record]), "wall_seconds": wall}

    one = frontier_analysis.provenance_of([run("a", "0123456789abcdef+dirty", 10.0),
                                           run("a", "0123456789abcdef", 30.0)])
    assert one == dict(commit="0123456789ab+dirty;0123456789ab", machine="a AMD EPYC AVX512", torch="2.13.0+cpu",
                       numpy="2.4.6", wall_seconds="20.0")
    two = frontier_analysis.provenance_of([run("a", "c", 1.0), run("b", "c", 2.0), {"wall_seconds": 3.0}])
    assert two["machine"] == "a AMD EPYC AVX512;b AMD EPYC AVX512" and two["wall_seconds"] == "2.0"
