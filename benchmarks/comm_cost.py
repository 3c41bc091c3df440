"""Communication to reach a target accuracy: FDA against Synchronous, FedAvg and FedOpt.

Trains LeNet-5 on FashionMNIST (all 60 000 training images) as real MPI jobs
(``mpiexec -n K python -m fdahpc.train``), one job per (partition, K, strategy, Θ, seed),
each stopping at ``--target`` test accuracy or after ``--max-epochs``. From each run file
it reads ``steps_to_target`` and ``comm_bytes_to_target`` (the paper's count, ALGORITHMS.md
§1: model bytes up and down per sync plus monitoring state; evaluation traffic is not
counted), and prints one row per run plus, for each (partition, K) and each family of
``--baselines`` present (default synchronous, fedadam, fedavgm), the ratio baseline GB /
median GB of every other strategy and their steps relative to the baseline. A baseline
with several configurations (e.g. ``fedadam`` and ``fedadam:server-lr=0.01``) counts as its
cheapest one that reached the target: FDA is compared with a tuned baseline. All rows go
to ``benchmarks/results/comm_cost.csv`` and a plot (GB to target on a log axis against steps
to target, one panel per (partition, K)) to ``benchmarks/results/comm_cost.png``.

Goals (the FDA paper's LeNet-5 results): FDA needs >= 30x less communication than
Synchronous at about the same number of steps, and >= 3x less than FedAdam.

Strategy entries (``--strategies``, comma-separated) are ``NAME[+TRIGGER][:FLAG=VALUE...]``:
NAME is any ``--strategy`` of fdahpc.train, ``+TRIGGER`` sets ``--trigger`` (a trigger:
``linear``, ``sketch``, ``periodic`` ...) and each ``:FLAG=VALUE`` adds ``--FLAG VALUE``
(``:FLAG`` alone adds a switch). Entries whose trigger is ``linear`` or ``sketch`` (given by
``+TRIGGER``, or the presets ``linearfda`` / ``sketchfda``) run once per Θ of ``--thetas``
unless they fix ``:theta=X`` themselves. Examples: ``fedavg:local-epochs=1``,
``fedadam``, ``fedavgm:tau=100``, ``fedadam+sketch`` (= ``--strategy fedadam --trigger sketch
--theta X``). ``--thetas`` is one list for every FDA trigger (``1,2,4``) or one per trigger
(``linear=1,2,4;sketch=1,2,4``). Names are checked against fdahpc's registry before any run.

The step at which a run reaches the target is resolved to ``--eval-every`` steps. Note
that fdahpc evaluates the average of the workers' models (evaluation traffic, not
counted), so between syncs the model scored is one more sync away from existing.

``--resume`` reuses the finished run files of an earlier sweep with identical flags (as
listed in its CSV) and runs only the missing or failed ones.

Defaults, sized by measurement on a 2-core machine: target 0.88 (Synchronous reaches it in
about 4.3 epochs at K=4 and 8 epochs at K=8, iid; 0.89 took 7 epochs at K=4, beyond the
time budget), a 10-epoch cap, Θ ∈ {1, 2, 4} for both triggers (a ``--log-variance`` pilot:
between syncs the variance stays ~0.3–2; LinearFDA's H ran ~1.5x the exact variance,
SketchFDA's 1.03–1.2x; Θ = 1–4 syncs every ~50–400 steps at K=4) and K=8 only for iid.
Run files go to ``runs/comm_cost/``.

Run (the default sweep takes about 26 minutes on an idle 2-core machine; ``--quick`` about 1.5):

    python benchmarks/comm_cost.py [--quick] [--resume] [--dry-run] [--strategies ...] [--thetas ...]
        [--workers 4,8] [--partitions iid,sorted:60] [--skip sorted:60@8] [--baselines ...]
        [--target 0.88] [--max-epochs 10] [--seeds 0] [--eval-every 100] [--out PREFIX]

The FedOpt comparison (iid, K=4, a 20-epoch cap: FedOpt with one-epoch rounds needs more
than 10; about 20 min of jobs on an idle machine):

    python benchmarks/comm_cost.py --workers 4 --partitions iid --max-epochs 20 \
        --workdir runs/comm_cost_fedopt --out benchmarks/results/comm_cost_fedopt \
        --strategies "linearfda,sketchfda,fedadam,fedadam:server-lr=0.01,fedadam:tau=100,\
    fedadam:tau=100:server-lr=0.01,fedavgm,fedavgm:tau=100,fedadam+linear:theta=0.02,fedadam+linear:theta=0.05"
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import REPO_ROOT, RESULTS, CpuMeter, median, print_table, read_run, run_train

from fdahpc.strategies import PRESETS, TRIGGERS  # noqa: E402

FDA_TRIGGERS = tuple(name for name, cls in TRIGGERS.items() if cls.theta_driven)  # what Θ sweeps apply to
FDA_PRESETS = {name: p.trigger for name, p in PRESETS.items() if p.trigger in FDA_TRIGGERS}  # preset -> its trigger

DEFAULTS = dict(
    strategies="synchronous,fedavg:local-epochs=1,linearfda,sketchfda",
    thetas="linear=1,2,4;sketch=1,2,4",
    workers="4,8", partitions="iid,sorted:60", skip="sorted:60@8",
    target=0.88, max_epochs=10.0, seeds="0", eval_every=100,
)
QUICK = dict(
    strategies="synchronous,fedavg:local-epochs=1,linearfda,sketchfda",
    thetas="2", workers="4", partitions="iid", skip="",
    target=0.85, max_epochs=3.0, seeds="0", eval_every=100,
)


@dataclass(frozen=True)
class Entry:
    """One ``--strategies`` item: a strategy name, an optional trigger, extra flags."""

    text: str
    name: str
    trigger_flag: str | None  # the entry's --trigger (None: the preset's)
    flags: tuple[str, ...] = field(default=())
    fixed_theta: bool = False

    @property
    def trigger(self) -> str | None:
        return self.trigger_flag or FDA_PRESETS.get(self.name)

    @property
    def sweeps_theta(self) -> bool:
        return self.trigger in FDA_TRIGGERS and not self.fixed_theta

    @property
    def family(self) -> str:
        """Strategy and trigger, e.g. ``fedadam+linear``: what a baseline is named by."""
        return self.name + (f"+{self.trigger_flag}" if self.trigger_flag else "")

    @property
    def label(self) -> str:
        """The family plus the entry's own flags but Θ, e.g. ``fedadam:server-lr=0.01``."""
        opts = [o for o in self.text.split(":")[1:] if o.strip().lstrip("-").partition("=")[0] != "theta"]
        return ":".join([self.family, *opts])


