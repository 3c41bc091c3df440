"""FDA's communication frontier against FedAvg (Local-SGD): bytes against steps to a target.

For each setting (model, partition, K) the script runs, as real MPI jobs through
comm_cost's machinery, FedAvg with rounds of ¼, ½, 1 and 2 epochs, LinearFDA and
SketchFDA over a Θ grid wide enough that the largest Θ syncs less often than the
longest FedAvg round, FDA with ``--theta auto``, and Synchronous once. Every run trains to
the highest target (or the epoch cap); the step and the bytes at which it first reached
each lower target are read from its evaluation series (``eval/accuracy``,
``eval/comm_bytes``), so one run serves every target.

Printed, per (setting, target):

- every run's steps and GB to the target;
- for each FedAvg point, the cheapest FDA run that reaches the target in no more steps,
  and FedAvg's GB over that run's (goal: >= 2, "FDA dominates");
- Synchronous against the cheapest FDA run in no more steps than Synchronous (goal >= 50x);
- ``--theta auto`` against the tuned Θ of the same trigger: the cheapest tuned run, and the
  cheapest tuned run in no more steps than auto (goal: auto's GB <= 1.5x at <= the steps).

With several seeds a configuration's steps and GB are the medians over the seeds that
reached the target (and it counts as reaching it only if most seeds did).

Outputs: ``benchmarks/frontier.csv`` (one row per run and target), ``frontier.png`` (GB on
a log axis against steps, one panel per setting and target, each family's Pareto frontier
drawn as a line) and ``frontier.txt`` (the printed report). Run files and each setting's
comm_cost CSV go to ``runs/frontier/``; ``--resume`` reuses every finished run, so adding a
setting or a Θ runs only what is new, and ``--resume`` with nothing new just rebuilds the
report.

    python benchmarks/frontier.py [--settings lenet5/iid@4,...] [--seeds 0] [--resume] [--dry-run]
    python benchmarks/frontier.py --settings lenet5/classes:2@8/sgd:0.05     # every run with SGD 0.05
    python benchmarks/frontier.py --settings lenet5/iid@4 --paper-baseline 0.05

Run files live in ``--workdir`` and are not kept between machines; the CSV is what lasts.
``--merge CSV[,CSV...]`` starts from the points of earlier CSVs (this script's own ``--out``
ones) and lets this invocation's runs add to them or replace the same (setting, family,
knob, target): the report, figure and CSV then cover every setting ever run, and
``--merge`` with no ``--settings`` runs nothing and only rebuilds them. A configuration
whose point a merged CSV already holds for every seed asked is not run again, so a sweep
interrupted on one machine resumes on another from its CSV alone. ``--only`` runs part
of a setting's families (``synchronous,fedavg,linearfda,sketchfda,auto,paper``), e.g. the
paper's baseline alone beside points already in a merged CSV:

    python benchmarks/frontier.py --settings lenet5/iid@4 --paper-baseline 0.1 --only paper --merge benchmarks/frontier.csv

A setting's ``/OPTIMIZER:LR`` sets the local optimizer of every run (FDA and FedAvg alike);
without it each strategy trains with its preset (Adam 1e-3 for FDA and FedAvg). The CSV
records each point's optimizer, learning rate and seeds. ``--paper-baseline LR`` adds the
FDA paper's own comparison, FedAvg with SGD at LR in 1-epoch rounds against FDA with Adam,
as family ``fedavg-sgd``: reported on its own line, never counted as a FedAvg point.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
import comm_cost
from _common import REPO_ROOT, median, print_table, read_run

HERE = os.path.dirname(os.path.abspath(__file__))

#: Per model: the targets (the highest is what runs train to), the epoch cap, the Θ grid
#: (comm_cost's ``--thetas`` syntax) and how often to evaluate. The grids come from a
#: ``--log-variance`` pilot at K=4, iid, no sync: LeNet-5's LinearFDA estimate H reached 17 at
#: step 200 and 30 at step 450 (the exact variance 4 and 8, which SketchFDA tracks), the
#: CNN's H 160 at step 180 (variance 68). The largest Θ syncs less often than 2-epoch rounds.
MODELS = {
    "lenet5": dict(targets="0.88,0.90", max_epochs=15, thetas="linear=2,4,8,16,32,64;sketch=8", eval_every=100),
    "cnn": dict(targets="0.88,0.90", max_epochs=6, thetas="linear=64,256,1024;sketch=32,256", eval_every=100),
}
FEDAVG_EPOCHS = (0.25, 0.5, 1.0, 2.0)
DEFAULT_SETTINGS = "lenet5/iid@4,lenet5/sorted:60@4,lenet5/iid@8=0.88,lenet5/sorted:60@8=0.88"
FAMILIES = ("synchronous", "fedavg", "linearfda", "sketchfda", "fedavg-sgd")  # plot order
FDA = ("linearfda", "sketchfda")  #: the dynamic-averaging families
#: ``--only``'s names: the families of a setting's runs (``auto``: FDA with ``--theta auto``;
#: ``paper``: ``--paper-baseline``'s FedAvg).
ONLY = ("synchronous", "fedavg", "linearfda", "sketchfda", "auto", "paper")
#: ``--paper-baseline``: the FDA paper's own FedAvg (SGD clients, 1-epoch rounds) against FDA
#: with the presets' Adam: reported apart, not counted as a like-for-like FedAvg point.
PAPER = "fedavg-sgd"


@dataclass(frozen=True)
class Setting:
    model: str
    partition: str
    workers: int
    targets: str | None = None  # this setting's own targets (MODEL/PARTITION@K=0.88,0.9)
    optimizer: str | None = None  # the local optimizer of every run (MODEL/PARTITION@K/OPTIMIZER:LR); None: presets'
    lr: float | None = None

    @property
    def name(self) -> str:
        own = f"/{self.optimizer}:{self.lr:g}" if self.optimizer else ""
        return f"{self.model}/{self.partition}@{self.workers}{own}"

    @property
    def folder(self) -> str:
        own = f"-{self.optimizer}{self.lr:g}" if self.optimizer else ""  # none: the folders runs were made in before
        return "".join(c if c.isalnum() or c in "-." else "_" for c in f"{self.model}-{self.partition}-k{self.workers}{own}")

    def flags(self) -> list[str]:
        """The training flags the setting adds to every run (FDA and FedAvg alike)."""
        return ["--optimizer", self.optimizer, "--lr", f"{self.lr:g}"] if self.optimizer else []


def parse_setting(text: str) -> Setting:
    from fdahpc.worker import OPTIMIZERS

    text, _, targets = text.strip().partition("=")
    model, _, rest = text.strip().partition("/")
    partition, _, tail = rest.rpartition("@")
    k, _, own = tail.partition("/")
    optimizer, _, lr = own.partition(":")
    usage = "use MODEL/PARTITION@K[/OPTIMIZER:LR], e.g. lenet5/sorted:60@4 or lenet5/classes:2@8/sgd:0.05"
    if not model or not partition or not k.isdigit() or (own and not lr):
        raise ValueError(f"--settings entry {text!r}: {usage}")
    if model not in MODELS:
        raise ValueError(f"--settings entry {text!r}: no defaults for model {model!r}; known: {', '.join(MODELS)}")
    if own and optimizer not in OPTIMIZERS:
        raise ValueError(f"--settings entry {text!r}: optimizer {optimizer!r} unknown; choose one of {', '.join(OPTIMIZERS)}")
    try:
        rate = float(lr) if own else None
    except ValueError:
        raise ValueError(f"--settings entry {text!r}: learning rate {lr!r} is not a number; {usage}") from None
    return Setting(model, partition, int(k), targets.replace(";", ",") or None, optimizer or None, rate)


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", default=None,
                   help=f"comma-separated MODEL/PARTITION@K[=T1;T2] (own targets, ';'-separated; default {DEFAULT_SETTINGS}, "
                        "none with --merge)")
    p.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    p.add_argument("--targets", help="comma-separated target accuracies for every setting (default: the model's, e.g. lenet5 0.88,0.90)")
    p.add_argument("--thetas", help="Θ grid for every setting, comm_cost syntax (default: the model's)")
    p.add_argument("--max-epochs", type=float, help="epoch cap per run (default: the model's)")
    p.add_argument("--fedavg-epochs", default=",".join(f"{e:g}" for e in FEDAVG_EPOCHS),
                   help="FedAvg round lengths in epochs (default 0.25,0.5,1,2)")
    p.add_argument("--no-auto", action="store_true", help="leave out the --theta auto runs")
    p.add_argument("--auto-rules", default="auto,auto-once",
                   help="which Θ rules the auto runs use: auto (re-calibrated every round, horizons --auto-round-epochs), "
                        "auto-once (one calibration round of --auto-epochs); default both")
    p.add_argument("--auto-round-epochs", default="1",
                   help="--theta-round-epochs values (the horizon H) for LinearFDA's --theta auto runs (SketchFDA: the "
                        "first only; default 1)")
    p.add_argument("--auto-epochs", default="1",
                   help="--theta-auto-epochs values for LinearFDA's --theta auto-once runs (SketchFDA: the first only; default 1)")
    p.add_argument("--paper-baseline", type=float, metavar="LR",
                   help="also run the FDA paper's own comparison: FedAvg with SGD at LR in 1-epoch rounds, against "
                        "FDA with its Adam (not like for like: reported apart, outside the domination count)")
    p.add_argument("--only", help=f"comma-separated families to run of each setting ({', '.join(ONLY)}; default all)")
    p.add_argument("--merge", help="comma-separated CSVs of earlier frontier runs: their points are kept unless "
                                   "this invocation measures the same (setting, family, knob, target)")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--resume", action="store_true", help="reuse finished runs (an unchanged sweep only rebuilds the report)")
    p.add_argument("--dry-run", action="store_true", help="check the flags and print the commands")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before one run is killed (default 1800)")
    p.add_argument("--workdir", default=os.path.join(REPO_ROOT, "runs", "frontier"))
    p.add_argument("--out", default=os.path.join(HERE, "frontier"), help="CSV/PNG/TXT path prefix (default benchmarks/frontier)")
    args = p.parse_args(argv)
    if args.settings is None and not args.merge:
        args.settings = DEFAULT_SETTINGS
    try:
        args.settings = [parse_setting(s) for s in (args.settings or "").split(",") if s.strip()]
        args.only = set(ONLY) if args.only is None else {f.strip() for f in args.only.split(",") if f.strip()}
        if not args.only <= set(ONLY):
            raise ValueError(f"--only {','.join(sorted(args.only - set(ONLY)))}: unknown; choose from {','.join(ONLY)}")
        if args.only == {"paper"} and args.paper_baseline is None:
            raise ValueError("--only paper: add --paper-baseline LR (the SGD learning rate of the paper's FedAvg)")
        args.merge = [m for m in (args.merge or "").split(",") if m.strip()]
        for path in args.merge:
            if not os.path.exists(path):
                raise ValueError(f"--merge {path}: no such file; give the CSV of an earlier frontier run")
        if not args.settings and not args.merge:
            raise ValueError("--settings: none given; name a setting, or --merge earlier CSVs to rebuild the report")
        if args.paper_baseline is not None and any(s.optimizer for s in args.settings):
            raise ValueError("--paper-baseline compares FDA's preset Adam with SGD FedAvg: leave /OPTIMIZER:LR out of --settings")
        args.fedavg_epochs = [float(x) for x in args.fedavg_epochs.split(",") if x.strip()]
        args.auto_epochs = [float(x) for x in args.auto_epochs.split(",") if x.strip()]
        args.auto_round_epochs = [float(x) for x in args.auto_round_epochs.split(",") if x.strip()]
        args.auto_rules = {r.strip() for r in args.auto_rules.split(",") if r.strip()}
        if not args.auto_rules <= {"auto", "auto-once"}:
            raise ValueError(f"--auto-rules {','.join(sorted(args.auto_rules))}: choose from auto,auto-once")
    except ValueError as exc:
        p.error(str(exc))
    return args


def targets_of(args, setting: Setting) -> list[float]:
    text = setting.targets or args.targets or MODELS[setting.model]["targets"]
    return sorted(float(x) for x in text.split(",") if x.strip())


def comm_cost_args(args, setting: Setting) -> argparse.Namespace:
    """comm_cost's arguments for one setting: every family, trained to the highest target."""
    own = MODELS[setting.model]
    only = args.only
    entries = (["synchronous"] * ("synchronous" in only) + [f"fedavg:local-epochs={e:g}" for e in args.fedavg_epochs
                                                            if "fedavg" in only]
               + [f for f in FDA if f in only])
    if args.paper_baseline is not None and "paper" in only:
        entries.append(f"fedavg:local-epochs=1:optimizer=sgd:lr={args.paper_baseline:g}")
    if not args.no_auto and "auto" in only and "auto" in args.auto_rules:
        for i, h in enumerate(args.auto_round_epochs):  # the horizon always spelled out: run files of the old rule differ
            flag = f":theta-round-epochs={h:g}"
            entries += [f"linearfda:theta=auto{flag}"] + ([f"sketchfda:theta=auto{flag}"] if i == 0 else [])
    if not args.no_auto and "auto" in only and "auto-once" in args.auto_rules:
        for i, w in enumerate(args.auto_epochs):
            flag = "" if w == 1 else f":theta-auto-epochs={w:g}"  # 1 is the default: the plain entry
            entries += [f"linearfda:theta=auto-once{flag}"] + ([f"sketchfda:theta=auto-once{flag}"] if i == 0 else [])
    folder = os.path.join(args.workdir, setting.folder)
    argv = ["--strategies", ",".join(entries), "--thetas", args.thetas or own["thetas"],
            "--workers", str(setting.workers), "--partitions", setting.partition, "--skip", "",
            "--target", f"{targets_of(args, setting)[-1]:g}", "--max-epochs", f"{args.max_epochs or own['max_epochs']:g}",
            "--seeds", args.seeds, "--eval-every", str(own["eval_every"]), "--model", setting.model,
            "--dataset", args.dataset, "--workdir", folder, "--out", os.path.join(folder, "runs"),
            "--timeout", f"{args.timeout:g}", "--baselines", "", f"--extra={' '.join(setting.flags())}"]
    return comm_cost.parse(argv + (["--resume"] if args.resume else []))


