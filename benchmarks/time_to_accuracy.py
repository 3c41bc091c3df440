"""Time to accuracy on modelled fabrics, from the frontier's measured runs.

    python benchmarks/time_to_accuracy.py        # reads benchmarks/results/frontier.csv and scaling.csv
    python benchmarks/time_to_accuracy.py --markdown   # docs/results.md's regime table, from the same CSVs

For every run of ``frontier.csv`` that reached its target: the wall time it would take on K
ranks joined by each fabric of :data:`cost_model.FABRICS` (10 Gb/s Ethernet, 100 Gb/s
InfiniBand, a 1 Gb/s link between sites; α–β, latencies stated there), from what was
measured:

    time = steps · compute + syncs · T(4d, K) + [FDA] steps · T(state, K)

- steps: the run's local steps to the target; syncs: its model AllReduces to the target,
  recovered from its measured bytes to the target in the FDA paper's convention
  (``bytes = syncs · 2 · K · 4d + monitored steps · K · state``; ``--theta auto`` leaves its
  first round unmonitored and adds one 4-byte reduction);
- compute: one compute time per step per model for every method: FedAvg's local step as
  ``scaling.py`` measured it on this CPU, single-threaded (``scaling.csv``), or the stated
  ``--step-ms``; plus only FDA's own per-step work (LinearFDA's drift and dots, SketchFDA's
  sketch: scaling.csv's FDA step minus FedAvg's) for the families that do it. Synchronous,
  FedAvg, DiLoCo do the same local work and are charged the same step;
- T: the α–β AllReduce time (:mod:`cost_model`; Rabenseifner's 2⌈log2 K⌉·α + 2(K−1)/K·n·β,
  or ``--collective ring``), except that a message under 64 KB (FDA's 8-byte and 5 KB states,
  auto's 4-byte calibration reduction) is priced latency-bound, as the tree MPI libraries use
  for small messages: ⌈log2 K⌉·α + n·β;
- Synchronous overlaps its model AllReduce with the backward pass, as DDP does: a step costs
  (1 − b)·compute + max(b·compute, T(4d, K)), b the model's :data:`BACKWARD_SHARE`
  (``backward_share.py``); a periodic or FDA sync waits for the round's model, no overlap.

Not charged to any method: the stop check (``--stop-check-every``, one 16-byte allgather
every 10 steps) every run makes alike, which measures the runs, not the methods.

Printed per setting and target: each fabric's fastest run of each family and which family
is fastest, with its lead. Compute is this machine's CPU; on a GPU it shrinks and the
communication weighs more (``scaling.py``'s break-even column says by how much).

Then the per-row report (docs/time_model.md): for each (model size, step time, fabric,
setting, target) the fastest run, the communication share of a synchronous step, the best
tuned run (Synchronous, FedAvg's τ grid, FDA's Θ grid, any other family's grid in the CSV)
and the tuning-free run with its ratio, verdict (≤ 1.15× met, > 2× far) and why it misses;
the counts; and the rows where a synchronous step is ≥ 50 % communication:

    python benchmarks/time_to_accuracy.py --step-ms measured,5,20,100 --model-size actual --model-size 1e7
    python benchmarks/time_to_accuracy.py --collective ring --tuning-free 'linearfda auto-once (1 ep)'

A stated step (``--step-ms``) is FedAvg's local step on a GPU node, each strategy's own work
kept at its measured ratio to it; a stated model size prices the same measured curves as if
the model had that many parameters (the syncs are still recovered with the model that ran).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import statistics
import sys
from typing import NamedTuple

import _common  # noqa: F401
from _common import REPO_ROOT, RESULTS, print_report
from cost_model import COLLECTIVES, FABRICS, fabric_alpha_beta
import frontier
import frontier_analysis
from frontier_analysis import FDA


#: The frontier CSVs the report reads: the grids, and the runs of the cadences --theta-fabric picks.
FRONTIER_CSVS = ("frontier.csv", "frontier_fabric.csv")
#: frontier.py's --out prefix of the cadence runs (the second CSV), relative to the repository root.
FABRIC_OUT = os.path.relpath(os.path.join(RESULTS, FRONTIER_CSVS[1].removesuffix(".csv")), REPO_ROOT)


def add_pricing_flags(p: argparse.ArgumentParser) -> None:
    """The flags that choose the runs and how to price them (shared with ``regret.py``)."""
    p.add_argument("--frontier", default=None,
                   help="comma-separated frontier CSVs, read as one (default: frontier.csv and frontier_fabric.csv, the "
                        "--theta-fabric cadences' runs)")
    p.add_argument("--scaling", default=os.path.join(RESULTS, "scaling.csv"))
    p.add_argument("--step-ms", default="measured,5,20,100",
                   help="step times of the per-row report: 'measured' (this CPU's, scaling.csv) and/or stated "
                        "milliseconds per local step, e.g. 5,20,100 for GPU nodes (default: %(default)s)")
    p.add_argument("--model-size", action="append", metavar="SPEC",
                   help="a model size to price the per-row report at: 'actual' (each model its own), a parameter count "
                        "for every model (10e6) or MODEL=COUNT[,...]; repeat for several (default: actual and 1e7)")
    p.add_argument("--collective", choices=sorted(COLLECTIVES), default="rabenseifner",
                   help="the AllReduce schedule of the per-row report's α–β time (default: %(default)s, as the rest)")
    p.add_argument("--params", default="", metavar="MODEL=COUNT[,...]",
                   help="the parameter count of a model this script cannot build (its runs' syncs are recovered "
                        "with it), e.g. gpt=210000")


def check_pricing_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reads :func:`add_pricing_flags`' flags into ``args.steps``, ``args.sizes``, ``args.known``
    and a list ``args.frontier``; a bad value is one line on stderr and exit 2 (``p.error``)."""
    try:
        args.steps = parse_steps(args.step_ms)
        args.sizes = [parse_size(x) for x in (args.model_size or ["actual", "1e7"])]
    except ValueError as exc:
        p.error(str(exc))
    args.known = {}
    for item in filter(None, (x.strip() for x in args.params.split(","))):
        model, _, n = item.partition("=")
        if not model or not n.isdigit() or int(n) < 1:
            p.error(f"--params {item!r}: give MODEL=COUNT with a whole parameter count, e.g. gpt=210000")
        args.known[model] = int(n)
    if args.frontier is None:  # the defaults that exist (the cadences' runs may not yet)
        args.frontier = ",".join(p for p in (os.path.join(RESULTS, f) for f in FRONTIER_CSVS) if os.path.exists(p))
    args.frontier = [x for x in args.frontier.split(",") if x.strip()]
    for path in args.frontier:
        if not os.path.exists(path):
            p.error(f"--frontier {path}: no such file; give frontier.py's CSV (benchmarks/results/frontier.csv)")