def parse_entry(text: str) -> Entry:
    head, *opts = text.strip().split(":")
    name, _, trigger = head.partition("+")
    if not name:
        raise ValueError(f"--strategies entry {text!r}: empty strategy name; use NAME[+TRIGGER][:FLAG=VALUE...]")
    flags, fixed_theta = [], False
    for opt in opts:
        key, eq, value = opt.partition("=")
        key = key.strip().lstrip("-")
        if not key:
            raise ValueError(f"--strategies entry {text!r}: empty flag; write e.g. {name}:local-epochs=1")
        fixed_theta |= key == "theta"
        flags += [f"--{key}", value] if eq else [f"--{key}"]
    return Entry(text.strip(), name, trigger or None, tuple(flags), fixed_theta)


def parse_thetas(text: str) -> dict[str, list[float]]:
    """``1,2,4`` (every FDA trigger) or ``linear=1,2;sketch=2,4``."""
    text = text.strip()
    if "=" not in text:
        values = [float(x) for x in text.split(",") if x.strip()]
        return {t: values for t in FDA_TRIGGERS}
    out = {}
    for part in text.split(";"):
        if part.strip():
            key, _, values = part.partition("=")
            out[key.strip()] = [float(x) for x in values.split(",") if x.strip()]
    return out


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a 2-3 minute subset: iid, K=4, Θ=2, target 0.85, <= 3 epochs")
    p.add_argument("--strategies", help=f"comma-separated entries NAME[+TRIGGER][:FLAG=VALUE...] (default {DEFAULTS['strategies']})")
    p.add_argument("--thetas", help=f"Θ list for FDA triggers, e.g. 1,2,4 or linear=1,2;sketch=2,4 (default {DEFAULTS['thetas']})")
    p.add_argument("--workers", help=f"comma-separated K (default {DEFAULTS['workers']})")
    p.add_argument("--partitions", help=f"comma-separated partition specs (default {DEFAULTS['partitions']})")
    p.add_argument("--skip", help=f"comma-separated PARTITION@K pairs to leave out (default {DEFAULTS['skip']})")
    p.add_argument("--target", type=float, help=f"target test accuracy (default {DEFAULTS['target']})")
    p.add_argument("--max-epochs", type=float, help=f"cap per run, in epochs (default {DEFAULTS['max_epochs']})")
    p.add_argument("--seeds", help=f"comma-separated run seeds (default {DEFAULTS['seeds']})")
    p.add_argument("--eval-every", type=int, help=f"evaluate every N steps (default {DEFAULTS['eval_every']})")
    p.add_argument("--baselines", default="synchronous,fedadam,fedavgm",
                   help="strategy families (NAME or NAME+TRIGGER) to compare the others against, one table each")
    p.add_argument("--dataset", default="fashion-mnist", help="dataset flag of fdahpc.train (default fashion-mnist)")
    p.add_argument("--model", default="lenet5", help="model flag of fdahpc.train (default lenet5)")
    p.add_argument("--extra", default="", help="more fdahpc.train flags for every run, one quoted string")
    p.add_argument("--dry-run", action="store_true", help="check every run's flags, print the commands, run nothing")
    p.add_argument("--resume", action="store_true",
                   help="reuse finished run files of an earlier sweep with the same flags (listed in its CSV); run the rest")
    p.add_argument("--timeout", type=float, default=900, help="seconds before one run is killed (default 900)")
    p.add_argument("--workdir", default=None, help="folder for the run files (default runs/comm_cost)")
    p.add_argument("--out", default=None, help="CSV/PNG path prefix (default benchmarks/results/comm_cost; quick: runs/comm_cost_quick/comm_cost)")
    args = p.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.entries = [parse_entry(e) for e in args.strategies.split(",") if e.strip()]
        args.theta_lists = parse_thetas(args.thetas)
        args.workers = [int(x) for x in args.workers.split(",") if x.strip()]
        args.partitions = [x.strip() for x in args.partitions.split(",") if x.strip()]
        args.skip = {x.strip() for x in args.skip.split(",") if x.strip()}
        args.seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        args.baselines = [x.strip() for x in args.baselines.split(",") if x.strip()]
    except ValueError as exc:
        p.error(str(exc))
    if not (0 < args.target <= 1) or args.max_epochs <= 0 or args.eval_every < 1:
        p.error("need 0 < --target <= 1, --max-epochs > 0 and --eval-every >= 1")
    for e in args.entries:
        if e.sweeps_theta and not args.theta_lists.get(e.trigger):
            p.error(f"--thetas gives no Θ for trigger {e.trigger!r} (entry {e.text!r}); add e.g. {e.trigger}=1,2,4")
    args.workdir = args.workdir or os.path.join(REPO_ROOT, "runs", "comm_cost_quick" if args.quick else "comm_cost")
    if args.out is None:
        args.out = os.path.join(args.workdir if args.quick else RESULTS, "comm_cost")
    return args