# Reading the runs ---------------------------------------------------------------------


def crossing(run: dict, target: float) -> tuple[int, float] | None:
    """(step, GB) of the first evaluation at or above ``target``; None when none was."""
    for step, acc, nbytes in zip(run["eval/step"], run["eval/accuracy"], run["eval/comm_bytes"]):
        if acc >= target:
            return int(step), float(nbytes) / 1e9
    return None


def family_of(row: dict) -> str:
    """comm_cost's family, but the FDA paper's SGD FedAvg (``--paper-baseline``) is its own."""
    return PAPER if row["family"] == "fedavg" and ":optimizer=" in row["entry"] else row["family"]


def knob_of(row: dict) -> str:
    """What distinguishes runs within a family: τ in epochs, Θ, or 'auto'."""
    if family_of(row) == PAPER:
        return f"1 ep, sgd {row['entry'].partition(':lr=')[2]}"
    if row["family"] == "fedavg":
        return row["entry"].partition("local-epochs=")[2] + " ep"
    if row["family"] in FDA:
        if "theta=auto" not in row["entry"]:
            return f"Θ={float(row['theta']):g}"
        horizon = row["entry"].partition("theta-round-epochs=")[2].partition(":")[0]
        if horizon:  # the rule re-calibrated every round
            return f"auto (H {horizon} ep)"
        # auto-once, or the same rule under its earlier name (a plain theta=auto entry without a horizon)
        epochs = row["entry"].partition("theta-auto-epochs=")[2]
        return f"auto-once ({epochs or '1'} ep)"
    return ""


