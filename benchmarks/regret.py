"""Regret of the untuned defaults: each one's modelled time to the target over the fastest run's.

    python benchmarks/regret.py --frontier benchmarks/results/frontier.csv,benchmarks/results/frontier_fabric.csv,\
benchmarks/results/frontier_gpt.csv --params gpt=209088

Rows are ``time_to_accuracy.py``'s per-row report's: every (model size, step time, fabric,
setting, target) it prices, with the same flags and defaults (``--frontier``, ``--scaling``,
``--step-ms``, ``--model-size``, ``--collective``, ``--params``) and the same time model. In a
row, a method's regret is its run's modelled time to the target over the fastest modelled time
of all the row's runs (every family, tuned or not). The methods are the untuned defaults, each
counted only as itself: ``linearfda auto (fabric)`` (tuning-free FDA: the run of the cadence
the row's fabric picks), ``diloco H=500`` (DiLoCo's preset), ``fedavg 1 ep``, ``synchronous``,
``qsr`` where a CSV has it, and each ``--default LABEL``.

A row where a method ran but no run of it reached the target is 'failed' for it (left out of
its ratios); a row where it has no run at all is 'not run' (left out of everything). Per model,
per fabric and overall, for each default: rows (the group's), median (of an even count: the
mean of the middle two), p90 (nearest rank: the ⌈0.9·n⌉-th smallest of the n ratios), max,
failed, not run, and the rows within 1.15×, 1.5× and 2× out of the rows it ran in (reached or
failed; a failed row is within nothing). Writes the summary to ``benchmarks/results/regret.txt``
(first line: the command) and the per-row table to ``benchmarks/results/regret_rows.csv``.

The summary ends with the causes of tuning-free FDA's failures where Synchronous reached the
target: one line per (setting, target, the cadence the rows' fabrics picked), with its rows,
the cadence run's steps (its budget) and final accuracy, Synchronous's steps to the target,
and the cause: ``budget`` when the run's steps are under twice Synchronous's (the run ended
before a fair horizon, no verdict), ``rounds too long`` when a shorter cadence of the rule
reached the target in that setting (the longest such H is named), else ``no cadence reached``.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shlex
import statistics
import sys
from io import StringIO

import _common  # noqa: F401
from _common import RESULTS, print_table
import time_to_accuracy as tta

#: The untuned defaults every report counts (``qsr`` only where a CSV has a run of it).
DEFAULTS = ("linearfda" + tta.FABRIC_AUTO, tta.DILOCO_DEFAULT, "fedavg 1 ep", "synchronous", "qsr")
#: The regret bounds the summary counts rows within.
WITHIN = (1.15, 1.5, 2.0)
FAILED, NOT_RUN = "failed", "not run"
def provisional(every_run: list[dict]) -> str | None:
    """A note when some rows come from runs made before evaluations scored the held model: their
    CSV rows carry no ``commit`` (frontier_analysis.PROVENANCE came later still), and they scored
    the plain mean of the local models, which favours DiLoCo and FedAdam."""
    old = sum(not r.get("commit") for r in every_run)
    if not old:
        return None
    return (f"note: {old} of {len(every_run)} CSV rows come from runs made before evaluations scored the held model "
            "(no commit recorded): those scored the plain mean of the local models, which favours DiLoCo and FedAdam; "
            "their figures are provisional")


def parse(argv=None) -> argparse.Namespace:
    # usage suppressed: a bad flag is one line on stderr (the problem and its fix), exit 2
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=argparse.SUPPRESS)
    tta.add_pricing_flags(p)
    p.add_argument("--default", action="append", default=[], metavar="LABEL",
                   help="one more untuned default, a run label as time_to_accuracy.py prints it ('fedavg 2 ep'); "
                        "repeat for several")
    p.add_argument("--markdown", action="store_true",
                   help="print only the README's table: per model, each default's median, p90, max and failed rows")
    p.add_argument("--out", default=os.path.join(RESULTS, "regret"),
                   help="output prefix: PREFIX.txt (the summary) and PREFIX_rows.csv (default: %(default)s)")
    args = p.parse_args(argv)
    tta.check_pricing_flags(p, args)
    args.default = [x.strip() for x in args.default]
    if not all(args.default):
        p.error("--default: empty label; give a run label such as 'fedavg 2 ep'")
    return args


def nearest_rank(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank: the ⌈q·n⌉-th smallest value (the largest at q = 1)."""
    x = sorted(values)
    return x[max(1, math.ceil(q * len(x))) - 1]