@dataclass
class Job:
    partition: str
    workers: int
    entry: Entry
    theta: float | None
    seed: int
    flags: list[str]

    @property
    def file_name(self) -> str:
        safe = lambda s: "".join(c if c.isalnum() or c in "-." else "_" for c in s)  # noqa: E731
        theta = "" if self.theta is None else f"-t{self.theta:g}"
        return f"{safe(self.partition)}-k{self.workers}-{safe(self.entry.text)}{theta}-s{self.seed}.h5"


def plan(args) -> list[Job]:
    jobs = []
    for seed in args.seeds:
        for partition in args.partitions:
            for k in args.workers:
                if f"{partition}@{k}" in args.skip:
                    continue
                for e in args.entries:
                    thetas = args.theta_lists[e.trigger] if e.sweeps_theta else [None]
                    for theta in thetas:
                        flags = ["--strategy", e.name, *(["--trigger", e.trigger_flag] if e.trigger_flag else []),
                                 *(["--theta", f"{theta:g}"] if theta is not None else []), *e.flags,
                                 "--model", args.model, "--dataset", args.dataset, "--partition", partition,
                                 "--epochs", f"{args.max_epochs:g}", "--target-accuracy", f"{args.target:g}",
                                 "--eval-every", str(args.eval_every), "--seed", str(seed), *shlex.split(args.extra)]
                        jobs.append(Job(partition, k, e, theta, seed, flags))
    return jobs