def points(setting: Setting, comm_rows: list[dict], targets: list[float]) -> list[dict]:
    """One point per (configuration, target): medians over the seeds that reached it."""
    import json

    from fdahpc.strategies import PRESETS

    out = []
    by_config: dict[tuple, list[tuple[dict, dict]]] = {}
    for r in comm_rows:
        run = read_run(os.path.join(REPO_ROOT, r["run_file"]))
        by_config.setdefault((family_of(r), knob_of(r)), []).append((r, run))

    def local(run: dict) -> tuple[str, float, int]:
        """The run's local optimizer and learning rate as it trained (the flags or the preset) and its seed."""
        cfg = json.loads(run["config"])
        preset = PRESETS[cfg["strategy"]]
        return cfg["optimizer"] or preset.optimizer, cfg["lr"] or preset.lr, int(cfg["seed"])

    for target in targets:
        for (family, knob), runs in by_config.items():
            hits = [c for c in (crossing(run, target) for _, run in runs) if c is not None]
            reached = len(hits) * 2 > len(runs)
            trained = [local(run) for _, run in runs]  # (optimizer, lr, seed) of each run
            optimizer, lr = trained[0][:2]
            out.append(dict(
                setting=setting.name, model=setting.model, partition=setting.partition, workers=setting.workers,
                optimizer=optimizer, lr=lr, seed=";".join(str(seed) for _, _, seed in trained), target=target, family=family, knob=knob, auto=knob.startswith("auto"), seeds=len(runs), reached_seeds=len(hits),
                reached=reached,
                steps=median(s for s, _ in hits) if reached else median(float(run["steps"]) for _, run in runs),
                gb=median(g for _, g in hits) if reached else median(float(run["comm_bytes"]) / 1e9 for _, run in runs),
                syncs=median(float(run["syncs"]) for _, run in runs),
                final_accuracy=median(float(run["final_accuracy"]) for _, run in runs),
                run_files=";".join(r["run_file"] for r, _ in runs),
            ))
    return out