def regret_rows(report: list[dict], every_run: list[dict], labels: list[str]) -> list[dict]:
    """One dict per row of ``report`` (``tta.time_rows`` with ``labels`` as its tuning-free methods):
    the row's key, its fastest run and time, and per label a regret, :data:`FAILED` or :data:`NOT_RUN`."""
    tried = {(r["setting"], float(r["target"]), tta.run_label(r)) for r in every_run}
    out: dict[tuple, dict] = {}
    for r in report:
        key = (r["size"], r["step"], r["fabric"], r["setting"], r["target"])
        row = out.setdefault(key, dict(size=r["size"], step=r["step"], fabric=r["fabric"], setting=r["setting"],
                                       target=r["target"], model=r["model"], best=r["fastest"], best_s=r["fastest_s"],
                                       regret={}))
        label = r["method"]
        if r["free_s"] is not None:
            row["regret"][label] = r["free_s"] / r["fastest_s"]
        elif label.endswith(tta.FABRIC_AUTO):  # time_rows emits such a row only where the cadence ran
            row["regret"][label] = FAILED
        else:
            row["regret"][label] = FAILED if (r["setting"], r["target"], label) in tried else NOT_RUN
    for row in out.values():  # a fabric label's row that time_rows left out: its cadence never ran
        for label in labels:
            row["regret"].setdefault(label, NOT_RUN)
    return list(out.values())


def summary(rows: list[dict], label: str) -> list:
    """[rows, median, p90, max, failed, not run, within 1.15x, 1.5x, 2x] of ``label`` over ``rows``."""
    got = [r["regret"][label] for r in rows]
    ratios = [x for x in got if not isinstance(x, str)]
    failed, not_run = got.count(FAILED), got.count(NOT_RUN)
    ran = len(ratios) + failed
    stat = (lambda f: "-") if not ratios else (lambda f: f"{f(ratios):.2f}x")  # noqa: E731
    return [len(rows), stat(statistics.median), stat(lambda x: nearest_rank(x, 0.9)), stat(max), failed, not_run,
            *(f"{sum(x <= w for x in ratios)}/{ran}" for w in WITHIN)]


def summary_table(rows: list[dict], labels: list[str]) -> list[list]:
    """The summary's lines: per model, per fabric, then overall, each default's :func:`summary`."""
    groups = [(f"model {m}", [r for r in rows if r["model"] == m]) for m in dict.fromkeys(r["model"] for r in rows)]
    groups += [(f"fabric {f}", [r for r in rows if r["fabric"] == f]) for f in dict.fromkeys(r["fabric"] for r in rows)]
    groups.append(("all", rows))
    return [[name, label, *summary(g, label)] for name, g in groups for label in labels]


def markdown(rows: list[dict], labels: list[str]) -> str:
    """The README's table, like for like: per model, over the rows where every default that ran
    on that model ran (its common rows), each default's median, p90 and max regret and its
    failed rows."""
    out = ["| workload (common rows) | default | median | p90 | max | failed |", "|---|---|---|---|---|---|"]
    for model in dict.fromkeys(r["model"] for r in rows):
        group = [r for r in rows if r["model"] == model]
        present = [lb for lb in labels if any(r["regret"][lb] != NOT_RUN for r in group)]
        common = [r for r in group if all(r["regret"][lb] != NOT_RUN for lb in present)]
        for label in present if common else ():
            _, median, p90, worst, failed, *_ = summary(common, label)
            out.append(f"| {model} ({len(common)}) | {label} | {median} | {p90} | {worst} | {failed} |")
    return "\n".join(out)


#: A run whose steps are under this multiple of Synchronous's steps to the target ended too early to fail.
FAIR_BUDGET = 2.0


