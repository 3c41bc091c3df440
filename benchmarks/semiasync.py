"""Semi-asynchronous FL: FedQS against its baselines, the FedQS paper's measures.

    python benchmarks/semiasync.py                      # the full setting (hours on 2 cores)
    python benchmarks/semiasync.py --model lenet5 --tau 20 --rounds 150 --seeds 0

Setting (defaults): FashionMNIST, Dirichlet(0.5) over N = 40 clients, buffer K = 5, speed
ratio 1:50, the small CNN, one local epoch per job, seeds 0-2, 4 ranks. Methods: the
semi-asynchronous rules fedavg, fedqs-avg, fedsgd, fedqs-sgd, fedbuff, and synchronous
FedAvg (``sync-fedavg``: the same mode with ``--buffer N``, so every round waits for the
slowest client).

A method may carry flags of its own, ``NAME:flag=value:...``: ``fedqs-avg:fedqs-variant=authors``
is FedQS-Avg as the authors' code runs it, ``fedqs-avg:fedqs-feedback=misread`` with the
weight this code used before, ``fedqs-avg:fedqs-no-feedback`` the ablation without
feedback, ``fedavg:weighting=samples`` the sample-weighted FedAvg; ``mstep`` and ``wkafl``
are rules of their own.

Per method it prints, as means over seeds: convergence accuracy (mean of the last 20
evaluated rounds), rounds to 95 % of it, oscillations (rounds more than 15 points below
the running best), the virtual time of the whole run, the virtual time at which the run
first reaches semi-async FedAvg's convergence accuracy (and its ratio to synchronous
FedAvg's), and the peak resident memory summed over ranks. Then the goals, each met or
missed, from the paper's claims:
- FedQS-Avg ≥ FedAvg + 3 points, FedQS-SGD ≥ FedSGD (convergence accuracy);
- the virtual time to FedAvg's convergence accuracy ≤ 50 % of synchronous FedAvg's.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys

import numpy as np

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import REPO_ROOT, print_report, read_run, run_train

METHODS = ("fedavg", "fedqs-avg", "fedsgd", "fedqs-sgd", "fedbuff", "sync-fedavg")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--model", default="cnn")
    p.add_argument("--partition", default="dirichlet:0.5")
    p.add_argument("--clients", type=int, default=40)
    p.add_argument("--buffer", type=int, default=5)
    p.add_argument("--speed-ratio", type=int, default=50)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--sync-rounds", type=int, default=None, help="rounds of sync-fedavg (default: as many local jobs as the others)")
    p.add_argument("--tau", type=int, default=None, help="local job in steps (default: --local-epochs of each client's data)")
    p.add_argument("--local-epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=None, help="client learning rate (default: the mode's, SGD 0.1)")
    p.add_argument("--eval-every", type=int, default=1, help="score every N rounds (sync-fedavg, with N/K fewer rounds, every round)")
    p.add_argument("--extra", default="", help="more flags for every run, e.g. '--scenario fluctuate:10'")
    p.add_argument("--fedqs-extra", default="", help="more flags for the FedQS rules' runs only (options the others "
                   "refuse), e.g. '--fedqs-lr-max 2'; not part of the method's name")
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "semiasync"))
    p.add_argument("--csv", default=None, help="also write the per-run rows here")
    p.add_argument("--timeout", type=float, default=4 * 3600)
    p.add_argument("--reuse", action="store_true", help="read finished run files in --out-dir instead of rerunning them")
    return p.parse_args(argv)


def method_flags(method: str) -> tuple[str, list[str]]:
    """``"fedqs-avg:fedqs-feedback=code"`` → ("fedqs-avg", ["--fedqs-feedback", "code"])."""
    name, *extra = method.split(":")
    flags = []
    for item in extra:
        key, eq, value = item.partition("=")
        flags += [f"--{key}", value] if eq else [f"--{key}"]
    return name, flags


def flags_for(args, method: str, seed: int) -> list[str]:
    method, own = method_flags(method)
    sync = method == "sync-fedavg"
    rounds = args.sync_rounds or max(1, args.rounds * args.buffer // args.clients)
    flags = ["--mode", "semiasync", "--strategy", "fedavg" if sync else method, "--dataset", args.dataset,
             "--model", args.model, "--partition", args.partition, "--clients", str(args.clients),
             "--buffer", str(args.clients if sync else args.buffer), "--rounds", str(rounds if sync else args.rounds),
             "--speed-ratio", str(args.speed_ratio), "--batch-size", str(args.batch_size), "--seed", str(seed),
             "--eval-every", str(1 if sync else args.eval_every), "--local-epochs", str(args.local_epochs)]
    if args.tau is not None:
        flags += ["--tau", str(args.tau)]
    if args.lr is not None:
        flags += ["--lr", str(args.lr)]
    return flags + own + args.extra.split() + (args.fedqs_extra.split() if method.startswith("fedqs") else [])


def run_path(out_dir: str, method: str, seed: int) -> str:
    """The run file of ``method`` (``semiasync.py`` syntax) at ``seed`` in ``out_dir``."""
    return os.path.join(out_dir, f"{method.replace(':', '_').replace('=', '-')}-seed{seed}.h5")


def time_to(run: dict, accuracy: float) -> float:
    """Virtual time of the first evaluated round at or above ``accuracy`` (NaN if never)."""
    acc, t = run["round/accuracy"], run["round/virtual_time"]
    hit = np.flatnonzero(acc >= accuracy)
    return float(t[hit[0]]) if len(hit) else float("nan")


def staleness(run: dict) -> float:
    """Mean staleness of the aggregated updates over the whole run."""
    return float(np.mean(run["round/staleness_mean"]))


def mean(values) -> float:
    values = [v for v in values if v == v]
    return statistics.fmean(values) if values else float("nan")


def never(values) -> str:
    """Marks a mean that leaves out seeds which never got there."""
    missing = sum(v != v for v in values)
    return f" ({missing} never)" if missing else ""


FIELDS = ("method", "seed", "convergence_accuracy", "rounds_to_95pct", "oscillations", "staleness_mean", "virtual_time",
          "time_to_fedavg_accuracy", "peak_rss_gb", "wall_seconds")


def read_rows(path: str) -> dict[tuple[str, int], dict]:
    """The rows of an earlier ``--csv``, keyed by (method, seed): finished results of a resumed grid."""
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as fh:
        return {(r["method"], int(r["seed"])): {k: (v if k == "method" else int(v) if k == "seed" else float(v))
                                                for k, v in r.items()} for r in csv.DictReader(fh)}


def write_rows(path: str, rows: dict[tuple[str, int], dict], order: dict[str, int]) -> None:
    """Every row, this call's and earlier calls' alike, by seed and then in ``order`` (method: rank)."""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(sorted(rows.values(), key=lambda r: (r["seed"], order.get(r["method"], len(order)), r["method"])))


def save_row(path: str, row: dict, order: dict[str, int]) -> None:
    """Add ``row`` to the CSV (replacing its method and seed's), keeping every other row the file
    holds now: another invocation may have written some since this one read it (a grid run as
    parallel streams)."""
    write_rows(path, {**read_rows(path), (row["method"], row["seed"]): row}, order)


def row_of(method: str, seed: int, run: dict, reference: float) -> dict:
    """One run's figures; ``reference`` is semi-async FedAvg's convergence accuracy on the same seed."""
    return dict(method=method, seed=seed, convergence_accuracy=run["convergence_accuracy"],
                rounds_to_95pct=run["rounds_to_95pct"], oscillations=run["oscillations"], staleness_mean=staleness(run),
                virtual_time=run["virtual_time"], time_to_fedavg_accuracy=time_to(run, reference),
                peak_rss_gb=run["peak_rss_total"] / 2**30, wall_seconds=run["wall_seconds"])


def main(argv=None) -> int:
    args = parse(argv)
    methods, seeds = args.methods.split(","), [int(s) for s in args.seeds.split(",")]
    os.makedirs(args.out_dir, exist_ok=True)
    done = read_rows(args.csv) if args.reuse and args.csv else {}
    # the CSV's rows keep their order (a resumed grid run with a subset of --methods does not
    # reshuffle the file); methods new to it follow in the order of --methods
    order = {m: i for i, m in enumerate(dict.fromkeys([m for m, _ in done] + methods))}
    for seed in seeds:
        for method in methods:
            if (method, seed) in done:
                continue
            out = run_path(args.out_dir, method, seed)
            run = None
            if args.reuse and os.path.exists(out):
                try:
                    run = read_run(out)
                except (RuntimeError, OSError):
                    pass  # unfinished or unreadable: run it again
            if run is None:
                run = run_train(args.ranks, flags_for(args, method, seed), out, args.timeout)
                print(f"{method} seed {seed}: convergence accuracy {run['convergence_accuracy']:.4f}, "
                      f"virtual time {run['virtual_time']}, {run['wall_seconds']:.0f} s", file=sys.stderr, flush=True)
            reference = (run if method == "fedavg" else done.get(("fedavg", seed), {})).get("convergence_accuracy", float("nan"))
            done[method, seed] = row_of(method, seed, run, reference)
            if args.csv:  # after every run, so that an interrupted grid keeps what it finished
                save_row(args.csv, done[method, seed], order)
    table = []
    for method in methods:
        mine = [done[method, s] for s in seeds]
        to_ref = [r["time_to_fedavg_accuracy"] for r in mine]
        sync_to_ref = [done["sync-fedavg", s]["time_to_fedavg_accuracy"] if ("sync-fedavg", s) in done else float("nan")
                       for s in seeds]
        ratio = mean([a / b for a, b in zip(to_ref, sync_to_ref)])
        accs = [r["convergence_accuracy"] for r in mine]
        table.append([method, f"{100 * mean(accs):.2f}" + (f" ± {100 * statistics.stdev(accs):.2f}" if len(accs) > 1 else ""),
                      f"{mean(r['rounds_to_95pct'] for r in mine):.0f}", f"{mean(r['oscillations'] for r in mine):.1f}",
                      f"{mean(r['staleness_mean'] for r in mine):.2f}",
                      f"{mean(r['virtual_time'] for r in mine):.0f}", f"{mean(to_ref):.0f}" + never(to_ref), f"{ratio:.2f}",
                      f"{max(r['peak_rss_gb'] for r in mine):.2f}", f"{mean(r['wall_seconds'] for r in mine):.0f}"])
    print_report(
        f"Semi-async FL: {args.model} on {args.dataset}, {args.partition}, N = {args.clients}, K = {args.buffer}, "
        f"1:{args.speed_ratio}, {args.ranks} ranks, seeds {args.seeds}",
        ["method", "conv. acc %", "rounds to 95%", "oscillations", "staleness", "virtual time", "time to FedAvg acc",
         "vs sync", "peak RSS GB", "wall s"], table,
        "conv. acc: mean of the last 20 evaluated rounds; staleness: mean staleness of the aggregated updates; time to FedAvg acc: virtual time at which the run first "
        "reaches semi-async FedAvg's convergence accuracy (same seed; mean over the seeds that did); vs sync: that time over synchronous FedAvg's; "
        "peak RSS: all ranks together, the largest over seeds.")
    conv = {m: mean(done[m, s]["convergence_accuracy"] for s in seeds) for m in methods}
    goals = []
    if {"fedavg", "fedqs-avg"} <= conv.keys():
        gain = 100 * (conv["fedqs-avg"] - conv["fedavg"])
        goals.append(f"FedQS-Avg >= FedAvg + 3 points: {'met' if gain >= 3 else 'MISSED'} ({gain:+.2f} points)")
    if {"fedsgd", "fedqs-sgd"} <= conv.keys():
        gain = 100 * (conv["fedqs-sgd"] - conv["fedsgd"])
        goals.append(f"FedQS-SGD >= FedSGD: {'met' if gain >= 0 else 'MISSED'} ({gain:+.2f} points)")
    if {"fedavg", "sync-fedavg"} <= conv.keys():
        r = mean(done["fedavg", s]["time_to_fedavg_accuracy"] / done["sync-fedavg", s]["time_to_fedavg_accuracy"]
                 for s in seeds)
        goals.append(f"virtual time to FedAvg's accuracy <= 50 % of synchronous: {'met' if r <= 0.5 else 'MISSED'} "
                     f"({100 * r:.0f} %; NaN: synchronous never got there, raise --sync-rounds)")
    print("\n".join(goals))  # the CSV has every row already (save_row, merged with what parallel streams wrote)
    return 0


if __name__ == "__main__":
    sys.exit(main())
