"""benchmarks/regret.py: the regret of the untuned defaults, on row sets small enough to work by hand."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def _row(model, fabric, regret):
    return dict(size=1, step=None, fabric=fabric, setting="s", target=0.9, model=model, best="x", best_s=1.0,
                regret=regret)


def test_summary_counts_median_p90_max_failed_and_within_by_hand():
    import regret as rg

    # ratios 1.0, 1.1, 1.2, 1.6, 3.0; one failed row, one not run: 6 rows ran, 7 in all
    got = [1.0, 1.1, 1.2, 1.6, 3.0, rg.FAILED, rg.NOT_RUN]
    rows = [_row("m", "f", {"a": x}) for x in got]
    assert rg.summary(rows, "a") == [7, "1.20x", "3.00x", "3.00x", 1, 1, "2/6", "3/6", "4/6"]
    # p90 by nearest rank: the ceil(0.9 n)-th smallest; an even count's median is the middle two's mean
    assert rg.nearest_rank([5.0, 1.0, 2.0, 3.0], 0.9) == 5.0 and rg.nearest_rank(list(range(1, 21)), 0.9) == 18
    assert rg.summary(rows[:4], "a")[1] == "1.15x"
    assert rg.summary([_row("m", "f", {"a": rg.NOT_RUN})], "a") == [1, "-", "-", "-", 0, 1, "0/0", "0/0", "0/0"]
    # groups: per model, per fabric, then all
    rows = [_row("m", "f", {"a": 1.0}), _row("n", "f", {"a": 2.0}), _row("n", "g", {"a": rg.FAILED})]
    table = rg.summary_table(rows, ["a"])
    assert [line[0] for line in table] == ["model m", "model n", "fabric f", "fabric g", "all"]
    assert table[1][2:] == [2, "2.00x", "2.00x", "2.00x", 1, 0, "0/2", "0/2", "1/2"]
    assert table[-1][2:] == [3, "1.50x", "2.00x", "2.00x", 1, 0, "1/3", "1/3", "2/3"]


def test_regret_rows_divide_by_the_rows_fastest_and_tell_failed_from_not_run():
    import regret as rg

    base = dict(size=1, step=None, fabric="f", setting="s", target=0.9, model="m", fastest="fedavg 2 ep", fastest_s=4.0)
    report = [dict(base, method="synchronous", free_s=6.0), dict(base, method="fedavg 1 ep", free_s=None),
              dict(base, method="diloco H=500", free_s=None)]
    every_run = [dict(setting="s", target="0.9", family="fedavg", knob="1 ep", auto="False")]
    (row,) = rg.regret_rows(report, every_run, ["synchronous", "fedavg 1 ep", "diloco H=500",
                                                "linearfda auto (fabric)"])
    assert row["regret"] == {"synchronous": 1.5, "fedavg 1 ep": rg.FAILED, "diloco H=500": rg.NOT_RUN,
                             "linearfda auto (fabric)": rg.NOT_RUN}
    assert row["best"] == "fedavg 2 ep" and row["best_s"] == 4.0


def test_regret_end_to_end_on_a_tiny_frontier_and_an_unknown_default(tmp_path, capsys):
    import regret as rg

    scaling = tmp_path / "scaling.csv"
    scaling.write_text("model,strategy,part,compute_seconds\nm,fedavg,projected,0.01\n")
    d, k = 100_000, 4
    model = 2 * k * 4 * d
    head = "setting,model,workers,target,family,knob,auto,reached,steps,gb,run_files\n"
    frontier = tmp_path / "frontier.csv"
    frontier.write_text(head + f"s@4,m,{k},0.5,synchronous,,False,True,100,{100 * model / 1e9},x\n"
                        f"s@4,m,{k},0.5,fedavg,1 ep,False,True,300,{3 * model / 1e9},y\n"
                        f"s@4,m,{k},0.5,fedavg,2 ep,False,False,900,{9 * model / 1e9},z\n")
    args = ["--frontier", str(frontier), "--scaling", str(scaling), "--params", f"m={d}", "--step-ms", "10",
            "--model-size", "actual", "--out", str(tmp_path / "r")]
    assert rg.main(args + ["--default", "fedavg 2 ep"]) == 0
    text = (tmp_path / "r.txt").read_text()
    assert text.splitlines()[0].startswith("python benchmarks/regret.py --frontier") and "provisional" in text
    rows = (tmp_path / "r_rows.csv").read_text().splitlines()
    assert len(rows) == 4 and rows[0].endswith("fedavg 2 ep")  # 3 fabrics; fedavg 2 ep ran and missed
    assert all(r.endswith(",failed") for r in rows[1:])
    capsys.readouterr()
    assert rg.main(args + ["--default", "fedavg 9 ep"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--default 'fedavg 9 ep'" in err
    with pytest.raises(SystemExit) as exc:
        rg.parse(["--default", " "])
    assert exc.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_causes_tell_a_short_budget_from_rounds_too_long():
    import regret as rg

    def run(family, knob, reached, steps, acc="0.7"):
        return dict(setting="s@4", target="0.8", family=family, knob=knob, reached=reached, steps=steps,
                    final_accuracy=acc)

    sync = run("synchronous", "", "True", "100")
    long_h, short_h = run("linearfda", "auto (H 50 steps, every 1)", "False", "1000", "0.74"), \
        run("linearfda", "auto (H 5 steps, every 1)", "True", "300")
    label = "linearfda auto (fabric)"
    report = [dict(method=label, free_s=None, sync_s=1.0, setting="s@4", target=0.8, cadence=(50, 1))] * 2
    (line,) = rg.causes(report, [sync, long_h, short_h], label)
    assert line == ["s@4", "0.8", "H 50, m 1", 2, 1000, "0.74", 100, "10.0", "rounds too long: H <= 5 reached"]
    # a run stopped before twice Synchronous's steps has no verdict; no shorter cadence that reached: said so
    (line,) = rg.causes(report, [sync, dict(long_h, steps="150"), short_h], label)
    assert line[-1] == "budget < 2x Synchronous's" and line[-2] == "1.5"
    (line,) = rg.causes(report, [sync, long_h, dict(short_h, reached="False")], label)
    assert line[-1] == "no cadence reached"
    # rows where Synchronous did not reach the target, or the rule reached it, are no failure of the default
    assert rg.causes([dict(report[0], sync_s=None)], [sync, long_h], label) == []
    assert rg.causes([dict(report[0], free_s=2.0)], [sync, long_h], label) == []