# The comparisons ----------------------------------------------------------------------


def pareto(pts: list[dict]) -> list[dict]:
    """The points no other point beats in both steps and GB, by increasing steps."""
    front, best_gb = [], float("inf")
    for p in sorted(pts, key=lambda p: (p["steps"], p["gb"])):
        if p["gb"] < best_gb:
            front.append(p)
            best_gb = p["gb"]
    return front


def cheapest_within(pts: list[dict], steps: float) -> dict | None:
    ok = [p for p in pts if p["steps"] <= steps]
    return min(ok, key=lambda p: p["gb"]) if ok else None


#: Issue 24's bar for ``--theta auto``: at most this many times the cheapest tuned Θ's bytes,
#: in at most this many times its steps.
AUTO_GB, AUTO_STEPS = 1.5, 1.1


def auto_check(auto: dict, best: dict) -> bool:
    """Whether an auto run that reached the target is within the bar of the cheapest tuned Θ."""
    return auto["gb"] <= AUTO_GB * best["gb"] and auto["steps"] <= AUTO_STEPS * best["steps"]


def against_fedavg(ok: list[dict]) -> list[tuple[dict, dict | None]]:
    """Each FedAvg point that reached the target, by steps, with the cheapest FDA run (tuned
    Θ or auto) that reached it in no more steps (None: none did)."""
    fda_all = [p for p in ok if p["family"] in FDA]
    return [(p, cheapest_within(fda_all, p["steps"])) for p in sorted(ok, key=lambda p: p["steps"]) if p["family"] == "fedavg"]


def dominates(fedavg: dict, fda: dict | None) -> bool:
    """The goal's domination: FDA in no more steps (``against_fedavg``) at no more than half the GB."""
    return fda is not None and fedavg["gb"] >= 2 * fda["gb"]


#: Issue 24's screen: a regime goes to the confirm stage (three seeds) when one family's
#: frontier needs more than this many times the other's bytes at some step budget.
CONFIRM = 1.5
#: The step slack the beaten family gets in :func:`frontier_leads`: evaluations are 100 steps
#: apart and FedAvg's round lengths few, so a lead must survive 10 % more steps.
SLACK = 1.1


