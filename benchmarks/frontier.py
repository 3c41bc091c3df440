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

Outputs, in ``benchmarks/results/``: ``frontier.csv`` (one row per run and target),
``frontier.png`` (GB on a log axis against steps, one panel per setting and target, each
family's Pareto frontier drawn as a line) and ``frontier.txt`` (the printed report). Run files and each setting's
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
whose point a merged CSV already holds for every seed and target asked is not run again (a
target it lacks: run again, or with ``--resume`` only scored again from its run file), so a sweep
interrupted on one machine resumes on another from its CSV alone. ``--only`` runs part
of a setting's families (``synchronous,fedavg,linearfda,sketchfda,auto,paper,diloco``), e.g. the
paper's baseline alone beside points already in a merged CSV:

    python benchmarks/frontier.py --settings lenet5/iid@4 --paper-baseline 0.1 --only paper --merge benchmarks/results/frontier.csv

``--auto-cadences H:M,...`` adds LinearFDA ``--theta auto`` runs of horizon H steps checked
every M steps (what ``--theta-fabric`` picks on a fabric; ``time_to_accuracy.py --cadences``
prints the pairs its rows need, ``--auto-cadence-family diloco+linear`` runs them under DiLoCo's
outer step), and ``--diloco-steps 50,500`` DiLoCo's rounds of H inner steps.

A setting's ``/OPTIMIZER:LR`` sets the local optimizer of every run (FDA and FedAvg alike);
without it each strategy trains with its preset (Adam 1e-3 for FDA and FedAvg). The CSV
records each point's optimizer, learning rate and seeds. ``--paper-baseline LR`` adds the
FDA paper's own comparison, FedAvg with SGD at LR in 1-epoch rounds against FDA with Adam,
as family ``fedavg-sgd``: reported on its own line, never counted as a FedAvg point.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass

import comm_cost
from _common import REPO_ROOT, RESULTS, print_table
from frontier_analysis import (AUTO_GB, AUTO_STEPS, CONFIRM, FDA, ONLY, PAPER, SLACK, family_of, knob_of, merge,
                               pareto, points, read_points, regimes, report, target_blind, write_points)

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
#: The frontier's training set (FashionMNIST) and batch: an epoch is ceil(60 000 / K / 32) steps per rank.
TRAIN_SAMPLES, BATCH = 60_000, 32
DEFAULT_SETTINGS = "lenet5/iid@4,lenet5/sorted:60@4,lenet5/iid@8=0.88,lenet5/sorted:60@8=0.88"


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
    p.add_argument("--diloco-steps", default="",
                   help="DiLoCo's round lengths H in inner steps, e.g. 50,200,500 (its preset: inner AdamW, outer "
                        "Nesterov SGD 0.7/0.9; published H = 500; a setting's /OPTIMIZER:LR replaces the inner "
                        "optimizer, as for every run); default none")
    p.add_argument("--no-auto", action="store_true", help="leave out the --theta auto runs")
    p.add_argument("--auto-rules", default="auto,auto-once",
                   help="which Θ rules the auto runs use: auto (re-calibrated every round, horizons --auto-round-epochs), "
                        "auto-once (one calibration round of --auto-epochs); default both")
    p.add_argument("--auto-round-epochs", default="1",
                   help="--theta-round-epochs values (the horizon H) for LinearFDA's --theta auto runs (SketchFDA: the "
                        "first only; default 1)")
    p.add_argument("--auto-cadences", default="", metavar="H:M[,...]",
                   help="also run LinearFDA --theta auto with round horizon H steps and the state reduced every M "
                        "steps, each pair given (what --theta-fabric picks on a fabric: time_to_accuracy.py --cadences "
                        "prints the pairs its rows ask for)")
    p.add_argument("--auto-cadence-family", default="linearfda", metavar="FAMILY",
                   help="the strategy of the --auto-cadences runs: linearfda (default) or a rule under LinearFDA's "
                        "trigger, e.g. diloco+linear (DiLoCo's outer step, rounds ended by the variance)")
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
    p.add_argument("--out", default=os.path.join(RESULTS, "frontier"),
                   help="CSV/PNG/TXT path prefix (default benchmarks/results/frontier)")
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
        steps = [x.strip() for x in args.diloco_steps.split(",") if x.strip()]
        if not all(x.isdigit() and int(x) >= 1 for x in steps):
            raise ValueError(f"--diloco-steps {args.diloco_steps}: give whole round lengths >= 1 step, e.g. 50,200,500")
        args.diloco_steps = [int(x) for x in steps]
        args.auto_epochs = [float(x) for x in args.auto_epochs.split(",") if x.strip()]
        args.auto_round_epochs = [float(x) for x in args.auto_round_epochs.split(",") if x.strip()]
        args.auto_rules = {r.strip() for r in args.auto_rules.split(",") if r.strip()}
        args.auto_cadences = [parse_cadence(x) for x in args.auto_cadences.split(",") if x.strip()]
        cadence_family_flags(args.auto_cadence_family)
        if not args.auto_rules <= {"auto", "auto-once"}:
            raise ValueError(f"--auto-rules {','.join(sorted(args.auto_rules))}: choose from auto,auto-once")
    except ValueError as exc:
        p.error(str(exc))
    return args


def parse_cadence(text: str) -> tuple[int, int]:
    """'H:M' -> (H, M), two whole numbers of steps >= 1."""
    h, _, m = text.strip().partition(":")
    if not (h.isdigit() and m.isdigit() and int(h) >= 1 and int(m) >= 1):
        raise ValueError(f"--auto-cadences {text.strip()!r}: give HORIZON:EVERY in whole steps >= 1, e.g. 86:86")
    return int(h), int(m)


def cadence_family_flags(family: str) -> list[str]:
    """The strategy flags of the cadence runs' family: an FDA strategy (``linearfda``, ``sketchfda``),
    or ``RULE+linear``/``RULE+sketch``, another rule whose rounds an FDA trigger ends (``diloco+linear``:
    DiLoCo's outer step); ``ValueError`` naming the choices otherwise."""
    if family not in ("linearfda", "sketchfda") and not family.endswith(("+linear", "+sketch")):
        raise ValueError(f"--auto-cadence-family {family}: give linearfda, sketchfda or RULE+linear, e.g. diloco+linear")
    entry = comm_cost.parse_entry(family)
    return ["--strategy", entry.name, *(["--trigger", entry.trigger_flag] if entry.trigger_flag else [])]


def steps_per_epoch(workers: int) -> int:
    """Local steps of one epoch on each of ``workers`` ranks (FashionMNIST, batch 32)."""
    return math.ceil(TRAIN_SAMPLES / workers / BATCH)


def targets_of(args, setting: Setting) -> list[float]:
    text = setting.targets or args.targets or MODELS[setting.model]["targets"]
    return sorted(float(x) for x in text.split(",") if x.strip())


def comm_cost_args(args, setting: Setting) -> argparse.Namespace:
    """comm_cost's arguments for one setting: every family, trained to the highest target."""
    own = MODELS[setting.model]
    only = args.only
    entries = (["synchronous"] * ("synchronous" in only) + [f"fedavg:local-epochs={e:g}" for e in args.fedavg_epochs
                                                            if "fedavg" in only]
               + [f for f in FDA if f in only]
               + [f"diloco:tau={h}" for h in args.diloco_steps if "diloco" in only])
    if args.paper_baseline is not None and "paper" in only:
        entries.append(f"fedavg:local-epochs=1:optimizer=sgd:lr={args.paper_baseline:g}")
    if not args.no_auto and "auto" in only and "auto" in args.auto_rules:
        for i, h in enumerate(args.auto_round_epochs):  # the horizon always spelled out: run files of the old rule differ
            flag = f":theta-round-epochs={h:g}"
            entries += [f"linearfda:theta=auto{flag}"] + ([f"sketchfda:theta=auto{flag}"] if i == 0 else [])
    if "auto" in only:  # H steps as the epochs --theta-round-epochs takes: round(E · steps per epoch) = H
        entries += [f"{args.auto_cadence_family}:theta=auto:theta-round-epochs={h / steps_per_epoch(setting.workers):.9g}"
                    f":fda-every={m}" for h, m in args.auto_cadences]
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


def job_key(job) -> tuple[str, str]:
    """(family, knob) of a planned run, as :func:`points` will name its point."""
    row = dict(family=job.entry.family, entry=job.entry.text, theta="" if job.theta is None else job.theta)
    return family_of(row), knob_of(row)


def unmeasured(setting: Setting, jobs: list, merged: list[dict], targets: list[float] | None = None) -> list:
    """The jobs whose configuration (family, knob) lacks a seed in the merged points at one of
    ``targets`` (None: at any): a configuration runs all its seeds or none, so that its point
    stays a median over them all; with ``--resume`` a finished run is only scored again."""
    have: dict[tuple, set] = {}
    for p in merged:
        have.setdefault((p["setting"], p["family"], p["knob"], float(p["target"])), set()).update(str(p["seed"]).split(";"))
        have.setdefault((p["setting"], p["family"], p["knob"], None), set()).update(str(p["seed"]).split(";"))
    configs: dict[tuple[str, str], list] = {}
    for job in jobs:
        configs.setdefault(job_key(job), []).append(job)
    return [job for key, group in configs.items()
            if not all(str(j.seed) in have.get((setting.name, *key, t), ()) for j in group for t in (targets or [None]))
            for job in group]


def main(argv=None) -> int:
    args = parse(argv)
    merged = read_points(args.merge)
    plans = [(s, comm_cost_args(args, s)) for s in args.settings]
    for setting, cargs in plans:
        jobs = unmeasured(setting, comm_cost.plan(cargs), merged, targets_of(args, setting))
        comm_cost.validate(jobs)
        if args.dry_run:
            print(f"# {setting.name}: {len(jobs)} runs")
            for job in jobs:
                print(f"mpiexec -n {job.workers} python -m fdahpc.train {' '.join(job.flags)}")
    if args.dry_run:
        return 0
    all_points, failures = [], []
    for setting, cargs in plans:
        jobs = unmeasured(setting, comm_cost.plan(cargs), merged, targets_of(args, setting))
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
    write_points(args.out + ".csv", all_points)
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