def validate(jobs: list[Job]) -> None:
    """Every job's flags through fdahpc's own parser, before minutes of training."""
    import contextlib
    import io

    from fdahpc.cli import parse_args

    for job in jobs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parse_args(job.flags)
        except SystemExit:
            raise SystemExit(f"comm_cost: entry {job.entry.text!r}: {err.getvalue().strip()}") from None
        except ValueError as exc:
            raise SystemExit(f"comm_cost: entry {job.entry.text!r}: {exc}") from None


CSV_FIELDS = ["partition", "workers", "strategy", "family", "entry", "theta", "seed", "reached", "steps_to_target",
              "gb_to_target", "steps", "syncs", "gb", "final_accuracy", "target", "steps_per_epoch",
              "wall_seconds", "eval_seconds", "job_seconds", "others_cpu", "state_bytes", "params", "run_file"]


def row_of(job: Job, run: dict, target: float, path: str) -> dict:
    reached = run["steps_to_target"] > 0
    return dict(
        partition=job.partition, workers=job.workers, strategy=job.entry.label, family=job.entry.family,
        entry=job.entry.text,
        theta="" if job.theta is None else job.theta, seed=job.seed, reached=reached,
        steps_to_target=run["steps_to_target"] if reached else "", gb_to_target=run["comm_bytes_to_target"] / 1e9 if reached else "",
        steps=run["steps"], syncs=run["syncs"], gb=run["comm_bytes"] / 1e9, final_accuracy=run["final_accuracy"],
        target=target, steps_per_epoch=run["steps_per_epoch"], wall_seconds=round(run["wall_seconds"], 2),
        eval_seconds=round(run["eval_seconds"], 2), state_bytes=run["state_bytes"], params=run["params"], run_file=path,
    )


def fmt_gb(x: float) -> str:
    return f"{x:.4f}" if x < 1 else f"{x:.3f}"


def run_table(rows: list[dict]) -> None:
    table = []
    for r in rows:
        reached = r["reached"]
        table.append([r["partition"], r["workers"], r["strategy"], "" if r["theta"] == "" else f"{r['theta']:g}", r["seed"],
                      r["steps_to_target"] if reached else f">{r['steps']}",
                      fmt_gb(r["gb_to_target"]) if reached else f">{fmt_gb(r['gb'])}",
                      "yes" if reached else "no", r["syncs"], f"{r['final_accuracy']:.4f}", f"{r['job_seconds']:.0f}",
                      f"{r['others_cpu']:.0%}"])
    print_table(["partition", "K", "strategy", "Θ", "seed", "steps to target", "GB to target", "reached?", "syncs",
                 "last acc", "job s", "others' CPU"], table)


def summary_table(rows: list[dict], baseline: str = "synchronous") -> list[list]:
    """Per (partition, K): every other strategy against the ``baseline`` family.

    The baseline's cost is that of its cheapest configuration that reached the target (a
    tuned baseline; with one configuration, simply its run). When none reached it, what
    the cheapest spent by the cap is a lower bound on its cost, so its figures and the
    ratios are shown as bounds (``>``). Other strategies: medians over Θ and seeds of the
    runs that reached the target; "FDA" pools every Θ of both FDA presets.
    """
    out = []
    for key in dict.fromkeys((r["partition"], r["workers"]) for r in rows):
        group = [r for r in rows if (r["partition"], r["workers"]) == key]
        base_all = [r for r in group if r["family"] == baseline]
        if not base_all:
            continue
        base_ok = [r for r in base_all if r["reached"]]
        bound = not base_ok
        best = (min(base_ok, key=lambda r: r["gb_to_target"]) if base_ok
                else min(base_all, key=lambda r: r["gb"]))
        base_gb, base_steps = (best["gb_to_target"], best["steps_to_target"]) if base_ok else (best["gb"], best["steps"])
        gt = ">" if bound else ""
        labels = list(dict.fromkeys(r["strategy"] for r in group if r["family"] != baseline))
        fda = [r for r in group if r["family"] in FDA_PRESETS]
        sets = [(lab, [r for r in group if r["strategy"] == lab]) for lab in labels]
        if len({r["family"] for r in fda}) > 1:
            sets.append(("FDA (every Θ and trigger)", fda))
        for lab, runs in sets:
            ok = [r for r in runs if r["reached"]]
            gb = median(r["gb_to_target"] for r in ok)
            steps = median(r["steps_to_target"] for r in ok)
            out.append([key[0], key[1], lab, f"{len(ok)}/{len(runs)}", fmt_gb(gb) if ok else "-",
                        best["strategy"], gt + fmt_gb(base_gb), f"{gt}{base_gb / gb:.1f}x" if ok else "-",
                        f"{steps:.0f}" if ok else "-", f"{gt}{base_steps:.0f}",
                        ("<" if bound else "") + f"{steps / base_steps:.2f}" if ok else "-"])
    return out