def frontier_leads(ok: list[dict]) -> tuple[tuple[float, dict, dict] | None, tuple[float, dict, dict] | None]:
    """(FDA's lead, FedAvg's lead) in bytes: the most times fewer GB one family's cheapest run
    within a step budget needs than the other's cheapest within ``SLACK`` x that budget, over
    every budget at which one of them reached the target (FDA: tuned Θ and auto), as
    (ratio, the leader's run, the beaten run): the pair a confirm stage reruns. None when no
    budget has both."""
    fda = [p for p in ok if p["family"] in FDA]
    avg = [p for p in ok if p["family"] == "fedavg"]

    def lead(winner: list[dict], loser: list[dict]) -> tuple[float, dict, dict] | None:
        pairs = []
        for steps in sorted({p["steps"] for p in winner}):
            w, l = cheapest_within(winner, steps), cheapest_within(loser, SLACK * steps)
            if l is not None:
                # A run that reached the target before its first model sync (the evaluated
                # average is free, as for every run) spent 0 GB: an unbounded lead.
                pairs.append((l["gb"] / w["gb"] if w["gb"] else math.inf if l["gb"] else 1.0, w, l))
        return max(pairs, key=lambda t: t[0], default=None)

    return lead(fda, avg), lead(avg, fda)


def screen_verdict(fda_lead: float | None, fedavg_lead: float | None) -> str:
    """'FDA ahead' / 'FDA behind' / 'mixed' when a family leads by more than CONFIRM (the
    regime goes to the confirm stage), 'even' otherwise. The leads are ratios, None where the
    family has no budget the other reaches the target within (it is slower at every one)."""
    if fda_lead is None and fedavg_lead is None:
        return "no shared budget"
    ahead, behind = (x is not None and x > CONFIRM for x in (fda_lead, fedavg_lead))
    return {(True, False): "FDA ahead", (False, True): "FDA behind", (True, True): "mixed"}.get((ahead, behind), "even")


def unchecked(auto: dict) -> str:
    """An auto run's verdict where no tuned Θ of its trigger reached the target: the bar has
    nothing to compare with, so the run is reported, not counted as met or missed."""
    if auto["reached"]:
        return f"reached it ({auto['steps']:.0f} steps, {auto['gb']:.4f} GB) where no tuned Θ did: no check"
    return "not reached, nor by any tuned Θ: no check"


def cheapest_tuned(auto: dict, ok: list[dict]) -> dict | None:
    """The cheapest run of ``auto``'s trigger with a tuned Θ that reached the target."""
    tuned = [p for p in ok if p["family"] == auto["family"] and not p["auto"]]
    return min(tuned, key=lambda p: p["gb"]) if tuned else None


def cheapest_theta_edge(g: list[dict], family: str = "linearfda") -> str:
    """Where ``family``'s cheapest tuned Θ sits in its grid at one target: 'grid top' (the
    largest Θ tried), 'reach edge' (every larger Θ tried missed the target within the cap:
    the cheapest Θ is set by the target and the cap) or 'inside' (a larger Θ reached it, at
    more bytes). '-' when no tuned Θ reached the target."""
    tuned = [p for p in g if p["family"] == family and not p["auto"]]
    ok = [p for p in tuned if p["reached"]]
    if not ok:
        return "-"
    best = min(ok, key=lambda p: p["gb"])
    theta = lambda p: float(p["knob"].partition("=")[2])  # noqa: E731
    larger = [p for p in tuned if theta(p) > theta(best)]
    where = "grid top" if not larger else ("reach edge" if not any(p["reached"] for p in larger) else "inside")
    return f"Θ={theta(best):g} ({where})"


def label(p: dict) -> str:
    return f"{p['family']} {p['knob']}".strip()


def fmt(p: dict | None, key: str) -> str:
    if p is None:
        return "-"
    return f"{p[key]:.0f}" if key == "steps" else f"{p[key]:.4f}"