def causes(report: list[dict], every_run: list[dict], label: str) -> list[list]:
    """Why ``label`` (a ``FAMILY auto (fabric)`` default) failed where Synchronous reached: one
    line per (setting, target, cadence) of the report's rows where it failed and Synchronous's
    run reached the target (see the module doc)."""
    family = label[:-len(tta.FABRIC_AUTO)]
    by_case: dict[tuple, list[dict]] = {}
    for r in every_run:
        by_case.setdefault((r["setting"], float(r["target"])), []).append(r)
    failed: dict[tuple, int] = {}
    for r in report:
        if r["method"] == label and r["free_s"] is None and r["sync_s"] is not None:
            key = (r["setting"], r["target"], r["cadence"])
            failed[key] = failed.get(key, 0) + 1
    out = []
    for (setting, target, cad), count in failed.items():
        runs = by_case.get((setting, target), [])
        own = [r for r in runs if tta.rule_cadence(r, family) == cad]
        sync = min((int(r["steps"]) for r in runs if r["family"] == "synchronous" and r["reached"] == "True"),
                   default=None)
        if not own or sync is None:
            continue
        run = own[0]
        shorter = (tta.rule_cadence(r, family) for r in runs if r["family"] == family and r["reached"] == "True")
        reached = [c[0] for c in shorter if c and c[0] < cad[0]]
        budget = int(run["steps"])
        cause = (f"budget < {FAIR_BUDGET:g}x Synchronous's" if budget < FAIR_BUDGET * sync else
                 f"rounds too long: H <= {max(reached)} reached" if reached else "no cadence reached")
        out.append([setting, f"{target:g}", f"H {cad[0]}, m {cad[1]}", count, budget, run.get("final_accuracy", "-"),
                    sync, f"{budget / sync:.1f}", cause])
    return sorted(out, key=lambda x: (x[0], x[1], x[2]))


def write_rows(path: str, rows: list[dict], labels: list[str]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["d", "step", "fabric", "setting", "target", "model", "best run", "best s", *labels])
        for r in rows:
            w.writerow([r["size"], tta.step_name(r["step"]), r["fabric"], r["setting"], f"{r['target']:g}", r["model"],
                        r["best"], f"{r['best_s']:.3f}",
                        *(x if isinstance(x, str) else f"{x:.4f}" for x in (r["regret"][lb] for lb in labels))])


def main(argv=None) -> int:
    args = parse(argv)
    command = shlex.join(["python", "benchmarks/regret.py", *(sys.argv[1:] if argv is None else argv)])
    notes: list[str] = []
    every_run, runs, ran, params = tta.load_runs(args.frontier, tuple(DEFAULTS + tuple(args.default)), args.known,
                                                 say=notes.append)
    known = {tta.run_label(r) for r in every_run}
    for label in args.default:
        family = label[:-len(tta.FABRIC_AUTO)] if label.endswith(tta.FABRIC_AUTO) else None
        fabric = family is not None and any(r["family"] == family for r in every_run)
        if label not in known and not fabric:
            print(f"--default {label!r}: no run in the CSVs has that label; give one as time_to_accuracy.py prints it, "
                  f"e.g. 'fedavg 2 ep'", file=sys.stderr)
            return 2
    labels = [x for x in dict.fromkeys((*DEFAULTS, *args.default)) if x != "qsr" or x in known]
    if "qsr" not in labels:
        notes.append("note: no run labelled 'qsr' in the CSVs: QSR is not counted")
    report = tta.time_rows(runs, params, tta.compute_per_step(args.scaling), args.sizes, args.steps,
                           collective=args.collective, tuning_free=tuple(labels), ran=ran)
    rows = regret_rows(report, every_run, labels)
    if args.markdown:
        print(markdown(rows, labels))
        return 0
    head = ["group", "default", "rows", "median", "p90", "max", "failed", "not run",
            *(f"<= {w:g}x" for w in WITHIN)]
    lines = [command, *filter(None, [provisional(every_run)]), *notes,
             f"regret = a default's modelled time to the row's target / the fastest modelled time of all the row's "
             f"runs; {len(rows)} rows (d, step, fabric, setting, target) of time_to_accuracy.py's per-row report",
             "median: of an even count, the mean of the middle two; p90: nearest rank (the ceil(0.9 n)-th smallest); "
             "failed: it ran, no run reached the target; not run: no run of it in the row's setting and target",
             "within: rows at or under the bound / rows it ran in (reached or failed)", ""]
    buf = StringIO()
    print_table(head, summary_table(rows, labels), file=buf)
    free = next((lb for lb in labels if lb.endswith(tta.FABRIC_AUTO)), None)
    why = causes(report, every_run, free) if free else []
    if why:
        buf.write(f"\nwhy {free} failed where Synchronous reached the target (one line per setting, target and "
                  f"cadence; budget: the run's steps; x: budget / Synchronous's steps):\n")
        print_table(["setting", "target", "cadence", "rows", "budget", "final acc", "sync steps", "x", "cause"], why,
                    file=buf)
    text = "\n".join(lines) + buf.getvalue()
    print(text, end="" if text.endswith("\n") else "\n")
    with open(args.out + ".txt", "w", encoding="utf-8") as fh:
        fh.write(text if text.endswith("\n") else text + "\n")
    write_rows(args.out + "_rows.csv", rows, labels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
