"""Rounds to a target accuracy: FedAdp against FedAvg on FashionMNIST with mixed nodes.

The FedAdp paper's setting: 10 nodes, the small CNN, five IID nodes and five nodes with
two classes each (``mix:5*iid+5*classes:2``), rounds to 80 % test accuracy. The paper
reports 45.4 % fewer rounds than FedAvg; the goal here is ≥ 40 %. Both methods use the
same local SGD, round length, seeds and partitions; only the aggregation weights differ.
``fedadp-sketch`` is FedAdp with ``--fedadp-angles sketch`` (one full AllReduce a round).

    python benchmarks/fedadp_rounds.py                     # 3 seeds, about 30 min on 2 cores
    python benchmarks/fedadp_rounds.py --seeds 0 --max-rounds 20   # a quick look

Prints one row per run, then per method the mean rounds to target and the reduction
against FedAvg. Runs that never reach the target count as ``--max-rounds`` (a lower
bound, marked with ``>``).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
from _common import print_table, run_train

METHODS = {
    "fedavg": ["--strategy", "fedavg"],
    "fedadp": ["--strategy", "fedadp"],
    "fedadp-sketch": ["--strategy", "fedadp", "--fedadp-angles", "sketch"],
}


def round_length(run: dict, tau: int | None, local_epochs: float) -> int:
    """Local steps per round: ``--tau``, else ``--local-epochs`` of the run's epoch."""
    return tau if tau is not None else max(1, round(local_epochs * int(run["steps_per_epoch"])))


def rounds_to_target(run: dict, round_steps: int) -> int | None:
    steps = run.get("steps_to_target", -1)
    return None if steps < 0 else -(-int(steps) // round_steps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="fedavg,fedadp,fedadp-sketch")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--workers", type=int, default=10)
    p.add_argument("--partition", default="mix:5*iid+5*classes:2")
    p.add_argument("--model", default="cnn")
    p.add_argument("--tau", type=int, default=100, help="local steps per round (0: use --local-epochs)")
    p.add_argument("--local-epochs", type=float, default=1.0, help="local epochs per round when --tau 0")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--target", type=float, default=0.80)
    p.add_argument("--max-rounds", type=int, default=20)
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args()
    args.tau = args.tau or None

    common = ["--model", args.model, "--dataset", "fashion-mnist", "--partition", args.partition,
              "--optimizer", "sgd", "--lr", str(args.lr), "--batch-size", str(args.batch_size),
              "--target-accuracy", str(args.target)]
    if args.tau is not None:  # evaluated at every round's end (and at epoch ends, which do not change rounds)
        common += ["--tau", str(args.tau), "--eval-every", str(args.tau), "--epochs", "1000",
                   "--max-steps", str(args.tau * args.max_rounds)]
    else:  # rounds end with epochs, where fdahpc.train always evaluates
        common += ["--local-epochs", str(args.local_epochs), "--epochs", str(args.local_epochs * args.max_rounds)]
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    rounds: dict[str, list[int]] = {m: [] for m in methods}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for m in methods:
                out = os.path.join(tmp, f"{m}-{seed}.h5")
                run = run_train(args.workers, METHODS[m] + common + ["--seed", str(seed)], out, args.timeout)
                round_steps = round_length(run, args.tau, args.local_epochs)
                r = rounds_to_target(run, round_steps)
                rounds[m].append(args.max_rounds if r is None else r)
                rows.append([m, seed, "> %d" % args.max_rounds if r is None else r,
                             f"{run['final_accuracy']:.4f}", f"{run['comm_bytes'] / 1e9:.3f}",
                             f"{run['wall_seconds']:.0f}"])
                print(f"  {m} seed {seed}: {rows[-1][2]} rounds", flush=True)
    length = f"{args.tau} local steps" if args.tau is not None else f"{args.local_epochs:g} local epochs ({round_steps} steps)"
    print(f"\nFashionMNIST, {args.model}, K={args.workers}, {args.partition}, SGD lr {args.lr}, "
          f"batch {args.batch_size}, {length} a round, target {args.target}")
    print_table(["method", "seed", "rounds", "final acc", "GB", "wall s"], rows)
    base = np.mean(rounds["fedavg"]) if "fedavg" in rounds else None
    summary = []
    for m in methods:
        mean = np.mean(rounds[m])
        red = "" if base is None or m == "fedavg" else f"{100 * (1 - mean / base):.1f} %"
        per_seed = "" if base is None or m == "fedavg" else ", ".join(
            f"{100 * (1 - a / b):.0f}%" for a, b in zip(rounds[m], rounds["fedavg"]))
        summary.append([m, f"{mean:.1f}", red, per_seed])
    print()
    print_table(["method", "mean rounds", "fewer rounds than fedavg", "per seed"], summary)


if __name__ == "__main__":
    main()