def report(pts: list[dict]) -> list[str]:
    """The printed comparisons; returns the goal verdict lines for the summary."""
    verdicts = []
    groups = list(dict.fromkeys((p["setting"], p["target"]) for p in pts))
    for setting, target in groups:
        g = [p for p in pts if (p["setting"], p["target"]) == (setting, target)]
        ok = [p for p in g if p["reached"]]
        fda = [p for p in ok if p["family"] in FDA and not p["auto"]]
        fda_all = [p for p in ok if p["family"] in FDA]
        print(f"\n=== {setting}, target {target:g} ===")
        rows = [[label(p), f"{p['reached_seeds']}/{p['seeds']}",
                 f"{p['steps']:.0f}" if p["reached"] else f">{p['steps']:.0f}",
                 f"{p['gb']:.4f}" if p["reached"] else f">{p['gb']:.4f}", f"{p['syncs']:.0f}", f"{p['final_accuracy']:.4f}"]
                for p in sorted(g, key=lambda p: (FAMILIES.index(p["family"]) if p["family"] in FAMILIES else 9, p["steps"]))]
        print_table(["run", "reached", "steps", "GB", "syncs (run)", "final acc"], rows)

        pairs = against_fedavg(ok)
        if pairs:
            print("\nEach FedAvg point against the cheapest FDA run (tuned Θ or auto) in no more steps:")
            rows = [[label(p), fmt(p, "steps"), fmt(p, "gb"), label(q) if q else "none", fmt(q, "steps"),
                     fmt(q, "gb"), f"{p['gb'] / q['gb']:.2f}x" if q else "-"] for p, q in pairs]
            print_table(["FedAvg", "steps", "GB", "cheapest FDA in <= steps", "steps", "GB", "FedAvg GB / FDA GB"], rows)
            verdicts.append(f"{setting} @ {target:g}: FDA dominates {sum(dominates(p, q) for p, q in pairs)} of "
                            f"{len(pairs)} FedAvg points (<= steps and <= 1/2 the GB)")
        for p in [p for p in ok if p["family"] == PAPER]:
            q = cheapest_within(fda_all, p["steps"])
            line = (f"the FDA paper's comparison (FedAvg with SGD, FDA with Adam; not like for like): {label(p)} "
                    f"{p['steps']:.0f} steps {p['gb']:.4f} GB; cheapest FDA in <= its steps: "
                    + (f"{label(q)} {q['gb']:.4f} GB ({p['gb'] / q['gb']:.2f}x fewer bytes)" if q else "none"))
            print(f"\n{line[0].upper()}{line[1:]}")
            verdicts.append(f"{setting} @ {target:g}: {line}")
        sync = next((p for p in g if p["family"] == "synchronous"), None)
        if sync is not None:
            q = cheapest_within(fda, sync["steps"]) if sync["reached"] else (min(fda, key=lambda p: p["gb"]) if fda else None)
            gt = "" if sync["reached"] else ">"
            if q:
                print(f"\nSynchronous {gt}{sync['steps']:.0f} steps, {gt}{sync['gb']:.4f} GB; cheapest tuned FDA in no more steps: "
                      f"{label(q)} {q['steps']:.0f} steps, {q['gb']:.4f} GB: {gt}{sync['gb'] / q['gb']:.0f}x fewer bytes")
                verdicts.append(f"{setting} @ {target:g}: FDA {gt}{sync['gb'] / q['gb']:.0f}x fewer bytes than Synchronous "
                                f"in {q['steps'] / sync['steps']:.2f} of its steps{'' if sync['reached'] else ' (Synchronous did not reach the target: a bound)'}")
        for auto in [p for p in g if p["auto"]]:
            best = cheapest_tuned(auto, ok)
            if best is None:
                line = f"{label(auto)} {unchecked(auto)}"
                print(line)
                verdicts.append(f"{setting} @ {target:g}: {line}")
                continue
            tuned = [p for p in fda if p["family"] == auto["family"]]
            near = cheapest_within(tuned, auto["steps"]) if auto["reached"] else None
            if not auto["reached"]:
                line = f"{label(auto)} did not reach the target ({auto['steps']:.0f} steps, {auto['gb']:.4f} GB): auto check missed"
            else:
                met = auto_check(auto, best)
                line = (f"{label(auto)} {auto['steps']:.0f} steps {auto['gb']:.4f} GB; cheapest tuned {label(best)} "
                        f"{best['steps']:.0f} steps {best['gb']:.4f} GB ({auto['gb'] / best['gb']:.2f}x its GB, "
                        f"{auto['steps'] / best['steps']:.2f}x its steps: auto check {'met' if met else 'missed'}); "
                        "cheapest tuned in <= auto's steps: "
                        + (f"{label(near)} {near['gb']:.4f} GB ({auto['gb'] / near['gb']:.2f}x)" if near else "none"))
            print(line)
            verdicts.append(f"{setting} @ {target:g}: {line}")
    return verdicts


def regimes(pts: list[dict]) -> list[list[str]]:
    """One row per (setting, target): the fewest steps each family reached the target in,
    each family's lead in bytes (:func:`frontier_leads`), the screen's verdict, the FedAvg
    points FDA dominates, where LinearFDA's cheapest tuned Θ sits in its grid
    (:func:`cheapest_theta_edge`), and each auto run's check."""
    rows = []
    for setting, target in dict.fromkeys((p["setting"], p["target"]) for p in pts):
        g = [p for p in pts if (p["setting"], p["target"]) == (setting, target)]
        ok = [p for p in g if p["reached"]]
        pairs = against_fedavg(ok)
        checks = []
        for auto in sorted((p for p in g if p["auto"]), key=label):
            best = cheapest_tuned(auto, ok)
            if best is None:
                verdict = unchecked(auto)
            elif auto["reached"]:
                verdict = (f"{auto['gb'] / best['gb']:.2f}x GB, {auto['steps'] / best['steps']:.2f}x steps: "
                           f"{'met' if auto_check(auto, best) else 'missed'}")
            else:
                verdict = "not reached: missed"
            checks.append(f"{label(auto)} {verdict}")
        fewest = [min((p["steps"] for p in ok if p["family"] in fams), default=None)
                  for fams in (FDA, ("fedavg",))]
        leads = frontier_leads(ok)
        rows.append([setting, f"{target:g}", " / ".join("-" if s is None else f"{s:.0f}" for s in fewest),
                     " / ".join("-" if x is None else f"{format_lead(x[0])} ({x[1]['knob']} vs {x[2]['knob']}, "
                                f"{seed_count(x[1], x[2])})" for x in leads),
                     screen_verdict(*(x and x[0] for x in leads)), f"{sum(dominates(p, q) for p, q in pairs)} of {len(pairs)}",
                     cheapest_theta_edge(g), "; ".join(checks) or "-"])
    return rows


