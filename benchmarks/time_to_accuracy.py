"""Time to accuracy on modelled fabrics, from the frontier's measured runs.

    python benchmarks/time_to_accuracy.py        # reads benchmarks/frontier.csv and benchmarks/scaling.csv
    python benchmarks/time_to_accuracy.py --markdown   # the README's regime table, from the same CSVs

For every run of ``frontier.csv`` that reached its target: the wall time it would take on K
ranks joined by each fabric of :data:`cost_model.FABRICS` (10 Gb/s Ethernet, 100 Gb/s
InfiniBand, a 1 Gb/s link between sites; α–β, latencies stated there), from what was
measured:

    time = steps · compute + syncs · T(4d, K) + [FDA] steps · T(state, K)

- steps: the run's local steps to the target; syncs: its model AllReduces to the target,
  recovered from its measured bytes to the target in the FDA paper's convention
  (``bytes = syncs · 2 · K · 4d + monitored steps · K · state``; ``--theta auto`` leaves its
  first round unmonitored and adds one 4-byte reduction);
- compute: this CPU's single-threaded time of one local step plus the strategy's own work
  (FDA's drift, dots, sketch), as ``scaling.py`` measured it (``scaling.csv``);
- T: the α–β AllReduce time of :func:`cost_model.fabric_allreduce_seconds`.

Printed per setting and target: each fabric's fastest run of each family and which family
is fastest, with its lead. Compute is this machine's CPU; on a GPU it shrinks and the
communication weighs more (``scaling.py``'s break-even column says by how much).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys

import _common  # noqa: F401
from _common import REPO_ROOT, print_report
from cost_model import FABRICS, fabric_allreduce_seconds
import frontier
from frontier import FDA


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frontier", default=os.path.join(REPO_ROOT, "benchmarks", "frontier.csv"))
    p.add_argument("--scaling", default=os.path.join(REPO_ROOT, "benchmarks", "scaling.csv"))
    p.add_argument("--markdown", action="store_true",
                   help="print only the README's regime table (frontier's per-regime rows beside the modelled times)")
    return p.parse_args(argv)


def compute_per_step(path: str) -> dict[tuple[str, str], float]:
    """(model, strategy) → CPU seconds of a local step plus the strategy's own work (scaling.py's projection rows)."""
    with open(path, newline="") as fh:
        return {(r["model"], r["strategy"]): float(r["compute_seconds"]) for r in csv.DictReader(fh)
                if r["part"] == "projected" and r["compute_seconds"]}


def model_params(model: str) -> int:
    """Trainable parameters of ``model`` on 28×28 grey images, 10 classes (the frontier's FashionMNIST)."""
    from fdahpc.models import build_model

    return sum(p.numel() for p in build_model(model, 1, 28, 10).parameters() if p.requires_grad)


def state_bytes(family: str) -> int:
    """What FDA's trigger reduces every step: LinearFDA 8 bytes, SketchFDA 4·(1 + l·m)."""
    from fdahpc.options import SKETCH_COLS, SKETCH_ROWS

    if family == "linearfda":
        return 8
    if family == "sketchfda":
        return 4 * (1 + SKETCH_ROWS * SKETCH_COLS)
    return 0


#: The frontier's training set (FashionMNIST) and batch: an epoch is ceil(60 000 / K / 32) steps per rank.
TRAIN_SAMPLES, BATCH = 60_000, 32


def monitored_steps(row: dict) -> tuple[int, int]:
    """(steps that reduced FDA's state, extra monitoring bytes per rank): every step, except
    that ``--theta auto-once`` runs its first round (``auto-once (E ep)``) unmonitored and then
    reduces 4 bytes once."""
    steps = float(row["steps"])  # a median over seeds may be fractional
    if row["auto"] != "True" or row["knob"].startswith("auto (H "):
        return steps, 0  # the per-round rule (auto (H E ep)) monitors every step; at lag 0 nothing more
    epochs = float(row["knob"].split("(")[1].split()[0])
    calibration = round(epochs * math.ceil(TRAIN_SAMPLES / int(row["workers"]) / BATCH))
    return max(0, steps - calibration), 4


def seconds(row: dict, d: int, compute: float, fabric: str) -> tuple[float, int]:
    """(wall seconds to the target on ``fabric``, model AllReduces to the target)."""
    k, steps, total = int(row["workers"]), float(row["steps"]), float(row["gb"]) * 1e9
    state = state_bytes(row["family"])
    monitored, extra = monitored_steps(row) if state else (0, 0)
    syncs = round((total - k * (monitored * state + extra)) / (2 * k * 4 * d))
    if syncs < 0:
        raise ValueError(f"{row['run_files']}: {total:.0f} bytes to the target cannot hold {monitored} monitored steps")
    comm = syncs * fabric_allreduce_seconds(4 * d, k, fabric)
    if state:
        comm += monitored * fabric_allreduce_seconds(state, k, fabric) + fabric_allreduce_seconds(extra, k, fabric)
    return steps * compute + comm, syncs


def fastest(rows: list[dict], d: int, compute: dict[tuple[str, str], float]) -> tuple[list[list], list[str], list[str]]:
    """One setting and target's runs priced on every fabric: (the per-run table, the fastest
    family per fabric with its lead over the runner-up, FedAvg's fastest time over FDA's per fabric)."""
    table, winners, fda_over_avg = [], [], []
    for fabric in FABRICS:
        best: dict[str, tuple[float, dict, int]] = {}
        for r in rows:
            c = compute[r["model"], r["family"].partition("-")[0]]  # fedavg-sgd: FedAvg's step (Adam's, measured)
            t, syncs = seconds(r, d, c, fabric)
            if r["family"] not in best or t < best[r["family"]][0]:
                best[r["family"]] = (t, r, syncs)
        order = sorted(best.items(), key=lambda kv: kv[1][0])
        win, (t_win, _, _) = order[0]
        ahead = f"{order[1][1][0] / t_win:.2f}x ahead of {order[1][0]}" if len(order) > 1 else None
        lead = f"fastest, {ahead}" if ahead else "fastest (the only family that reached the target)"
        for family, (t, r, syncs) in sorted(best.items()):
            name = f"{family} {r['knob']}".strip()  # an auto run's knob names it: "auto (1 ep)"
            table.append([fabric, name, r["steps"], syncs, f"{t:.1f}",
                          lead if family == win else f"{t / t_win:.2f}x the fastest"])
        winners.append(f"{win} ({order[1][1][0] / t_win:.2f}x)" if len(order) > 1 else f"{win} (alone)")
        fda = min((v[0] for f, v in best.items() if f in FDA), default=None)
        fda_over_avg.append(f"{best['fedavg'][0] / fda:.2f}x" if fda and "fedavg" in best else "-")
    return table, winners, fda_over_avg


def regime_name(setting: str) -> str:
    """'lenet5/classes:2@8/sgd:0.1' -> 'classes:2, K=8, SGD lr 0.1' (the model named unless LeNet-5; no
    optimizer: the presets' Adam 1e-3, named without its rate)."""
    s = frontier.parse_setting(setting)
    opt = {"sgd": "SGD", "momentum": "momentum", "adam": "Adam"}.get(s.optimizer or "adam", s.optimizer)
    rate = f" lr {s.lr:g}" if s.lr is not None and opt != "Adam" else ""
    return f"{s.partition}, K={s.workers}, {opt}{rate}" + ("" if s.model == "lenet5" else f", {s.model}")


def markdown(summaries: dict[tuple[str, float], tuple[list[str], list[str]]], points: list[dict]) -> list[str]:
    """The README's regime table: frontier's per-regime row (fewest steps, each family's lead
    in bytes with its pair and seeds, verdict, the default auto run's check against the cheapest
    tuned Θ) beside the modelled time (FedAvg/FDA, fastest family)."""
    short = {"ethernet-10g": "10G", "infiniband-100g": "IB", "cross-site-1g": "1G"}
    head = ["regime", "target", "fewest steps FDA / FedAvg", "lead in bytes FDA / FedAvg (pair, seeds)", "verdict",
            "LinearFDA auto-once (1 ep) / cheapest tuned Θ", "FedAvg/FDA time " + " / ".join(short[f] for f in FABRICS),
            "fastest on " + " / ".join(short[f] for f in FABRICS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    auto = "linearfda auto-once (1 ep) "  # frontier.read_points names the one-calibration rule so
    for setting, target, steps, leads, verdict, _, _, checks in frontier.regimes(points):
        check = next((c[len(auto):] for c in checks.split("; ") if c.startswith(auto)), "-")
        winners, ratio = summaries.get((setting, float(target)), (["-"] * len(FABRICS), ["-"] * len(FABRICS)))
        fastest_ = " / ".join(w.partition(" (")[0] for w in winners)
        lines.append(f"| {regime_name(setting)} | {target} | {steps} | {leads} | {verdict} | {check} | {' / '.join(ratio)} "
                     f"| {fastest_} |")
    return lines


def main(argv=None) -> int:
    args = parse(argv)
    compute = compute_per_step(args.scaling)
    with open(args.frontier, newline="") as fh:
        runs = [r for r in csv.DictReader(fh) if r["reached"] == "True"]
    params: dict[str, int] = {}
    by_case: dict[tuple[str, str], list[dict]] = {}
    summaries: dict[tuple[str, float], tuple[list[str], list[str]]] = {}
    for r in runs:
        by_case.setdefault((r["setting"], r["target"]), []).append(r)
    for (setting, target), rows in by_case.items():
        d = params.setdefault(rows[0]["model"], model_params(rows[0]["model"]))
        table, winners, fda_over_avg = fastest(rows, d, compute)
        summaries[setting, float(target)] = (winners, fda_over_avg)
        if not args.markdown:
            print_report(f"{setting}, target {target}: modelled wall time to the target (K ranks, d = {d:,})",
                         ["fabric", "family's fastest run", "steps", "model syncs", "seconds", ""], table,
                         "model syncs: model AllReduces to the target, from the run's measured bytes; seconds: modelled")
    if args.markdown:
        print("\n".join(markdown(summaries, frontier.read_points([args.frontier]))))
        return 0
    names = list(FABRICS)
    print_report("Fastest family per setting, target and fabric (its lead over the runner-up), and FedAvg's fastest "
                 "time over FDA's (above 1: FDA is faster)", ["setting", "target", *names, *(f"FedAvg/FDA {n}" for n in names)],
                 [[s, f"{t:g}", *w, *r] for (s, t), (w, r) in summaries.items()],
                 "FDA: the faster of LinearFDA and SketchFDA, tuned Θ or auto; - where one of them missed the target")
    fab = "; ".join(f"{name}: {f.gbps:g} Gb/s, α = {f.latency_us:g} µs" for name, f in FABRICS.items())
    print(f"fabrics (stated, not measured): {fab}. compute per step: scaling.csv's one-rank CPU time of this machine.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
