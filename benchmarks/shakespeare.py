"""The character GPT on Shakespeare's role split: its communication frontier, for the time model.

    python benchmarks/shakespeare.py [--ranks 4] [--seeds 0] [--max-steps 1500] [--targets 0.4,0.45]
    python benchmarks/time_to_accuracy.py --frontier benchmarks/results/frontier_gpt.csv --params gpt=209088 \\
        --step-ms 5,20,100 --tuning-free 'linearfda auto (fabric)'

Needs the corpus (``python -m fdahpc.data fetch shakespeare``). K ranks train the default
GPT (209,088 parameters, context 64, batch 32, Adam 1e-3) on ``--partition roles`` until the
averaged model's next-character accuracy reaches the highest target, or the step cap;
it is scored every ``--eval-every`` steps on ``--eval-samples`` held-out windows spread
evenly over the held-out text. The methods (``--methods``, default all):

- Synchronous; FedAvg with rounds of τ = 10, 50, 200 steps; LinearFDA at Θ = 0.5, 2, 8;
  DiLoCo (its preset: inner AdamW, outer Nesterov SGD 0.7/0.9) at H = 50 and 500 inner steps;
  with a decaying ``--lr-schedule`` (every run trains under it) also QSR at the paper's constants;
- ``linearfda auto H=.. m=..``: LinearFDA ``--theta auto`` at each (horizon H, check
  cadence m) that ``--theta-fabric`` picks for this model on the time report's fabrics at
  the ``--step-ms`` step times (:func:`time_to_accuracy.cadence`), i.e. the run the report's
  ``linearfda auto (fabric)`` takes in that row (a one-step horizon's is Synchronous's run);
  ``--cadences H:M,...`` adds others (a stated model size's, which
  ``time_to_accuracy.py --cadences`` lists); ``--auto-cadence-family diloco+linear`` runs the
  cadences under DiLoCo's outer step instead (``diloco+linear auto H=.. m=..``, the report's
  ``--tuning-free 'diloco+linear auto (fabric)'``), and ``--theta-calibrate estimate`` with Θ
  re-calibrated on the trigger's own estimate (``linearfda auto H=.. m=.. estimate``; into an
  ``--out`` of their own, since their points have the same family and knob).

Each (method, seed) run file is kept in ``--workdir`` (its folder names K, the cap, the
targets and the evaluation) and reused, so an interrupted sweep resumes (``--fresh`` reruns).
Printed: per method and target the steps, model syncs and MB to the target (medians over
the seeds that reached it). Written: ``--out``.csv in frontier.py's columns (setting
``gpt/roles@K``; FedAvg's knob 'N steps', the cadence runs' 'auto (H N steps, every m)'),
merged with what the file held, which ``time_to_accuracy.py`` prices at stated step times.
"""

from __future__ import annotations

import argparse
import os
import sys

from _common import REPO_ROOT, RESULTS, print_report, read_run, run_train
from cost_model import FABRICS
import frontier
import frontier_analysis
import time_to_accuracy
from fdahpc.lr_schedule import SCHEDULES
from fdahpc.options import CALIBRATIONS

#: label -> (family, knob, the method's flags)
FIXED = {
    "synchronous": ("synchronous", "", ["--strategy", "synchronous"]),
    **{f"fedavg tau={t}": ("fedavg", f"{t} steps", ["--strategy", "fedavg", "--tau", str(t)]) for t in (10, 50, 200)},
    **{f"linearfda theta={t:g}": ("linearfda", f"Θ={t:g}", ["--strategy", "linearfda", "--theta", f"{t:g}"])
       for t in (0.5, 2, 8)},
    **{f"diloco H={h}": ("diloco", f"H={h}", ["--strategy", "diloco", "--tau", str(h)]) for h in (50, 500)},
}
STEP_MS = "5,20,100"


def cadence_method(h: int, m: int, steps_per_epoch: int, family: str = "linearfda",
                   calibrate: str | None = None) -> tuple[str, tuple[str, str, list[str]]]:
    """``family`` (LinearFDA, or a rule under its trigger: ``diloco+linear``) at --theta auto with a
    round horizon of ``h`` steps, checked every ``m``: the horizon given as the epochs
    --theta-round-epochs takes (h / steps per epoch, rounded back to h); ``calibrate``: its
    --theta-calibrate, named in the label (and so in the run file's name)."""
    flags = [*frontier.cadence_family_flags(family), "--theta", "auto",
             "--theta-round-epochs", f"{h / steps_per_epoch:.9g}", "--fda-every", str(m)]
    flags += ["--theta-calibrate", calibrate] if calibrate else []
    label = f"{family} auto H={h} m={m}" + (f" {calibrate}" if calibrate else "")
    return label, (family, f"auto (H {h} steps, every {m})", flags)