def parse(argv=None) -> argparse.Namespace:
    # usage suppressed: a bad flag is one line on stderr (the problem and its fix), exit 2
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=argparse.SUPPRESS)
    add_pricing_flags(p)
    p.add_argument("--markdown", action="store_true",
                   help="print only docs/results.md's regime table (frontier's per-regime rows beside the modelled "
                        "times), from the first --frontier CSV (the grids) alone")
    p.add_argument("--baseline", default=DILOCO_DEFAULT,
                   help="the run label of the published-defaults baseline the comm-bound rows compare with "
                        "(default: %(default)s)")
    p.add_argument("--cadences", action="store_true",
                   help="print, per setting, the frontier command that runs the (H, m) pairs the rows' 'auto (fabric)' "
                        "methods ask for and the CSV lacks, and nothing else")
    p.add_argument("--run-flags-of", metavar="SETTING",
                   help="print the frontier.py flags a new run of SETTING takes to be scored like the CSVs' runs "
                        "(--targets, --max-epochs), and nothing else")
    p.add_argument("--tuning-free", default="linearfda auto (fabric);linearfda auto-once (1 ep)",
                   help="';'-separated run labels (family and knob as the report prints them) that count as "
                        "tuning-free FDA (default: %(default)s)")
    args = p.parse_args(argv)
    check_pricing_flags(p, args)
    args.baseline = args.baseline.strip()
    args.free = tuple(x.strip() for x in args.tuning_free.split(";") if x.strip())
    if not args.free:
        p.error("--tuning-free: empty; give a run label such as 'linearfda auto-once (1 ep)'")
    return args


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

    if family == "linearfda" or family.endswith("+linear"):  # a rule under LinearFDA's trigger: diloco+linear
        return 8
    if family == "sketchfda" or family.endswith("+sketch"):
        return 4 * (1 + SKETCH_ROWS * SKETCH_COLS)
    return 0


def monitored_steps(row: dict) -> tuple[float, int]:
    """(steps that reduced FDA's state, extra monitoring bytes per rank): every step, except
    that ``--theta auto-once`` runs its first round (``auto-once (E ep)``) unmonitored and then
    reduces 4 bytes once, and a knob naming ``every m`` (``--fda-every m``) reduces the state
    on one step in m. The per-round rule (``auto (H E ep)``) monitors every step (at lag 0 it
    needs nothing more), and so does an auto knob that names no ``(E ep)`` calibration (the
    reading that charges FDA most)."""
    steps = float(row["steps"])  # a median over seeds may be fractional
    every = re.search(r"every[ =]?(\d+)", row["knob"])
    per = int(every.group(1)) if every else 1
    if row["auto"] != "True" or row["knob"].startswith("auto (H "):
        return steps / per, 0
    calib = re.search(r"\((\d+(?:\.\d+)?) ep\)", row["knob"])
    if calib is None:
        return steps / per, 0
    calibration = round(float(calib.group(1)) * frontier.steps_per_epoch(int(row["workers"])))
    return max(0, steps - calibration) / per, 4


class Priced(NamedTuple):
    """One run's modelled time to its target, in its three parts (seconds), and the counts priced."""

    compute: float
    sync: float
    monitor: float
    steps: float
    syncs: int
    monitored: float

    @property
    def total(self) -> float:
        return self.compute + self.sync + self.monitor


#: Below this many bytes an AllReduce is priced as the latency-bound tree MPI libraries switch to for
#: small messages (one ⌈log2 K⌉-deep reduction tree, the message sent whole): FDA's 8-byte and 5 KB states.
SMALL_MESSAGE = 64 * 1024

#: The backward pass's share of a local step (forward + backward + optimizer step), this CPU, one
#: thread, batch 32: measured by benchmarks/backward_share.py (benchmarks/results/backward_share.txt).
#: A synchronous step hides its model AllReduce behind this part (DDP's bucketed overlap); a model
#: not listed gets no overlap.
BACKWARD_SHARE = {"lenet5": 0.748, "cnn": 0.516, "gpt": 0.635}


def allreduce_time(n: float, k: int, alpha: float, beta: float, collective: str = "rabenseifner") -> float:
    """T(n, K): ``collective``'s α–β time, or for a message under :data:`SMALL_MESSAGE` bytes the
    latency-bound tree's ⌈log2 K⌉·α + n·β; zero for one rank."""
    if n < SMALL_MESSAGE:
        return (math.ceil(math.log2(k)) * alpha + n * beta) if k > 1 else 0.0
    return COLLECTIVES[collective](n, k, alpha, beta)


def overlapped(row: dict) -> bool:
    """Whether ``row``'s model AllReduce overlaps its backward pass: a run that averages gradients
    every step (Synchronous; the one-step horizon of ``auto (fabric)`` is Synchronous's run). A
    periodic or FDA sync averages the models after a round and waits for them: no overlap."""
    return row["family"] == "synchronous"