def target_blind(pts: list[dict], family: str = "linearfda") -> list[list[str]]:
    """Whether one Θ passes the auto check at every target of a setting: one row per setting
    with two or more targets, giving the cheapest tuned Θ at each target and the tuned Θs that
    stay within ``AUTO_GB`` x the cheapest's GB in ``AUTO_STEPS`` x its steps at all of them.
    A rule that sets Θ from the run alone (before any target is known) yields one Θ for all
    targets of a run, so 'none' here means no such rule can pass the check on that setting,
    as far as the tried grid shows (a Θ between two grid points is not ruled out)."""
    rows = []
    for setting in dict.fromkeys(p["setting"] for p in pts):
        reached = {(p["knob"], p["target"]): p for p in pts
                   if p["setting"] == setting and p["family"] == family and not p["auto"] and p["reached"]}
        best = {}
        for (_, t), p in sorted(reached.items(), key=lambda kv: kv[0][1]):
            if t not in best or p["gb"] < best[t]["gb"]:
                best[t] = p
        if len(best) < 2:
            continue
        passing = [k for k in dict.fromkeys(k for k, _ in reached)
                   if all((k, t) in reached and auto_check(reached[k, t], b) for t, b in best.items())]
        rows.append([setting, ", ".join(f"{t:g}: {b['knob']}" for t, b in best.items()), ", ".join(passing) or "none"])
    return rows


def seed_count(a: dict, b: dict) -> str:
    """How many seeds the two points of a lead are medians over: '3 seeds', '1 seed', or '3/1 seeds'."""
    n, m = a["seeds"], b["seeds"]
    return f"{n} seed{'s' * (n > 1)}" if n == m else f"{n}/{m} seeds"


def format_lead(lead: float) -> str:
    """``2.05x``; a winner that spent no bytes (reached before its first sync) leads without bound."""
    return "unbounded" if math.isinf(lead) else f"{lead:.2f}x"


# The figure ---------------------------------------------------------------------------

STYLE = {"synchronous": ("s", "black"), "fedavg": ("D", "tab:gray"), "linearfda": ("o", "tab:blue"),
         "sketchfda": ("^", "tab:orange"), PAPER: ("P", "tab:red")}