def fabric_cadences(d: int, k: int, step_ms: list[float]) -> list[tuple[int, int]]:
    """The distinct (H, m) that --theta-fabric picks for ``d`` parameters on K ranks on the
    report's fabrics at the stated step times, but a one-step horizon's: that is Synchronous's
    run (:data:`time_to_accuracy.SYNC_LIMIT`)."""
    pairs = {time_to_accuracy.cadence(d, k, FABRICS[f].gbps, FABRICS[f].latency_us, ms / 1e3, "linearfda")
             for f in time_to_accuracy.ROW_FABRICS for ms in step_ms}
    return sorted(pairs - {time_to_accuracy.SYNC_LIMIT})


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=4, help="K (default 4)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p.add_argument("--max-steps", type=int, default=1500, help="step cap of every run (default 1500)")
    p.add_argument("--targets", default="0.4,0.45", help="next-character accuracies (default 0.4,0.45)")
    p.add_argument("--eval-every", type=int, default=25, help="evaluation grain in steps (default 25)")
    p.add_argument("--eval-samples", type=int, default=2000, help="held-out windows scored (default 2000)")
    p.add_argument("--methods", default=None, help="comma-separated labels (default: all; see the module doc)")
    p.add_argument("--step-ms", default=STEP_MS, help=f"stated step times whose --theta-fabric cadences run (default {STEP_MS})")
    p.add_argument("--cadences", default="", metavar="H:M[,...]", help="more LinearFDA --theta auto cadences")
    p.add_argument("--auto-cadence-family", default="linearfda", metavar="FAMILY",
                   help="the cadence runs' strategy: linearfda (default), or RULE+linear, e.g. diloco+linear "
                        "(DiLoCo's outer step, rounds ended by LinearFDA's trigger)")
    p.add_argument("--theta-calibrate", default=None, choices=CALIBRATIONS,
                   help="the cadence runs' --theta-calibrate (default: the training default, variance); named in "
                        "their labels, e.g. 'linearfda auto H=101 m=101 estimate'; write them to an --out of their own")
    p.add_argument("--out", default=os.path.join(RESULTS, "frontier_gpt"), help="CSV path prefix (default %(default)s)")
    p.add_argument("--workdir", default=os.path.join(REPO_ROOT, "runs", "shakespeare"))
    p.add_argument("--fresh", action="store_true", help="rerun runs whose file is already there")
    p.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                   help="every run's learning-rate course (default constant; cosine adds the method qsr)")
    p.add_argument("--lr-warmup-steps", type=int, default=0, help="every run's learning-rate warm-up (default 0)")
    p.add_argument("--lr-floor", type=float, default=0.0,
                   help="where cosine/linear ends, a fraction of --lr (default 0)")
    p.add_argument("--dry-run", action="store_true", help="print the methods and their flags, run nothing")
    p.add_argument("--timeout", type=float, default=3600, help="seconds before one run is killed (default 3600)")
    args = p.parse_args(argv)
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        args.targets = sorted(float(t) for t in args.targets.split(",") if t.strip())
        args.step_ms = [float(x) for x in args.step_ms.split(",") if x.strip()]
        args.cadences = [frontier.parse_cadence(x) for x in args.cadences.split(",") if x.strip()]
        frontier.cadence_family_flags(args.auto_cadence_family)
    except ValueError as exc:
        p.error(f"{exc}" if "--" in str(exc) else f"--seeds/--targets/--step-ms: {exc}; give comma-separated numbers")
    if not args.seeds or not args.targets or not all(0 < t <= 1 for t in args.targets):
        p.error("--seeds/--targets: give at least one seed and accuracies in (0, 1], e.g. --targets 0.4,0.45")
    if args.ranks < 2 or args.max_steps < 1 or args.eval_every < 1 or args.eval_samples < 1:
        p.error("--ranks >= 2, --max-steps, --eval-every and --eval-samples >= 1: a frontier needs K >= 2 workers")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    k = args.ranks
    schedule = [] if args.lr_schedule == "constant" and not args.lr_warmup_steps else [
        "--lr-schedule", args.lr_schedule, "--lr-warmup-steps", str(args.lr_warmup_steps),
        *(["--lr-floor", f"{args.lr_floor:g}"] if args.lr_floor else [])]
    course = f"-{args.lr_schedule}{args.lr_warmup_steps}f{args.lr_floor:g}" if schedule else ""
    folder = os.path.join(args.workdir, f"k{k}-cap{args.max_steps}-to{args.targets[-1]:g}"
                                        f"-eval{args.eval_every}x{args.eval_samples}{course}")
    common = ["--dataset", "shakespeare", "--model", "gpt", "--partition", "roles", "--max-steps", str(args.max_steps),
              "--target-accuracy", f"{args.targets[-1]:g}", "--eval-every", str(args.eval_every),
              "--eval-samples", str(args.eval_samples), *schedule]

    def file_of(label: str, seed: int) -> str:
        stem = "".join(c if c.isalnum() or c in "-." else "_" for c in label)
        return os.path.join(folder, f"{stem}-s{seed}.h5")

    def finished(out: str) -> dict | None:
        """The run file's contents when a run finished it (and --fresh is not given), else None."""
        if not os.path.exists(out) or args.fresh:
            return None
        try:
            return read_run(out)
        except (RuntimeError, OSError):
            return None  # unfinished: run again

    def run(label: str, flags: list[str], seed: int) -> tuple[str, dict]:
        out = file_of(label, seed)
        done = finished(out)
        if done is None:
            print(f"shakespeare: {label}, seed {seed}", flush=True)
            os.makedirs(folder, exist_ok=True)
            done = run_train(k, common + flags + ["--seed", str(seed)], out, args.timeout)
        return os.path.relpath(out, REPO_ROOT), done

    # Synchronous first: its run file says the model's size and the epoch that the cadences' horizons are given in
    # (a dry run reads it when it is there, and otherwise lists the fixed methods only).
    methods = dict(FIXED)
    if args.lr_schedule != "constant" and args.lr_floor < 1:  # QSR with the paper's constants reads the decay
        methods["qsr"] = ("qsr", "", ["--strategy", "qsr"])
    first = None
    if not args.dry_run:
        _, first = run("synchronous", FIXED["synchronous"][2], args.seeds[0])
    elif (first := finished(file_of("synchronous", args.seeds[0]))) is None:
        print("shakespeare: the --theta auto cadences follow from the synchronous run (the model's size, the steps of "
              "an epoch); listed once it has run")
    if first is not None:
        d = first["params"]
        for h, m in sorted(set(fabric_cadences(d, k, args.step_ms)) | set(args.cadences)):
            label, method = cadence_method(h, m, first["steps_per_epoch"], args.auto_cadence_family,
                                           args.theta_calibrate)
            methods[label] = method
    chosen = list(methods) if args.methods is None else [x.strip() for x in args.methods.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in methods]
    if unknown:
        print(f"shakespeare: --methods: unknown {unknown}; choose from {', '.join(methods)}", file=sys.stderr)
        return 2
    if args.dry_run:
        for label in chosen:
            print(f"{label}: mpiexec -n {k} python -m fdahpc.train {' '.join(common + methods[label][2])} --seed S")
        return 0
    setting = frontier.Setting("gpt", "roles", k)
    rows = []
    for label in chosen:
        family, knob, flags = methods[label]
        for seed in args.seeds:
            path, _ = run(label, flags, seed)
            rows.append(dict(run_file=path, family=family, knob=knob, entry=""))
    new = frontier_analysis.points(setting, rows, args.targets)
    old = frontier_analysis.read_points([args.out + ".csv"]) if os.path.exists(args.out + ".csv") else []
    frontier_analysis.write_points(args.out + ".csv", frontier_analysis.merge(old, new))
    table = [[p["family"], p["knob"], f"{p['target']:g}", p["reached_seeds"], p["seeds"],
              p["steps"] if p["reached"] else f">{p['steps']}", f"{p['gb'] * 1e3:.1f}", p["syncs"],
              f"{p['final_accuracy']:.4f}"] for p in new]
    print_report(f"GPT ({d:,} parameters) on Shakespeare, --partition roles, K = {k}, seeds "
                 f"{','.join(map(str, args.seeds))}, cap {args.max_steps} steps, scored every {args.eval_every} steps on "
                 f"{args.eval_samples} held-out windows",
                 ["family", "knob", "target", "reached", "seeds", "steps", "MB", "syncs (run)", "final acc"], table,
                 "steps and MB: to the target (medians over the seeds that reached it; '>' the cap's, not reached); "
                 "MB: training bytes, all ranks (model syncs and FDA states); syncs: the whole run's; "
                 f"rows: {os.path.relpath(args.out, REPO_ROOT)}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