def price(row: dict, d: int, step_s: float, alpha: float, beta: float, collective: str = "rabenseifner",
          d_price: int | None = None, backward_share: float = 0.0) -> Priced:
    """``row``'s time to its target: steps · step_s + syncs · T(4·d_price, K) + monitored · T(state, K)
    (+ T(4 B, K) once for auto's calibration reduction), T the ``collective``'s α–β time
    (:func:`allreduce_time`: a small message latency-bound).

    The syncs are recovered from the run's measured bytes with the model it ran (``d``
    parameters); ``d_price`` (default ``d``) prices them as if the model had that many (the
    same curves, a bigger message): a stated model size, not a measured one. A run that syncs
    every step (:func:`overlapped`) hides each AllReduce behind the ``backward_share`` of its
    step: a step costs (1 − b)·step_s + max(b·step_s, T), so ``sync`` holds only the exposed
    part, steps · max(0, T − b·step_s)."""
    k, steps, total = int(row["workers"]), float(row["steps"]), float(row["gb"]) * 1e9
    state = state_bytes(row["family"])
    monitored, extra = monitored_steps(row) if state else (0, 0)
    syncs = round((total - k * (monitored * state + extra)) / (2 * k * 4 * d))
    if syncs < 0:
        raise ValueError(f"{row['run_files']}: {total:.0f} bytes to the target cannot hold {monitored} monitored steps")
    t_sync = allreduce_time(4 * (d_price or d), k, alpha, beta, collective)
    if overlapped(row) and backward_share:
        sync = syncs * max(0.0, t_sync - backward_share * step_s)
    else:
        sync = syncs * t_sync
    monitor = 0.0
    if state:
        monitor = monitored * allreduce_time(state, k, alpha, beta, collective) + (
            allreduce_time(extra, k, alpha, beta, collective) if extra else 0.0)
    return Priced(steps * step_s, sync, monitor, steps, syncs, monitored)


def seconds(row: dict, d: int, compute: float, fabric: str) -> tuple[float, int]:
    """(wall seconds to the target on ``fabric``, model AllReduces to the target)."""
    f = FABRICS[fabric]
    p = price(row, d, compute, *fabric_alpha_beta(f.gbps, f.latency_us),
              backward_share=BACKWARD_SHARE.get(row.get("model", ""), 0.0))
    return p.total, p.syncs