MARKERS = {"synchronous": ("s", "black"), "fedavg:local-epochs=1": ("D", "tab:gray"), "linearfda": ("o", "tab:blue"),
           "sketchfda": ("^", "tab:orange")}
SPARE = [("v", "tab:green"), ("P", "tab:red"), ("X", "tab:purple"), ("*", "tab:brown"), ("h", "tab:pink"),
         ("<", "tab:olive"), (">", "tab:cyan")]


def plot(rows: list[dict], path: str, target: float, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys((r["partition"], r["workers"]) for r in rows))
    labels = list(dict.fromkeys(r["strategy"] for r in rows))
    style = {}
    for lab in labels:
        style[lab] = MARKERS.get(lab) or SPARE[len([x for x in style if x not in MARKERS]) % len(SPARE)]
    fig, axes = plt.subplots(1, len(keys), figsize=(max(6.0, 4.6 * len(keys)), 4.6), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for lab in labels:
            runs = [r for r in rows if (r["partition"], r["workers"]) == key and r["strategy"] == lab]
            marker, colour = style[lab]
            for reached in (True, False):
                sel = [r for r in runs if r["reached"] == reached]
                if not sel:
                    continue
                xs = [r["gb_to_target"] if reached else r["gb"] for r in sel]
                ys = [r["steps_to_target"] if reached else r["steps"] for r in sel]
                ax.scatter(xs, ys, marker=marker, s=48, edgecolors=colour,
                           facecolors=colour if reached else "none",
                           label=lab if reached else f"{lab} (not reached: final)")
                for r, x, y in zip(sel, xs, ys):
                    if r["theta"] != "":
                        ax.annotate(f"Θ={r['theta']:g}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("GB communicated to reach the target (log)")
        ax.set_ylabel("local steps to reach the target")
        ax.set_title(f"{key[0]}, K={key[1]}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"{title}: cost to reach {target:.1%} test accuracy\n(filled: reached; hollow: not reached, final values)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _previous_rows(csv_path: str) -> dict[str, dict]:
    """Rows of an earlier sweep's CSV, by run file, for ``--resume``."""
    try:
        with open(csv_path, newline="") as fh:
            return {r["run_file"]: r for r in csv.DictReader(fh)}
    except (OSError, KeyError, csv.Error):
        return {}


def _reusable(old: dict | None, job: Job, path: str) -> dict | None:
    """``old`` when ``path`` is a finished run of exactly this job's configuration; a finished
    run whose row the CSV no longer holds (a later sweep of other runs in the same folder
    rewrote it) is reused too, with the run's own wall time and others' share unknown (nan)."""
    if not os.path.exists(path):
        return None
    from fdahpc.cli import parse_args
    from fdahpc.config import TrainConfig
    from fdahpc.renamed import current_options

    try:
        run = read_run(path)
    except (RuntimeError, OSError):
        return None
    expected = json.loads(parse_args([*job.flags, "--log-every", "1000000", "--out", path]).cfg.to_json())
    try:
        saved = current_options(json.loads(run.get("config", "")))  # a run made before a rename: its old names
    except ValueError:
        return None
    # A flag added to fdahpc after the run was made: the run used its default.
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    same = all(saved.get(k, defaults.get(k)) == v for k, v in expected.items()) and saved.keys() <= expected.keys()
    if not same:
        return None
    if old is None or not old.get("job_seconds") or not old.get("others_cpu"):
        return {"job_seconds": f"{float(run['wall_seconds']):.1f}", "others_cpu": "nan"}
    return old


def run_jobs(jobs: list[Job], args, csv_path: str) -> tuple[list[dict], list[str], int]:
    """Run ``jobs`` one after the other (or reuse them, ``--resume``), writing one CSV row per run.

    Returns the rows, the failures' one-line descriptions and how many runs were reused.
    """
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
    previous = _previous_rows(csv_path) if args.resume else {}
    rows, failures, start, reused = [], [], time.perf_counter(), 0
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for i, job in enumerate(jobs, 1):
            path = os.path.join(args.workdir, job.file_name)
            rel = os.path.relpath(path, REPO_ROOT)
            old = _reusable(previous.get(rel), job, path)
            t0, meter = time.perf_counter(), CpuMeter()
            try:
                run = read_run(path) if old else run_train(job.workers, job.flags, path, args.timeout)
            except RuntimeError as exc:
                failures.append(f"{job.file_name}: {exc}")
                print(f"[{i}/{len(jobs)}] FAILED {job.file_name}: {str(exc).splitlines()[0]}", flush=True)
                continue
            row = row_of(job, run, args.target, rel)
            if old:
                reused += 1
                row.update(job_seconds=float(old["job_seconds"]), others_cpu=float(old["others_cpu"]))
            else:
                row.update(job_seconds=round(time.perf_counter() - t0, 1), others_cpu=round(meter.foreign_share(), 3))
            rows.append(row)
            writer.writerow(row)
            fh.flush()
            print(f"[{i}/{len(jobs)}] {job.partition} K={job.workers} {job.entry.label}"
                  f"{'' if job.theta is None else f' Θ={job.theta:g}'}: "
                  f"{'reached at step ' + str(row['steps_to_target']) if row['reached'] else 'not reached in ' + str(row['steps']) + ' steps'}, "
                  f"{row['syncs']} syncs, {(row['gb_to_target'] if row['reached'] else row['gb']):.4f} GB; "
                  f"{row['job_seconds']:.0f} s, others used {row['others_cpu']:.0%} of the machine"
                  f"{' (reused from an earlier sweep)' if old else ''} (total {time.perf_counter() - start:.0f} s)", flush=True)
    return rows, failures, reused


def main(argv=None) -> int:
    args = parse(argv)
    jobs = plan(args)
    if not jobs:
        print("comm_cost: nothing to run (check --partitions, --workers, --skip)", file=sys.stderr)
        return 2
    validate(jobs)
    if args.dry_run:
        for job in jobs:
            print(f"mpiexec -n {job.workers} python -m fdahpc.train {shlex.join(job.flags)} "
                  f"--log-every 1000000 --out {os.path.join(args.workdir, job.file_name)}")
        return 0
    csv_path, png_path = args.out + ".csv", args.out + ".png"
    print(f"comm_cost: {len(jobs)} runs, target {args.target:g}, cap {args.max_epochs:g} epochs, eval every "
          f"{args.eval_every} steps; run files in {args.workdir}", flush=True)
    start = time.perf_counter()
    rows, failures, reused = run_jobs(jobs, args, csv_path)
    if not rows:
        print("\n".join(failures), file=sys.stderr)
        return 1
    total = time.perf_counter() - start
    # Our jobs fill both cores, so the share others took is roughly the share of time we lost.
    idle_estimate = sum(r["job_seconds"] * (1 - min(r["others_cpu"], 0.95)) for r in rows)
    job_total = sum(r["job_seconds"] for r in rows)
    print(f"\n{args.model} on {args.dataset}, target {args.target:g}, cap {args.max_epochs:g} epochs, "
          f"eval every {args.eval_every} steps; {len(rows)} runs, {job_total:.0f} s of jobs ({total:.0f} s this call), others used "
          f"{sum(r['others_cpu'] * r['job_seconds'] for r in rows) / max(1e-9, sum(r['job_seconds'] for r in rows)):.0%} "
          f"of the machine meanwhile (about {idle_estimate:.0f} s on an idle machine)"
          f"{f'; {reused} runs reused from an earlier sweep (--resume)' if reused else ''}")
    run_table(rows)
    for baseline in args.baselines:
        table = summary_table(rows, baseline)
        if not table:
            continue
        print(f"\nAgainst {baseline}, per (partition, K): GB and steps to target, medians over Θ and seeds of the runs\n"
              f"that reached it; {baseline}: its cheapest configuration that reached it (> and <: none did; its cost at\n"
              f"the cap is a lower bound)")
        print_table(["partition", "K", "strategy", "reached", "GB (median)", "baseline", "base GB", "base GB / GB",
                     "steps (median)", "base steps", "steps / base"], table)
    plot(rows, png_path, args.target, f"{args.model} / {args.dataset}")
    print(f"\nrows: {csv_path}\nplot: {png_path}")
    if failures:
        print("failed runs:\n  " + "\n  ".join(failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
