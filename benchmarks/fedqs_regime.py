"""FedQS in (a reduced form of) its paper's regime: every rule, Dirichlet 0.1 and 0.5.

    python benchmarks/fedqs_regime.py                                  # the whole grid
    python benchmarks/fedqs_regime.py --partitions dirichlet:0.1 --seeds 0 --rounds 100
    python benchmarks/fedqs_regime.py --table                         # docs/results.md's tables, from the CSVs
    python benchmarks/fedqs_regime.py --clock ticks --drop-last ...   # under the authors' simulator (issue 43)

The paper's setting (arXiv 2510.07664, Section 5.1 and Appendix D; the authors' code as
summarised in ../shared/ALGORITHMS.md §3): N = 100 clients, K = 10, Dirichlet(x) labels,
2 local epochs of the client's own data, batch 50, SGD 0.1, gradient-norm clip 20 for
every method, speed ratio 1:50, 400 rounds, ResNet-18 on CIFAR-10. Here: FashionMNIST
(CIFAR-10 is read from user files only), and the model is a flag, by default ``lenet5bn``
(LeNet-5 with BatchNorm: a BatchNorm model small enough for 100 clients on 2 cores;
ResNet-18 is not). Every method runs with ``--clip-grad-norm 20``.

Methods (``benchmarks/semiasync.py`` syntax): FedAvg and FedSGD uniform and sample-weighted,
FedQS-Avg and FedQS-SGD in both variants, FedBuff, M-step, WKAFL, and synchronous FedAvg
(the same mode with ``--buffer N``). Per partition it runs ``semiasync.py`` into
``--out-dir/<partition>`` and writes ``benchmarks/results/fedqs_regime_<partition>.csv``; with
``--reuse`` (the default) finished run files are read, not rerun, so an interrupted grid
resumes where it stopped. ``--clock ticks`` and ``--drop-last`` (docs/tick-clock.md) go to
every run, and their names into the CSV's and the run folder's (``fedqs_regime_ticks_droplast_<partition>.csv``),
so the event-clock grid stays as it is.

``--partitions roles`` is the paper's text task: Shakespeare by speaking role, its LSTM, at a
reduced size (``TEXT``; docs/tick-clock.md).

``--decompose R`` (issue 43) takes FedQS's gain over its baseline apart, one switch at a
time away from the authors' simulator (tick clock, drop-last, their variant with feedback):
feedback off, their momentum on, F read as the share of aggregations (the reading fdahpc had
before), the event clock, every batch. Each row is read at R
aggregations (convergence accuracy = the mean of evaluations R−19..R), from the grid's own
run files where they are long enough (the same seed's run is the same up to R), else from
runs of R aggregations in ``--out-dir/decompose<R>/``, which it runs (``--seeds``, resumable).
What it reads goes to ``benchmarks/results/fedqs_decompose<R>_<partition>.csv``, which stands in
for the run files on a machine that lacks them.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import _common  # noqa: F401
from _common import REPO_ROOT, RESULTS

import semiasync

METHODS = ("fedavg", "fedavg:weighting=samples", "fedqs-avg", "fedqs-avg:fedqs-variant=authors",
           "fedsgd", "fedsgd:weighting=samples", "fedqs-sgd", "fedqs-sgd:fedqs-variant=authors",
           "fedbuff", "mstep", "wkafl", "sync-fedavg")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", default="dirichlet:0.1,dirichlet:0.5")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--model", default=None,
                   help="default: lenet5bn; on --partitions roles (Shakespeare) the paper's lstm")
    p.add_argument("--train-samples", type=int, default=None,
                   help="the mode's --train-samples (default: all; on --partitions roles TEXT's)")
    p.add_argument("--eval-samples", type=int, default=None,
                   help="the mode's --eval-samples (default: all; on --partitions roles TEXT's)")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--ranks", type=int, default=2, help="2: one host computes every job (about one busy core)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="score the global model every N aggregations (default 2; --decompose: 1)")
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "fedqs-regime"))
    p.add_argument("--no-reuse", action="store_true", help="rerun finished runs instead of reading them")
    p.add_argument("--table", action="store_true", help="print docs/results.md's tables from the CSVs; run nothing")
    p.add_argument("--clock", default="events", choices=("events", "ticks"), help="the mode's --clock")
    p.add_argument("--drop-last", action="store_true", help="the mode's --drop-last")
    p.add_argument("--summary", action="store_true", help="print the README's table (clock × variant × feedback × "
                   "partition) from every grid CSV; run nothing")
    p.add_argument("--decompose", type=int, metavar="R", help="run and print the decomposition of FedQS's gain at R "
                   "aggregations (its rows set the clock, batches and methods; with --table: print only)")
    args = p.parse_args(argv)
    if args.decompose is not None:
        fixed = [f"--{k.replace('_', '-')}" for k in ("clock", "drop_last", "methods", "rounds", "eval_every")
                 if getattr(args, k) != p.get_default(k)]
        if args.decompose < 20:
            p.error(f"--decompose {args.decompose}: at least 20 aggregations (the convergence accuracy's window)")
        if fixed:
            p.error(f"{', '.join(fixed)} with --decompose: its rows set them; leave them out")
    # --decompose: the convergence accuracy at R is the mean of evaluations R-19..R, so every one is scored
    args.eval_every = args.eval_every or (1 if args.decompose is not None else 2)
    return args


def setting(args) -> str:
    """The CSV's and run folder's prefix: '' for the event clock without drop-last."""
    return "".join([f"{args.clock}_" if args.clock != "events" else "", "droplast_" if args.drop_last else ""])


#: The text task, reduced to fit here (docs/tick-clock.md). The LSTM (LEAF's: embedding 8, two
#: layers of 256) takes 0.25 s a step on one core at LEAF's 80 characters and 0.057 s at 20,
#: and at 80 FedAvg was still predicting spaces after 120 aggregations; so: 20 characters of
#: context, N = 50 clients with K = 5 (the paper's N/K = 10), 400 of their roles' windows
#: each (16 steps a job), 500 test windows spread over every role; SGD at LEAF's order for
#: this model, 1.0 (0.1 left it on the space-predicting plateau), FedQS's lr bounds and rate
#: moved with it (× 10).
TEXT = dict(dataset="shakespeare", model="lstm", clients=50, buffer=5, lr=1.0, context=20, train_samples=20_000,
            eval_samples=500, fedqs="--fedqs-a 0.02 --fedqs-lr-min 0.01 --fedqs-lr-max 2")
#: The image grid (the paper's N, K and lr), every sample.
IMAGES = dict(dataset="fashion-mnist", model="lenet5bn", clients=100, buffer=10, lr=0.1, context=None,
              train_samples=None, eval_samples=None, fedqs="")


def semiasync_argv(args, partition: str, out_dir: str | None = None) -> list[str]:
    """``benchmarks/semiasync.py``'s command line for one partition of the grid (``out_dir``:
    the run folder's parent, and no CSV: the decomposition's runs)."""
    tag = setting(args) + partition.replace(":", "")
    task = TEXT if partition == "roles" else IMAGES
    limits = dict(context=task["context"], train_samples=args.train_samples or task["train_samples"],
                  eval_samples=args.eval_samples or task["eval_samples"])
    extra = " ".join(["--clip-grad-norm 20", f"--clock {args.clock}" if args.clock != "events" else "",
                      "--drop-last" if args.drop_last else "",
                      *(f"--{k.replace('_', '-')} {v}" for k, v in limits.items() if v is not None)]).strip()
    flags = ["--methods", args.methods, "--seeds", args.seeds, "--ranks", str(args.ranks), "--dataset", task["dataset"],
             "--model", args.model or task["model"], "--partition", partition, "--clients", str(task["clients"]),
             "--buffer", str(task["buffer"]), "--speed-ratio", "50", "--rounds", str(args.rounds), "--local-epochs", "2",
             "--batch-size", "50", "--lr", str(task["lr"]), "--eval-every", str(args.eval_every), "--extra", extra,
             "--fedqs-extra", task["fedqs"],
             "--out-dir", os.path.join(out_dir or args.out_dir, tag)]
    flags += [] if out_dir else ["--csv", os.path.join(RESULTS, f"fedqs_regime_{tag}.csv")]
    return flags + ([] if args.no_reuse else ["--reuse"])


#: FedQS with one mechanism switched off, each against the full method it comes from
#: (``--methods`` runs them; the table lists every one that has rows). The authors' variant
#: has no momentum to switch off (their main files use none).
ABLATIONS = {f"{full}:{off}": full
             for full in ("fedqs-avg", "fedqs-avg:fedqs-variant=authors", "fedqs-sgd", "fedqs-sgd:fedqs-variant=authors")
             for off in ("fedqs-no-feedback", "fedqs-no-momentum") if not (off == "fedqs-no-momentum" and "authors" in full)}

def family_baseline(method: str) -> str:
    """Model-averaging rules are compared with FedAvg, update-averaging ones with FedSGD."""
    return "fedsgd" if method.startswith(("fedsgd", "fedqs-sgd")) else "fedavg"


#: The rule each method is compared with (its baseline) in the table: its family's, and an
#: ablation against its full method.
BASELINE = {m: family_baseline(m) for m in METHODS
            if m not in ("fedavg", "fedsgd", "fedbuff", "mstep", "wkafl", "sync-fedavg")} | ABLATIONS


def table(partition: str, methods: list[str], csv_dir: str = RESULTS,
          prefix: str = "") -> list[str]:
    """docs/results.md's markdown table of one partition's CSV: every method's convergence
    accuracy per seed, mean ± sd over the seeds it has, and its difference to its baseline
    on the seeds both have."""
    import statistics

    rows = semiasync.read_rows(os.path.join(csv_dir, f"fedqs_regime_{prefix}{partition.replace(':', '')}.csv"))
    seeds = sorted({s for _, s in rows})
    out = [f"| {partition} | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd | − baseline (same seeds) "
           "| rounds to 95 % | oscillations | staleness |", "|---" * (len(seeds) + 6) + "|"]
    for m in methods:
        mine = {s: rows[m, s] for s in seeds if (m, s) in rows}
        if not mine:
            continue
        acc = [100 * r["convergence_accuracy"] for r in mine.values()]
        spread = f"{statistics.fmean(acc):.2f}" + (f" ± {statistics.stdev(acc):.2f}" if len(acc) > 1 else "")
        base = BASELINE.get(m)
        both = [s for s in mine if base and (base, s) in rows]
        diff = (f"{100 * statistics.fmean(mine[s]['convergence_accuracy'] - rows[base, s]['convergence_accuracy'] for s in both):+.2f}"
                f" vs {base} ({len(both)})") if both else ""
        out.append(f"| {m} | " + " | ".join(f"{100 * mine[s]['convergence_accuracy']:.2f}" if s in mine else "–"
                                           for s in seeds)
                   + f" | {spread} | {diff} | {statistics.fmean(r['rounds_to_95pct'] for r in mine.values()):.0f}"
                   f" | {statistics.fmean(r['oscillations'] for r in mine.values()):.1f}"
                   f" | {statistics.fmean(r['staleness_mean'] for r in mine.values()):.1f} |")
    return out


#: The summary's columns: (heading, method); a FedQS column also gives its difference to
#: FedAvg (FedQS-Avg) or FedSGD (FedQS-SGD) on the seeds both have, ablations included.
SUMMARY = (("FedAvg", "fedavg"), ("FedQS-Avg paper", "fedqs-avg"),
           ("FedQS-Avg authors", "fedqs-avg:fedqs-variant=authors"),
           ("FedQS-Avg authors, no feedback", "fedqs-avg:fedqs-variant=authors:fedqs-no-feedback"),
           ("FedSGD", "fedsgd"), ("FedQS-SGD paper", "fedqs-sgd"),
           ("FedQS-SGD authors", "fedqs-sgd:fedqs-variant=authors"),
           ("FedQS-SGD authors, no feedback", "fedqs-sgd:fedqs-variant=authors:fedqs-no-feedback"))


def summary(csv_dir: str = RESULTS) -> list[str]:
    """The README's FedQS table: clock × variant × feedback × partition, from every grid CSV
    (``fedqs_regime_[ticks_][droplast_]<partition>.csv``): each cell the mean convergence
    accuracy ± sd over its seeds, a FedQS cell also its mean difference to FedAvg or FedSGD
    on the seeds both have, and the seed count. A grid's length is its command's (the CSV
    does not hold it): docs/tick-clock.md gives each."""
    import re
    import statistics

    name = re.compile(r"fedqs_regime_(ticks_)?(droplast_)?((?:dirichlet[0-9.]+)|roles)\.csv$")
    out = ["| clock | batches | partition | " + " | ".join(h for h, _ in SUMMARY) + " |",
           "|---" * (3 + len(SUMMARY)) + "|"]
    for file in sorted(os.listdir(csv_dir), key=lambda f: (f.count("_"), f)):
        found = name.match(file)
        if not found:
            continue
        rows = semiasync.read_rows(os.path.join(csv_dir, file))
        cells = []
        for _, m in SUMMARY:
            acc = {s: 100 * r["convergence_accuracy"] for (mm, s), r in rows.items() if mm == m}
            if not acc:
                cells.append("–")
                continue
            cell = f"{statistics.fmean(acc.values()):.2f}" + (f" ± {statistics.stdev(acc.values()):.2f}"
                                                               if len(acc) > 1 else "")
            baseline = family_baseline(m)
            base = {s: 100 * r["convergence_accuracy"] for (mm, s), r in rows.items() if mm == baseline}
            both = [s for s in acc if s in base]
            gain = f"{statistics.fmean(acc[s] - base[s] for s in both):+.2f}; " if both and m != baseline else ""
            cells.append(f"{cell} ({gain}{len(acc)})")
        clock, batches, partition = found.groups()
        where = partition.replace("dirichlet", "Dirichlet ").replace("roles", "Shakespeare roles")
        out.append(f"| {'ticks' if clock else 'events'} | {'drop-last' if batches else 'every'} | {where} | "
                   + " | ".join(cells) + " |")
    return out


#: The decomposition's rows: (what differs from the authors' simulator, clock, drop-last,
#: method, its baseline). A baseline runs under the row's own clock and batches.
DECOMPOSITION = (
    ("none (ticks, drop-last, feedback)", "ticks", True, "fedqs-avg:fedqs-variant=authors", "fedavg"),
    ("feedback weights off", "ticks", True, "fedqs-avg:fedqs-variant=authors:fedqs-no-feedback", "fedavg"),
    ("the authors' momentum on", "ticks", True, "fedqs-avg:fedqs-variant=authors:fedqs-authors-momentum", "fedavg"),
    ("F as the share of aggregations, (n_i+1)/(t+1)", "ticks", True,
     "fedqs-avg:fedqs-variant=authors:fedqs-feedback=authors-per-round", "fedavg"),
    ("event clock", "events", True, "fedqs-avg:fedqs-variant=authors", "fedavg"),
    ("every batch (no drop-last)", "ticks", False, "fedqs-avg:fedqs-variant=authors", "fedavg"),
    ("none (ticks, drop-last, feedback)", "ticks", True, "fedqs-sgd:fedqs-variant=authors", "fedsgd"),
    ("feedback weights off", "ticks", True, "fedqs-sgd:fedqs-variant=authors:fedqs-no-feedback", "fedsgd"),
)


def accuracy_at(path: str, rounds: int) -> float:
    """A finished run's convergence accuracy had it stopped after ``rounds`` aggregations
    (NaN: the file is missing, unfinished or shorter)."""
    from fdahpc.metrics import convergence_metrics

    try:
        acc = semiasync.read_run(path)["round/accuracy"]
    except (OSError, RuntimeError, KeyError):
        return float("nan")
    return convergence_metrics(acc[:rounds])["convergence_accuracy"] if len(acc) >= rounds else float("nan")


def run_cpu(path: str) -> str:
    """The torch CPU kernels a run file's ranks used (its provenance; '' when it has none). A
    run's bits depend on them: the same run with AVX2 kernels instead of AVX-512 ones leaves
    the AVX-512 trajectory from the first aggregation on."""
    import json

    import h5py

    try:
        with h5py.File(path, "r") as f:
            starts = json.loads(f.attrs["provenance"])
    except (OSError, KeyError, ValueError):
        return ""
    return "+".join(sorted({str(r.get("torch_cpu_capability", "")) for p in starts for r in p.get("ranks", ())} - {""}))


def decompose_csv(partition: str, rounds: int, csv_dir: str = RESULTS) -> str:
    """Where the decomposition keeps what it read: run files stay on the machine that ran them."""
    return os.path.join(csv_dir, f"fedqs_decompose{rounds}_{partition.replace(':', '')}.csv")


def _read_kept(path: str) -> dict:
    import csv

    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        return {(r["clock"], r["drop_last"] == "True", r["method"], int(r["seed"])): (float(r["accuracy"]), r["cpu"])
                for r in csv.DictReader(f)}


def _write_kept(path: str, new: dict) -> None:
    """Adds ``new`` to the rows in ``path`` (re-read now: another call may have added its own)."""
    import csv

    rows = {**_read_kept(path), **new}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["clock", "drop_last", "method", "seed", "accuracy", "cpu"])
        for key in sorted(rows):
            out.writerow([*key, repr(rows[key][0]), rows[key][1]])
    os.replace(tmp, path)


def decompose(args, partition: str, rounds: int, run=True, csv_dir: str = RESULTS) -> list[str]:
    """The decomposition at ``rounds`` aggregations on ``partition``: runs what neither the
    grid, an earlier call nor its CSV has (``run``), and returns its markdown table. Every
    accuracy read from a run file goes to ``decompose_csv``, which stands in for run files
    this machine lacks."""
    import statistics

    seeds = [int(s) for s in args.seeds.split(",")]
    own = os.path.join(args.out_dir, f"decompose{rounds}")
    kept_path = decompose_csv(partition, rounds, csv_dir)
    kept, read = _read_kept(kept_path), {}

    def where(clock, drop_last, method, seed, parent):
        tag = setting(argparse.Namespace(clock=clock, drop_last=drop_last)) + partition.replace(":", "")
        return semiasync.run_path(os.path.join(parent, tag), method, seed)

    def accuracy(clock, drop_last, method, seed):
        """(accuracy at ``rounds``, the run's CPU kernels): its run file's, else the CSV's."""
        for parent in (args.out_dir, own):
            path = where(clock, drop_last, method, seed, parent)
            found = accuracy_at(path, rounds)
            if found == found:
                read[(clock, bool(drop_last), method, seed)] = found, run_cpu(path)
                return read[(clock, bool(drop_last), method, seed)]
        return kept.get((clock, bool(drop_last), method, seed), (float("nan"), ""))

    if run:
        for clock, drop_last in dict.fromkeys((c, d) for _, c, d, _, _ in DECOMPOSITION):
            missing = [m for _, c, d, rule, base in DECOMPOSITION if (c, d) == (clock, drop_last)
                       for m in (base, rule) if any(math.isnan(accuracy(c, d, m, s)[0]) for s in seeds)]
            if missing:
                sub = argparse.Namespace(**{**vars(args), "clock": clock, "drop_last": drop_last, "rounds": rounds,
                                            "methods": ",".join(dict.fromkeys(missing))})
                semiasync.main(semiasync_argv(sub, partition, out_dir=own))
    out = [f"| {partition}: switched off or changed | method − baseline | seeds | baseline % | method % "
           f"| gain, points (mean) | CPU kernels |", "|---" * 7 + "|"]
    for label, clock, drop_last, rule, base in DECOMPOSITION:
        pairs = [(accuracy(clock, drop_last, base, s), accuracy(clock, drop_last, rule, s)) for s in seeds]
        pairs = [(b, r) for b, r in pairs if b[0] == b[0] and r[0] == r[0]]
        if not pairs:
            continue
        gains = [100 * (r - b) for (b, _), (r, _) in pairs]
        cpus = sorted({cpu for pair in pairs for _, cpu in pair})
        out.append(f"| {label} | {rule} − {base} | {len(pairs)} | "
                   f"{statistics.fmean(100 * b for (b, _), _ in pairs):.2f} | "
                   f"{statistics.fmean(100 * r for _, (r, _) in pairs):.2f} | "
                   + " ".join(f"{g:+.2f}" for g in gains) + (f" ({statistics.fmean(gains):+.2f})" if len(gains) > 1 else "")
                   + f" | {', '.join(c or 'not recorded' for c in cpus)} |")
    if any(kept.get(k) != v for k, v in read.items()):
        _write_kept(kept_path, read)
    return out


def main(argv=None) -> int:
    args = parse(argv)
    if args.summary:
        print("\n".join(summary()))
        return 0
    for partition in args.partitions.split(","):
        if args.decompose is not None:
            print("\n".join(decompose(args, partition, args.decompose, run=not args.table)) + "\n")
        elif args.table:
            print("\n".join(table(partition, args.methods.split(",") + list(ABLATIONS), prefix=setting(args))) + "\n")
        else:
            semiasync.main(semiasync_argv(args, partition))
    return 0


if __name__ == "__main__":
    sys.exit(main())