def plot(pts: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((p["setting"], p["target"]) for p in pts))
    cols = min(4, len(groups))
    nrows = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 4.2 * nrows), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    for ax, (setting, target) in zip(axes.flat, groups):
        g = [p for p in pts if (p["setting"], p["target"]) == (setting, target)]
        for family, (marker, colour) in STYLE.items():
            fam = [p for p in g if p["family"] == family]
            ok = [p for p in fam if p["reached"] and not p["auto"]]
            if ok:
                ax.scatter([p["gb"] for p in ok], [p["steps"] for p in ok], marker=marker, s=40, color=colour, label=family)
                front = pareto(ok)
                if len(front) > 1:
                    ax.plot([p["gb"] for p in front], [p["steps"] for p in front], color=colour, lw=1.2)
                for p in ok:
                    if p["knob"]:
                        ax.annotate(p["knob"], (p["gb"], p["steps"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
            auto = [p for p in fam if p["auto"] and p["reached"]]
            if auto:
                ax.scatter([p["gb"] for p in auto], [p["steps"] for p in auto], marker="*", s=140, color=colour,
                           edgecolors="black", linewidths=0.6, label=f"{family} Θ auto")
            miss = [p for p in fam if not p["reached"]]
            if miss:
                ax.scatter([p["gb"] for p in miss], [p["steps"] for p in miss], marker=marker, s=40,
                           facecolors="none", edgecolors=colour)
        ax.set_xscale("log")
        ax.set_xlabel("GB to target (log)")
        ax.set_ylabel("local steps to target")
        ax.set_title(f"{setting}, target {target:g}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    fig.suptitle("FDA against FedAvg: lines = each family's Pareto frontier; hollow = target not reached (final values)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


FIELDS = ["setting", "model", "partition", "workers", "optimizer", "lr", "seed", "target", "family", "knob", "auto", "seeds", "reached_seeds",
          "reached", "steps", "gb", "syncs", "final_accuracy", "run_files"]
_TYPES = dict(workers=int, lr=float, target=float, seeds=int, reached_seeds=int, gb=float, syncs=float,
              steps=lambda v: int(float(v)) if float(v).is_integer() else float(v),  # a median of two seeds may be x.5
              final_accuracy=float, auto=lambda v: v == "True", reached=lambda v: v == "True")


def read_points(paths: list[str]) -> list[dict]:
    """The points of earlier ``--out`` CSVs, typed as :func:`points` makes them."""
    out = []
    for path in paths:
        with open(path, newline="") as fh:
            # Older CSVs lack the optimizer, lr and seed columns: those stay empty ("the presets").
            out += [{k: row.get(k, "") if row.get(k, "") == "" else _TYPES.get(k, str)(row[k]) for k in FIELDS}
                    for row in csv.DictReader(fh)]
    for p in out:
        p["knob"] = current_knob(str(p["knob"]))
    return out


def current_knob(knob: str) -> str:
    """CSVs written before the per-round rule call the one-calibration rule 'auto (N ep)'."""
    if knob.startswith("auto (") and not knob.startswith("auto (H "):
        return "auto-once" + knob[len("auto"):]
    return knob


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with each point that ``new`` measures again replaced, then ``new``'s other points."""
    key = lambda p: (p["setting"], p["family"], p["knob"], p["target"])  # noqa: E731
    merged = {key(p): p for p in old}
    merged.update((key(p), p) for p in new)
    return list(merged.values())


def job_key(job) -> tuple[str, str]:
    """(family, knob) of a planned run, as :func:`points` will name its point."""
    row = dict(family=job.entry.family, entry=job.entry.text, theta="" if job.theta is None else job.theta)
    return family_of(row), knob_of(row)


def unmeasured(setting: Setting, jobs: list, merged: list[dict]) -> list:
    """The jobs whose configuration (family, knob) lacks a seed in the merged points: a
    configuration runs all its seeds or none, so that its point stays a median over them all."""
    have = {(p["setting"], p["family"], p["knob"]): set(str(p["seed"]).split(";")) for p in merged}
    configs: dict[tuple[str, str], list] = {}
    for job in jobs:
        configs.setdefault(job_key(job), []).append(job)
    return [job for key, group in configs.items()
            if not all(str(j.seed) in have.get((setting.name, *key), ()) for j in group) for job in group]


def main(argv=None) -> int:
    args = parse(argv)
    merged = read_points(args.merge)
    plans = [(s, comm_cost_args(args, s)) for s in args.settings]
    for setting, cargs in plans:
        jobs = unmeasured(setting, comm_cost.plan(cargs), merged)
        comm_cost.validate(jobs)
        if args.dry_run:
            print(f"# {setting.name}: {len(jobs)} runs")
            for job in jobs:
                print(f"mpiexec -n {job.workers} python -m fdahpc.train {' '.join(job.flags)}")
    if args.dry_run:
        return 0
    all_points, failures = [], []
    for setting, cargs in plans:
        jobs = unmeasured(setting, comm_cost.plan(cargs), merged)
        if not jobs:
            print(f"frontier: {setting.name}: every run is in the merged CSVs", flush=True)
            continue
        print(f"frontier: {setting.name}: {len(jobs)} runs to {cargs.target:g} (cap {cargs.max_epochs:g} epochs) in {cargs.workdir}",
              flush=True)
        rows, failed, _ = comm_cost.run_jobs(jobs, cargs, cargs.out + ".csv")
        failures += failed
        all_points += points(setting, rows, targets_of(args, setting))
    all_points = merge(merged, all_points)
    if not all_points:
        print("frontier: no run finished\n" + "\n".join(failures), file=sys.stderr)
        return 1
    with open(args.out + ".csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for p in all_points:
            writer.writerow({k: p[k] for k in FIELDS})
    text = io.StringIO()
    with redirect_stdout(text):
        verdicts = report(all_points)
        print("\nSummary:")
        for v in verdicts:
            print("  " + v)
        print("\nPer regime: the fewest steps to the target (FDA / FedAvg); each family's lead (FDA / FedAvg): the most "
              f"times fewer GB its cheapest run within a step budget needs than the other's within {SLACK:g}x that budget "
              "(the pair that sets it, and the seeds each point is a median over; "
              f"verdict: a lead over {CONFIRM:g}x); FedAvg points FDA "
              "dominates (<= steps, <= 1/2 the GB); LinearFDA's cheapest tuned Θ and where it sits in the grid "
              "(reach edge: every larger Θ missed the target in the cap); --theta auto against the cheapest tuned Θ of its trigger "
              f"(check: <= {AUTO_GB:g}x its GB in <= {AUTO_STEPS:g}x its steps)")
        print_table(["setting", "target", "fewest steps", "lead FDA / FedAvg", "verdict", "dominated", "cheapest Θ", "auto"],
                    regimes(all_points))
        print(f"\nOne Θ for every target? Per setting, LinearFDA's cheapest tuned Θ at each target, and the tuned Θs within "
              f"{AUTO_GB:g}x its GB in {AUTO_STEPS:g}x its steps at all of them ('none': no rule that fixes Θ before the "
              "target is known can pass the auto check there, within the tried grid)")
        print_table(["setting", "cheapest Θ per target", "Θ passing at every target"], target_blind(all_points))
    print(text.getvalue(), end="")
    with open(args.out + ".txt", "w") as fh:
        fh.write(text.getvalue())
    plot(all_points, args.out + ".png")
    print(f"\nrows: {args.out}.csv\nreport: {args.out}.txt\nplot: {args.out}.png")
    if failures:
        print("failed runs:\n  " + "\n  ".join(failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