def fastest(rows: list[dict], d: int, compute: dict[tuple[str, str], float]) -> tuple[list[list], list[str], list[str]]:
    """One setting and target's runs priced on every fabric: (the per-run table, the fastest
    family per fabric with its lead over the runner-up, FedAvg's fastest time over FDA's per fabric)."""
    table, winners, fda_over_avg = [], [], []
    for fabric in FABRICS:
        best: dict[str, tuple[float, dict, int]] = {}
        for r in rows:
            c = measured_step(compute, r["model"], r["family"])  # FedAvg's step, + FDA's own work
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
    """docs/results.md's regime table: frontier's per-regime row (fewest steps, each family's lead
    in bytes with its pair and seeds, verdict, the default auto run's check against the cheapest
    tuned Θ) beside the modelled time (FedAvg/FDA, fastest family)."""
    short = {"ethernet-10g": "10G", "infiniband-100g": "IB", "cross-site-1g": "1G"}
    head = ["regime", "target", "fewest steps FDA / FedAvg", "lead in bytes FDA / FedAvg (pair, seeds)", "verdict",
            "LinearFDA auto-once (1 ep) / cheapest tuned Θ", "FedAvg/FDA time " + " / ".join(short[f] for f in FABRICS),
            "fastest on " + " / ".join(short[f] for f in FABRICS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    auto = "linearfda auto-once (1 ep) "  # frontier_analysis.read_points names the one-calibration rule so
    for setting, target, steps, leads, verdict, _, _, checks in frontier_analysis.regimes(points):
        check = next((c[len(auto):] for c in checks.split("; ") if c.startswith(auto)), "-")
        winners, ratio = summaries.get((setting, float(target)), (["-"] * len(FABRICS), ["-"] * len(FABRICS)))
        fastest_ = " / ".join(w.partition(" (")[0] for w in winners)
        lines.append(f"| {regime_name(setting)} | {target} | {steps} | {leads} | {verdict} | {check} | {' / '.join(ratio)} "
                     f"| {fastest_} |")
    return lines


# The per-row report (issue 40, item 5) ---------------------------------------------------------

#: A tuning-free run within this factor of the best tuned method's time meets the goal; beyond FAR it is far off.
MET, FAR = 1.15, 2.0
#: The fabrics of the per-row report, slowest first.
ROW_FABRICS = ("cross-site-1g", "ethernet-10g", "infiniband-100g")
#: The run label of DiLoCo at its published defaults (H = 500 inner steps), the comm-bound rows' second baseline.
DILOCO_DEFAULT = "diloco H=500"
#: Families priced as a paper's comparison, not as a method a user tunes (frontier's ``--paper-baseline``).
NOT_TUNED = ("fedavg-sgd",)


def run_label(row: dict) -> str:
    """'fedavg 0.5 ep', 'linearfda Θ=2', 'linearfda auto-once (1 ep)', 'synchronous'; a run of
    ``--auto-cadences`` by its steps: 'linearfda auto (H 22, m 22)'."""
    cad = run_cadence(row)
    if cad:
        return "{} auto (H {}, m {})".format(row["family"], *cad)
    return f"{row['family']} {row['knob']}".strip()


def measured_step(compute: dict[tuple[str, str], float], model: str, family: str) -> float | None:
    """This CPU's seconds for one local step of ``family`` on ``model``: FedAvg's measured local
    step (scaling.csv) plus the family's own extra work where it has some (:func:`own_work`);
    None where FedAvg's step on the model was not measured."""
    base = compute.get((model, "fedavg"))
    return None if base is None else base + own_work(compute, model, family)


def own_work(compute: dict[tuple[str, str], float], model: str, family: str) -> float:
    """Seconds per step of FDA's own work on top of FedAvg's local step (LinearFDA's drift and
    dot products, SketchFDA's sketch; a rule under FDA's trigger, ``diloco+linear``, does the
    same), as scaling.csv measured it (its step minus FedAvg's); 0 for every other family:
    Synchronous, FedAvg, DiLoCo do the same local work, so they are charged the same compute."""
    trigger = "linearfda" if family.endswith("+linear") else "sketchfda" if family.endswith("+sketch") else family
    if trigger not in FDA or (model, trigger) not in compute or (model, "fedavg") not in compute:
        return 0.0
    return max(0.0, compute[model, trigger] - compute[model, "fedavg"])


def step_seconds(compute: dict[tuple[str, str], float], model: str, family: str, stated: float | None) -> float | None:
    """The compute of one local step, the same for every family but for FDA's own work: this
    CPU's FedAvg step (``stated`` None) or ``stated`` seconds of FedAvg's local step, plus FDA's
    drift/sketch work (kept at its measured ratio to FedAvg's step when the step is stated);
    ``stated`` itself where nothing was measured."""
    if stated is None:
        return measured_step(compute, model, family)
    base = compute.get((model, "fedavg"))
    return stated * (1 + own_work(compute, model, family) / base) if base else stated


def kind(row: dict, tuning_free: tuple[str, ...]) -> str:
    """'free' (a tuning-free method: its label is listed), 'tuned' (a point of a family's grid:
    not auto), 'paper' (a paper's comparison) or 'other' (an auto run with a knob set)."""
    if run_label(row) in tuning_free:
        return "free"
    if row["family"] in NOT_TUNED:
        return "paper"
    return "other" if row["auto"] == "True" else "tuned"


def verdict(ratio: float | None) -> str:
    """Tuning-free time over the best tuned method's: ≤ 1.15 'met', > 2 'far', else 'missed';
    None (the tuning-free run did not reach the target) 'not reached'."""
    if ratio is None:
        return "not reached"
    return "met" if ratio <= MET else "far" if ratio > FAR else "missed"


def why(free: Priced, best: Priced) -> str:
    """What the tuning-free run's extra time is made of, largest first: the compute of extra
    steps, extra model syncs, and the monitoring (FDA's per-step state reductions, latency-bound
    on a slow link); parts where it is not behind are left out."""
    parts = [("monitoring", free.monitor - best.monitor, f"{free.monitored:.0f} vs {best.monitored:.0f} checks"),
             ("extra steps", free.compute - best.compute, f"{free.steps:.0f} vs {best.steps:.0f}"),
             ("extra syncs", free.sync - best.sync, f"{free.syncs} vs {best.syncs}")]
    excess = free.total - best.total
    out = [f"{name} {dt / excess:.0%} ({detail})" for name, dt, detail in sorted(parts, key=lambda p: -p[1])
           if dt > 0 and excess > 0]
    return "; ".join(out) or "-"


def parse_steps(text: str) -> list[float | None]:
    """``--step-ms``: 'measured' (this CPU's step) and/or milliseconds → [None | seconds]."""
    out: list[float | None] = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        if item == "measured":
            out.append(None)
            continue
        try:
            ms = float(item)
        except ValueError:
            raise ValueError(f"--step-ms {item!r}: not a number; give milliseconds per step, e.g. 5,20,100, or measured")
        if not ms > 0 or math.isinf(ms):
            raise ValueError(f"--step-ms {item!r}: must be a positive number of milliseconds, e.g. 20")
        out.append(ms / 1000)
    if not out:
        raise ValueError("--step-ms: empty; give measured and/or milliseconds, e.g. measured,5,20,100")
    return out


def parse_size(text: str) -> dict[str, float] | None:
    """One ``--model-size`` scenario: 'actual' (each model its own size: None), a parameter
    count for every model ('10e6'), or per model ('lenet5=1e6,cnn=1e7'; a model not named
    keeps its own size) → {model or '*': d}."""
    if text.strip() == "actual":
        return None
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        model, _, n = item.rpartition("=")
        try:
            d = float(n)
        except ValueError:
            raise ValueError(f"--model-size {item!r}: not a parameter count; give e.g. 10e6, cnn=10e6 or actual")
        if not d >= 1 or math.isinf(d):
            raise ValueError(f"--model-size {item!r}: a model has at least one parameter; give e.g. 10e6")
        out[model or "*"] = d
    if not out:
        raise ValueError("--model-size: empty; give actual, a parameter count (10e6) or MODEL=COUNT")
    return out


def priced_d(size: dict[str, float] | None, model: str, d: int) -> int:
    """The parameter count a scenario prices ``model`` at (its own ``d`` unless stated)."""
    if size is None:
        return d
    return int(size.get(model, size.get("*", d)))


#: The tuning-free label whose run depends on the row: ``FAMILY auto (fabric)`` is, in each row, the
#: run of ``--theta auto --theta-fabric`` with that row's fabric, step time and model size (its
#: horizon H and check cadence m, :func:`fdahpc.theta.horizon_steps` and :func:`~fdahpc.theta.check_every`).
FABRIC_AUTO = " auto (fabric)"
_CADENCE = re.compile(r"auto \(H ([0-9.eE+-]+) (ep|steps), every (\d+)\)")


def run_flags(setting: str, every_run: list[dict]) -> str:
    """frontier.py's flags for a new run of ``setting`` scored like the CSVs' runs of it: every
    target they hold for it, and the 6-epoch cap that settings with their own optimizer ran at."""
    targets = ",".join(f"{t:g}" for t in sorted({float(r["target"]) for r in every_run if r["setting"] == setting}))
    cap = " --max-epochs 6" if frontier.parse_setting(setting).optimizer else ""
    return (f"--targets {targets}" if targets else "") + cap


def cadence(d: int, k: int, gbps: float, latency_us: float, step_s: float, family: str) -> tuple[int, int]:
    """(H, m) that ``--theta auto --theta-fabric GBPS,LATENCY_US,STEP_MS`` picks for a model of ``d``
    parameters on K ranks (the state priced at ``family``'s size)."""
    from fdahpc.theta import check_every, horizon_steps

    fabric = (gbps, latency_us, step_s * 1e3)
    h = horizon_steps(1, d, k, fabric=fabric)
    return h, check_every(state_bytes(family), k, fabric, h)


def run_cadence(row: dict) -> tuple[int, int] | None:
    """(H steps, m) of a run at a stated cadence, else None: frontier.py's ``--auto-cadences``
    (knob 'auto (H E ep, every m)', E in FashionMNIST epochs) or shakespeare.py's ('auto (H N steps, every m)')."""
    m = _CADENCE.fullmatch(row["knob"])
    if m is None:
        return None
    h = float(m.group(1)) * (frontier.steps_per_epoch(int(row["workers"])) if m.group(2) == "ep" else 1)
    return round(h), int(m.group(3))


#: The (H, m) of a one-step horizon: ``--theta auto`` syncs every step and checks nothing (fdahpc.theta).
SYNC_LIMIT = (1, 1)


def rule_cadence(row: dict, family: str) -> tuple[int, int] | None:
    """The (H, m) whose ``FAMILY auto (fabric)`` run ``row`` is, else None: a cadence run of
    ``family`` its own; Synchronous's run the one-step horizon's (:data:`SYNC_LIMIT`), since
    there LinearFDA and SketchFDA average the models after every step and reduce no state,
    Synchronous bit for bit (tests/test_fda.py). Under another rule (DiLoCo's outer step) H = 1
    is that rule at every step, which no run here is."""
    if row["family"] == "synchronous":
        return SYNC_LIMIT if family in FDA else None
    return run_cadence(row) if row["family"] == family else None


def before_the_limit(row: dict) -> bool:
    """A cadence run at H = 1 made before the one-step horizon became the synchronous limit:
    it checked every step and skipped syncs, which ``--theta auto`` no longer does, so the
    report leaves it out (Synchronous's run stands for it)."""
    cad = run_cadence(row)
    return cad is not None and cad[0] == 1


def time_rows(runs: list[dict], params: dict[str, int], compute: dict[tuple[str, str], float],
              sizes: list[dict[str, float] | None], steps: list[float | None], fabrics=ROW_FABRICS,
              collective: str = "rabenseifner", tuning_free: tuple[str, ...] = ("linearfda auto-once (1 ep)",),
              baseline: str = DILOCO_DEFAULT, ran: set | None = None, missing: dict | None = None) -> list[dict]:
    """One dict per (model size, step time, fabric, setting, target, tuning-free method): the
    fastest run, the communication share of a synchronous step, the best tuned run and the
    tuning-free run with its ratio, verdict and why. A measured step is priced only at a
    model's own size (the CPU measured that model); a setting whose model has no measured
    step is priced with stated steps only.

    A ``FAMILY auto (fabric)`` label takes, in each row, the run of the (H, m) that row's
    fabric gives (:func:`cadence`); a row whose (setting, (H, m)) is not in ``ran`` (no such
    run at all) gets no verdict and is added to ``missing`` ((setting, family) -> {(H, m)})."""
    by_case: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        by_case.setdefault((r["setting"], r["target"]), []).append(r)
    ran = set() if ran is None else ran
    missing = {} if missing is None else missing
    out = []
    for size in sizes:
        for step in steps:
            for fabric in fabrics:
                f = FABRICS[fabric]
                alpha, beta = fabric_alpha_beta(f.gbps, f.latency_us)
                for (setting, target), rows in by_case.items():
                    model, k = rows[0]["model"], int(rows[0]["workers"])
                    d = params[model]
                    dp = priced_d(size, model, d)
                    if step is None and dp != d:
                        continue
                    sync_step = step_seconds(compute, model, "synchronous", step)
                    if sync_step is None:
                        continue
                    comm = allreduce_time(4 * dp, k, alpha, beta, collective)
                    priced = []
                    for r in rows:
                        s = step_seconds(compute, model, r["family"], step)
                        overlap = BACKWARD_SHARE.get(model, 0.0)
                        priced.append((price(r, d, s, alpha, beta, collective, dp, overlap), r))
                    best = {}
                    for p, r in priced:
                        key = kind(r, tuning_free)
                        label = run_label(r) if key == "free" else key
                        if label not in best or p.total < best[label][0].total:
                            best[label] = (p, r)
                    fast_p, fast_r = min(priced, key=lambda x: x[0].total)
                    tuned = best.get("tuned")
                    tuned_sync = min(((p, r) for p, r in priced if r["family"] == "synchronous"),
                                     key=lambda x: x[0].total, default=None)
                    base = next((p.total for p, r in priced if run_label(r) == baseline), None)
                    fedavg = min((p.total for p, r in priced if r["family"] == "fedavg"), default=None)
                    for label in tuning_free:
                        free, want, hindsight, any_run = best.get(label), None, None, None
                        if label.endswith(FABRIC_AUTO):  # this row's own run of the rule
                            family = label[:-len(FABRIC_AUTO)]
                            rule = [(p, r, rule_cadence(r, family)) for p, r in priced]
                            # the best of the family's own cadence runs in this row: what no horizon rule beats
                            # (a method counts only as itself: Synchronous's run stands in for the rule's own
                            # one-step horizon below, bit for bit its run, but is no candidate in hindsight)
                            own = [(p, r, cad) for p, r, cad in rule if r["family"] == family]
                            hindsight = min(((p.total, cad) for p, _, cad in own if cad), default=None)
                            # the best of every run of the family (a tuned Θ too): what no Θ rule beats
                            any_run = min((p.total for p, _, _ in own), default=None)
                            want = cadence(dp, k, f.gbps, f.latency_us, step_seconds(compute, model, "fedavg", step), family)
                            free = min(((p, r) for p, r, cad in rule if cad == want), key=lambda x: x[0].total, default=None)
                            if free is None and (setting, family, want) not in ran:
                                missing.setdefault((setting, family), set()).add(want)
                                continue  # never run: no verdict (time_to_accuracy.py --cadences lists what to run)
                        ratio = free[0].total / tuned[0].total if free and tuned else None
                        v = verdict(ratio) if tuned else ("met (alone)" if free else "none reached")
                        reason = ("-" if v == "met" or not free and not tuned else
                                  "not reached" if not free else why(free[0], tuned[0]) if tuned else "-")
                        out.append(dict(size=dp, own_size=dp == d, step=step, fabric=fabric, setting=setting,
                                        target=float(target), model=model, workers=k,
                                        sync_share=comm / (sync_step + comm), fastest=run_label(fast_r),
                                        fastest_s=fast_p.total, tuned=tuned and run_label(tuned[1]),
                                        tuned_s=tuned and tuned[0].total, method=label, free_s=free and free[0].total,
                                        ratio=ratio, verdict=v, why=reason, cadence=want,
                                        sync_s=tuned_sync and tuned_sync[0].total, baseline_s=base,
                                        fedavg_s=fedavg, free_monitor=free and free[0].monitor,
                                        hindsight_s=hindsight and hindsight[0], hindsight_cadence=hindsight and hindsight[1],
                                        any_s=any_run))
    return out


def step_name(step: float | None) -> str:
    return "measured" if step is None else f"{step * 1000:g} ms"


def row_table(rows: list[dict]) -> list[list]:
    """The per-row table's cells."""
    num = lambda x, f="{:.1f}": "-" if x is None else f.format(x)  # noqa: E731
    return [[f"{r['size']:,}", step_name(r["step"]), r["fabric"], r["setting"], f"{r['target']:g}",
             f"{r['sync_share']:.0%}", f"{r['fastest']} {r['fastest_s']:.1f}", f"{r['tuned'] or '-'} {num(r['tuned_s'])}",
             num(r["free_s"]) + (" (H {}, m {})".format(*r["cadence"]) if r.get("cadence") else ""),
             num(r["ratio"], "{:.2f}x"), r["verdict"], r["why"]] for r in rows]


def counts(rows: list[dict]) -> dict[str, int]:
    """Verdict → rows, over the rows that have a verdict ('none reached' rows left out)."""
    out = {v: 0 for v in ("met", "met (alone)", "missed", "far", "not reached")}
    for r in rows:
        if r["verdict"] in out:
            out[r["verdict"]] += 1
    return out


def count_line(c: dict[str, int]) -> str:
    n = sum(c.values())
    met = c["met"] + c["met (alone)"]
    worse = c["far"] + c["not reached"]
    return (f"{met} of {n} met ({met / n:.0%})" if n else "no rows") + (
        f", {c['missed']} missed (1.15-2x), {c['far']} far (>2x), {c['not reached']} not reached" if n else "") + (
        f"; goal (>= 80 % met, none > 2x): {'met' if n and met >= 0.8 * n and not worse else 'not met'}" if n else "")


def comm_bound(rows: list[dict]) -> list[list]:
    """Rows whose synchronous step is at least half communication: the tuning-free run against
    Synchronous (goal: >= 1.5x sooner)."""
    out = []
    for r in rows:
        if r["sync_share"] < 0.5:
            continue
        speedup = r["sync_s"] / r["free_s"] if r["sync_s"] and r["free_s"] else None
        base = r["baseline_s"]
        out.append([f"{r['size']:,}", step_name(r["step"]), r["fabric"], r["setting"], f"{r['target']:g}", r["method"],
                    f"{r['sync_share']:.0%}", "-" if r["sync_s"] is None else f"{r['sync_s']:.1f}",
                    "-" if r["free_s"] is None else f"{r['free_s']:.1f}",
                    "-" if speedup is None else f"{speedup:.2f}x",
                    "-" if speedup is None else "met" if speedup >= 1.5 else "not met",
                    "-" if base is None else f"{base:.1f}",
                    "-" if base is None or r["free_s"] is None else "met" if r["free_s"] <= base else "not met"])
    return out


SLOW_LINK = "cross-site-1g"


def versus_fedavg(rows: list[dict], fabric: str = SLOW_LINK) -> list[list]:
    """On ``fabric``, per (d, step): the rows where the tuning-free run is slower than FedAvg's
    fastest τ, and those it loses by the monitoring alone (slower, but not without the time of
    its state reductions). Goal: none of the latter."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["fabric"] == fabric and r["free_s"] is not None and r["fedavg_s"] is not None:
            groups.setdefault((r["size"] if not r["own_size"] else "own", step_name(r["step"])), []).append(r)
    out = []
    for (d, step), g in groups.items():
        slower = [r for r in g if r["free_s"] > r["fedavg_s"]]
        by_monitor = [r for r in slower if r["free_s"] - r["free_monitor"] <= r["fedavg_s"]]
        out.append([f"{d:,}" if d != "own" else "own", step, len(g), len(g) - len(slower), len(slower), len(by_monitor),
                    f"{statistics.median(r['free_monitor'] / r['free_s'] for r in g):.1%}"])
    return out


def horizon_ratios(rows: list[dict]) -> str:
    """'0.17 (0.002-1)': the hindsight-best cadence's H over the rule's H, median and range over ``rows``."""
    x = [r["hindsight_cadence"][0] / r["cadence"][0] for r in rows if r.get("hindsight_cadence") and r.get("cadence")]
    return f"{statistics.median(x):.2g} ({min(x):.2g}-{max(x):.2g})" if x else "-"


def causes(rows: list[dict]) -> str:
    """How many missed or far rows each part of the excess time leads: 'monitoring 12, extra steps 3'."""
    c: dict[str, int] = {}
    for r in rows:
        if r["verdict"] in ("missed", "far") and r["why"] != "-":
            lead = r["why"].split(" ")[0] if r["why"].startswith("monitoring") else " ".join(r["why"].split(" ")[:2])
            c[lead] = c.get(lead, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])) or "-"


def fastest_families(rows: list[dict]) -> str:
    """'fedavg 19, synchronous 21, linearfda 13': how many setting-target rows each family's run is fastest in."""
    c: dict[str, int] = {}
    for r in rows:
        fam = r["fastest"].split(" ")[0]
        c[fam] = c.get(fam, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))


def row_report(rows: list[dict], collective: str, baseline: str = DILOCO_DEFAULT) -> None:
    """Prints the per-row report of issue 40 item 5: the table, the counts per scenario, the comm-bound rows."""
    formula = {"rabenseifner": "T(n, K) = 2·ceil(log2 K)·α + 2·(K−1)/K·n·β (reduce-scatter + allgather, Rabenseifner)",
               "ring": "T(n, K) = 2·(K−1)·α + 2·(K−1)/K·n·β (ring reduce-scatter + allgather)"}[collective]
    fab = "; ".join(f"{name}: {FABRICS[name].gbps:g} Gb/s, α = {FABRICS[name].latency_us:g} µs" for name in ROW_FABRICS)
    print("Time to the target per (model size, step time, fabric, setting, target): the fastest method, "
          "the best tuned one and tuning-free FDA")
    print(f"  AllReduce: {formula}, β = 8 / (Gb/s · 1e9) s per byte; fabrics (stated): {fab}.")
    print("  time = steps · step + syncs · T(4·d, K) + monitored steps · T(FDA state, K); steps, syncs and monitored steps "
          "from the measured runs (frontier.csv).")
    print(f"  a message under {SMALL_MESSAGE // 1024} KB (FDA's state): T = ceil(log2 K)·α + n·β "
          "(latency-bound tree); Synchronous's AllReduce hides behind its backward pass: a step is "
          "(1 − b)·step + max(b·step, T), b = "
          + ", ".join(f"{m} {b:g}" for m, b in BACKWARD_SHARE.items()) + " (backward_share.py); the stop check is not "
          "charged.")
    print("  step: 'measured' = this CPU's FedAvg step (scaling.csv); 'N ms' = a stated step of FedAvg's local work; "
          "the same for every method, FDA's own work added at its measured ratio to it.")
    print("  d: the parameters priced per model AllReduce; a d other than the model's own prices its measured curves as "
          "if the model were that size (stated, not measured).")
    print(f"  tuned: Synchronous, every FedAvg τ, every tuned Θ of LinearFDA/SketchFDA and any other family's grid in the "
          f"CSV (auto runs with a knob and {', '.join(NOT_TUNED)} left out); verdict: tuning-free / best tuned <= {MET} met, "
          f"> {FAR:g} far, else missed; why: the excess time's parts.")
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        for r in mine:  # the best of the family's cadence runs (of all its runs), judged like the rule's own run
            r["hindsight"] = r["hindsight_s"] and r["tuned_s"] and verdict(r["hindsight_s"] / r["tuned_s"])
            r["any"] = r["any_s"] and r["tuned_s"] and verdict(r["any_s"] / r["tuned_s"])
        print_report(f"Tuning-free method: {method}", ["d", "step", "fabric", "setting", "target", "sync comm",
                     "fastest (s)", "best tuned (s)", "tuning-free s", "ratio", "verdict", "why"], row_table(mine),
                     "sync comm: the share of a synchronous step spent in its model AllReduce")
        groups: dict[tuple, list[dict]] = {}
        for r in mine:
            groups.setdefault((r["size"] if not r["own_size"] else "own", step_name(r["step"]), r["fabric"]), []).append(r)
        print_report(f"Verdict counts for {method} per (d, step, fabric)", ["d", "step", "fabric", "counts", "misses' main cause"],
                     [[f"{d:,}" if d != "own" else "own", s, f, count_line(counts(g)), causes(g)]
                      for (d, s, f), g in groups.items()],
                     f"all rows: {count_line(counts(mine))}; misses' main cause: {causes(mine)}")
        cases: dict[tuple, list[dict]] = {}
        for r in mine:
            cases.setdefault((r["setting"], r["target"]), []).append(r)
        hind = any(r["hindsight"] for r in mine)
        print_report(f"Verdict counts for {method} per setting and target (over its (d, step, fabric) rows)",
                     ["setting", "target", "met", "missed", "far", "not reached", "best tuned (most rows)"]
                     + ["met in hindsight", "its H / the rule's (median, range)"] * hind,
                     [[st, f"{t:g}", *(sum(r["verdict"].startswith(v) for r in g) for v in ("met", "missed", "far",
                                                                                             "not reached")),
                       max(dict.fromkeys(r["tuned"] or "-" for r in g), key=[r["tuned"] or "-" for r in g].count)]
                      + [sum(r["hindsight"] == "met" for r in g), horizon_ratios(g)] * hind
                      for (st, t), g in cases.items()],
                     "best tuned: the tuned run fastest in most of the case's rows"
                     + "; met in hindsight: rows the best of the family's cadence runs meets; its H: that run's" * hind)
        if hind:
            best = {v: sum(r["hindsight"] == v for r in mine) for v in ("met", "missed", "far")}
            print(f"In hindsight: the best of the family's cadence runs in each row (any H, m; what no horizon rule "
                  f"can beat) would meet {best['met']} of {len(mine)} rows, {best['missed']} missed, {best['far']} far, "
                  f"{len(mine) - sum(best.values())} not reached")
            best = {v: sum(r["any"] == v for r in mine) for v in ("met", "missed", "far")}
            print(f"The best of all the family's runs in each row (a tuned Θ or any cadence: what no Θ rule over these "
                  f"runs can beat) would meet {best['met']} of {len(mine)} rows, {best['missed']} missed, {best['far']} "
                  f"far, {len(mine) - sum(best.values())} not reached")
        if method == next(iter(dict.fromkeys(r["method"] for r in rows))):  # the fastest run does not depend on it
            print_report("Fastest method per (d, step, fabric): setting-target rows each family is fastest in",
                         ["d", "step", "fabric", "fastest family: rows"],
                         [[f"{d:,}" if d != "own" else "own", s, f, fastest_families(g)] for (d, s, f), g in groups.items()],
                         "family of the fastest run of every kind (tuned, tuning-free or another auto run)")
        bound = comm_bound(mine)
        print_report(f"Rows where a synchronous step is >= 50 % communication: {method} against Synchronous",
                     ["d", "step", "fabric", "setting", "target", "method", "sync comm", "Synchronous s", "tuning-free s",
                      "speed-up", "goal >= 1.5x", f"{baseline} s", "no later"], bound,
                     f"{sum(b[10] == 'met' for b in bound)} of {len(bound)} rows met the >= 1.5x goal; "
                     f"{sum(b[12] == 'met' for b in bound)} of {sum(b[11] != '-' for b in bound)} with a {baseline} run "
                     f"were no later than it ('-': no such run reached the target)")
        slow = versus_fedavg(mine)
        lost = sum(row[5] for row in slow)
        print_report(f"On {SLOW_LINK}: {method} against FedAvg's fastest τ", ["d", "step", "rows", "FDA no later",
                     "FDA later", "later by the monitoring alone", "monitoring's share (median)"], slow,
                     f"rows both reached; 'by the monitoring alone': later than FedAvg, but not without the time of its "
                     f"state reductions. Goal (FDA no longer loses to FedAvg by the monitor's latency): "
                     f"{'met' if slow and not lost else 'not met'} ({lost} of {sum(row[2] for row in slow)} rows)")



def load_runs(paths: list[str], free: tuple[str, ...], known: dict[str, int], say=print
              ) -> tuple[list[dict], list[dict], set, dict[str, int]]:
    """The frontier CSVs at ``paths`` read as one: (every run, the runs that reached their target
    and whose model's size is known, the (setting, family, (H, m)) cadences that ran for each
    ``FAMILY auto (fabric)`` label of ``free``, model → parameter count: ``known``, else built
    here). What is left out is said through ``say``."""
    every_run = []
    for path in paths:
        with open(path, newline="") as fh:
            every_run += [dict(r, knob=frontier_analysis.current_knob(r["knob"])) for r in csv.DictReader(fh)]
    stale = {r["run_files"] for r in every_run if before_the_limit(r)}
    if stale:  # said, not silently dropped
        say(f"note: {len(stale)} cadence runs at H = 1 left out: they ran before a one-step horizon became the "
            "synchronous limit (fdahpc.theta); under the plain mean Synchronous's run stands for that cadence")
        every_run = [r for r in every_run if r["run_files"] not in stale]
    runs = [r for r in every_run if r["reached"] == "True"]
    families = [label[:-len(FABRIC_AUTO)] for label in free if label.endswith(FABRIC_AUTO)]
    ran = {(r["setting"], family, rule_cadence(r, family)) for r in every_run for family in families
           if rule_cadence(r, family)}
    params: dict[str, int] = {}
    for model in dict.fromkeys(r["model"] for r in runs):
        if model in known:
            params[model] = known[model]
            continue
        try:
            params[model] = model_params(model)
        except Exception as exc:  # a model this script cannot build: its rows are left out, and said so
            say(f"note: {model}'s runs left out: its parameter count is unknown here ({exc}); give it with --params")
    for model in known:
        if model not in params:
            say(f"note: --params {model}: no run of that model reached a target in the CSV")
    return every_run, [r for r in runs if r["model"] in params], ran, params


def main(argv=None) -> int:
    args = parse(argv)
    compute = compute_per_step(args.scaling)
    if args.markdown:  # docs/results.md's regime table is the grids' (issue 24's bytes frontier), not the cadence runs'
        args.frontier = args.frontier[:1]
    every_run, runs, ran, params = load_runs(args.frontier, args.free, args.known)
    if args.run_flags_of:
        print(run_flags(args.run_flags_of, every_run))
        return 0
    missing: dict[tuple[str, str], set] = {}

    def rows_of() -> list[dict]:  # the per-row report's rows; fills ``missing`` (not needed for --markdown)
        return time_rows(runs, params, compute, args.sizes, args.steps, collective=args.collective,
                         tuning_free=args.free, baseline=args.baseline, ran=ran, missing=missing)

    if args.cadences:
        rows_of()
        for (setting, family), pairs in missing.items():
            if setting.partition("/")[0] == "gpt":  # the GPT's runs are shakespeare.py's (cadences in steps)
                if family != "linearfda":
                    print(f"# {setting}: shakespeare.py runs LinearFDA's cadences only, not {family}'s")
                    continue
                targets = ",".join(sorted({r["target"] for r in every_run if r["setting"] == setting}))
                print(f"python benchmarks/shakespeare.py --ranks {setting.rpartition('@')[2]} --targets {targets} "
                      f"--cadences {','.join(f'{h}:{m}' for h, m in sorted(pairs))}")
                continue
            print(f"python benchmarks/frontier.py --settings {setting} {run_flags(setting, every_run)} --only auto "
                  f"--auto-rules auto --auto-round-epochs '' --auto-cadences {','.join(f'{h}:{m}' for h, m in sorted(pairs))} "
                  f"--auto-cadence-family {family} --seeds 0 --resume --out {FABRIC_OUT}"
                  + (f" --merge {FABRIC_OUT}.csv" if os.path.exists(os.path.join(REPO_ROOT, FABRIC_OUT + '.csv')) else ""))
        return 0
    by_case: dict[tuple[str, str], list[dict]] = {}
    summaries: dict[tuple[str, float], tuple[list[str], list[str]]] = {}
    for r in runs:
        by_case.setdefault((r["setting"], r["target"]), []).append(r)
    for (setting, target), rows in by_case.items():
        d = params[rows[0]["model"]]
        if measured_step(compute, rows[0]["model"], "fedavg") is None:
            continue  # never measured here (scaling.csv): priced at stated step times only, in the per-row report
        table, winners, fda_over_avg = fastest(rows, d, compute)
        summaries[setting, float(target)] = (winners, fda_over_avg)
        if not args.markdown:
            print_report(f"{setting}, target {target}: modelled wall time to the target (K ranks, d = {d:,})",
                         ["fabric", "family's fastest run", "steps", "model syncs", "seconds", ""], table,
                         "model syncs: model AllReduces to the target, from the run's measured bytes; seconds: modelled")
    if args.markdown:
        print("\n".join(markdown(summaries, frontier_analysis.read_points(args.frontier))))
        return 0
    names = list(FABRICS)
    print_report("Fastest family per setting, target and fabric (its lead over the runner-up), and FedAvg's fastest "
                 "time over FDA's (above 1: FDA is faster)", ["setting", "target", *names, *(f"FedAvg/FDA {n}" for n in names)],
                 [[s, f"{t:g}", *w, *r] for (s, t), (w, r) in summaries.items()],
                 "FDA: the faster of LinearFDA and SketchFDA, tuned Θ or auto; - where one of them missed the target")
    fab = "; ".join(f"{name}: {f.gbps:g} Gb/s, α = {f.latency_us:g} µs" for name, f in FABRICS.items())
    print(f"fabrics (stated, not measured): {fab}. compute per step: scaling.csv's one-rank CPU time of this machine.")
    labels = {run_label(r) for r in runs}
    for name in (*args.free, args.baseline):
        # said, not silently ignored: the CSVs have no such run (yet); a fabric label's runs: the note below
        if name not in labels and not name.endswith(FABRIC_AUTO):
            csvs = ", ".join(os.path.relpath(f, REPO_ROOT) for f in args.frontier)
            print(f"note: no run labelled {name!r} reached any target in {csvs}; its columns are '-'")
    report_rows = rows_of()
    for family in dict.fromkeys(f for _, f in missing):  # said, not silently left out
        lacking = [s for s, f in missing if f == family]
        print(f"note: '{family}{FABRIC_AUTO}': {len(lacking)} settings lack runs of the (H, m) their rows ask for "
              f"({', '.join(lacking)}); those rows have no verdict (time_to_accuracy.py --cadences prints the commands)")
    row_report(report_rows, args.collective, args.baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
