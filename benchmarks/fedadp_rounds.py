"""Rounds to a target accuracy: FedAdp against FedAvg on FashionMNIST with mixed nodes.

The FedAdp paper's setting: 10 nodes, the small CNN, five IID nodes and five nodes with
two classes each (``mix:5*iid+5*classes:2``), rounds to 80 % test accuracy. The paper
reports 45.4 % fewer rounds than FedAvg; the goal here is ≥ 40 %. Both methods use the
same local SGD, round length, seeds and partitions; only the aggregation weights differ.
``fedadp-sketch`` is FedAdp with ``--fedadp-angles sketch`` (one full AllReduce a round).

A round is ``--tau`` local steps (default 94: half an epoch of a node's 6 000 samples at
batch 32). Only evaluations at round ends count, and the round length should divide
the 188-step epoch, because fdahpc.train also evaluates (and may stop on the target) at
epoch ends, where it scores the plain average of the workers' models. The partition's
five two-class nodes cover the ten classes evenly (``classes:C`` assigns classes
cyclically), so the non-IID half is balanced as a group; see fdahpc/data/partition.py.

    python benchmarks/fedadp_rounds.py                     # 3 seeds, about 30 min on 2 cores
    python benchmarks/fedadp_rounds.py --seeds 0 --methods fedavg,fedadp   # a quicker look
    python benchmarks/fedadp_rounds.py --methods fedavg,iid-only   # the most any weighting can win here

``iid-only`` is FedAvg over the IID nodes alone: the rounds FedAdp would need if it gave
the skewed nodes no weight at all, so ``1 - iid-only / fedavg`` bounds FedAdp's reduction
in this setting.

Prints one row per run, then per method the mean rounds to target and the reduction
against FedAvg, then what sketched angles cost in the weights (round 1 compares exact
and sketched weights on identical updates). Runs that never reach the target count as
``--max-rounds`` (a lower bound, marked with ``>``). Run files go to ``runs/fedadp_rounds/``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from _common import REPO_ROOT, print_table, run_train

METHODS = {
    "fedavg": ["--strategy", "fedavg"],
    # McMahan's FedAvg: each node's model weighted by its sample count (the mix's skewed
    # nodes hold half as many samples as the IID ones), the FedAdp paper's baseline.
    "fedavg-weighted": ["--strategy", "fedavg", "--weighting", "samples"],
    "fedadp": ["--strategy", "fedadp"],
    "fedadp-sketch": ["--strategy", "fedadp", "--fedadp-angles", "sketch"],
    # FedAvg on the IID nodes alone (an iid partition over that many ranks, each holding
    # twice the samples): the rounds FedAdp would take if it silenced the skewed nodes
    # entirely, the most its weighting can win in this setting.
    "iid-only": ["--strategy", "fedavg"],
}


def rounds_to_target(run: dict, tau: int, target: float) -> int | None:
    """The first round whose aggregated model scores ``target``; None if none did.

    Only evaluations at round ends count: fdahpc.train also evaluates at epoch ends, and
    mid-round it scores the plain average of the workers' models, which is not the model
    FedAdp would aggregate. A run that stopped on a mid-round evaluation cannot say which
    round reached the target, so that is an error (choose a ``--tau`` dividing the epoch).
    """
    steps, acc = np.asarray(run["eval/step"]), np.asarray(run["eval/accuracy"])
    stop = int(run.get("steps_to_target", -1))
    if stop > 0 and stop % tau:
        raise RuntimeError(f"the run reached the target at step {stop}, inside round {stop // tau + 1} (an epoch-end "
                           f"evaluation); use a --tau that divides the {run['steps_per_epoch']}-step epoch")
    hits = steps[(steps % tau == 0) & (acc >= target)]
    return int(hits[0]) // tau if hits.size else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="fedavg,fedavg-weighted,fedadp,fedadp-sketch",
                   help=f"comma-separated, of {', '.join(METHODS)} (iid-only: see METHODS)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--workers", type=int, default=10)
    p.add_argument("--partition", default="mix:5*iid+5*classes:2")
    p.add_argument("--model", default="cnn")
    p.add_argument("--tau", type=int, default=94,
                   help="local steps per round; should divide the epoch (188 steps at K=10, batch 32)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--target", type=float, default=0.80)
    p.add_argument("--max-rounds", type=int, default=20)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--workdir", default=os.path.join(REPO_ROOT, "runs", "fedadp_rounds"), help="run files go here")
    args = p.parse_args()

    common = ["--model", args.model, "--dataset", "fashion-mnist", "--optimizer", "sgd", "--lr", str(args.lr),
              "--batch-size", str(args.batch_size), "--tau", str(args.tau), "--eval-every", str(args.tau),
              "--epochs", "1000"]
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        p.error(f"--methods {','.join(unknown)}: unknown; choose from {', '.join(METHODS)}")
    skewed = non_iid_nodes(args.partition, args.workers)
    rounds: dict[str, list[int]] = {m: [] for m in methods}
    runs: dict[tuple[str, int], dict] = {}
    rows = []
    os.makedirs(args.workdir, exist_ok=True)
    for seed in seeds:
        for m in methods:
            out = os.path.join(args.workdir, f"{m}-tau{args.tau}-s{seed}.h5")
            if m == "iid-only":  # its epochs are longer; no target stop, which could fall mid-round
                # Rounds beyond FedAvg's own count cannot change the comparison.
                cap = rounds["fedavg"][-1] if "fedavg" in methods[:methods.index(m)] else args.max_rounds
                ranks, flags = args.workers - len(skewed), ["--partition", "iid", "--max-steps", str(args.tau * cap)]
            else:
                cap = args.max_rounds
                ranks, flags = args.workers, ["--partition", args.partition, "--max-steps", str(args.tau * cap),
                                              "--target-accuracy", str(args.target)]
            run = runs[m, seed] = run_train(ranks, METHODS[m] + common + flags + ["--seed", str(seed)], out,
                                            args.timeout)
            r = rounds_to_target(run, args.tau, args.target)
            rounds[m].append(cap if r is None else r)
            rows.append([m, seed, "> %d" % cap if r is None else r,
                         f"{run['final_accuracy']:.4f}", f"{run['comm_bytes'] / 1e9:.3f}", f"{run['wall_seconds']:.0f}"])
            print(f"  {m} seed {seed}: {rows[-1][2]} rounds ({out})", flush=True)
    print(f"\nFashionMNIST, {args.model}, K={args.workers}, {args.partition}, SGD lr {args.lr}, "
          f"batch {args.batch_size}, {args.tau} local steps a round, target {args.target}")
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
    if "fedadp" in methods and "fedadp-sketch" in methods:
        print_weight_error(runs, seeds, skewed)


def non_iid_nodes(spec: str, workers: int) -> np.ndarray:
    """Ranks whose partition group is not ``iid`` (groups take consecutive ranks in order)."""
    from fdahpc.data.partition import parse_partition

    kinds = [g.kind for g in parse_partition(spec, workers) for _ in range(g.workers or workers)]
    return np.flatnonzero(np.array(kinds) != "iid")


def print_weight_error(runs: dict, seeds: list[int], skewed: np.ndarray) -> None:
    """What sketched angles cost in the weights, per seed.

    Both runs of a seed start from the same model and train identically until their first
    aggregation, so round 1 compares exact and sketched weights on the *same* updates; later
    rounds compare two trajectories that have drifted apart (still close).
    """
    rows = []
    for seed in seeds:
        exact, sketch = runs["fedadp", seed], runs["fedadp-sketch", seed]
        we, ws = exact["round/weights"], sketch["round/weights"]
        ae, as_ = exact["round/angles"], sketch["round/angles"]
        n = min(len(we), len(ws))
        dpsi = np.abs(we[:n] - ws[:n]).max(axis=1)
        rows.append([seed, f"{dpsi[0]:.4f}", f"{np.degrees(np.abs(ae[0] - as_[0]).max()):.2f}",
                     f"{dpsi.mean():.4f}", n, f"{we[0][skewed].sum():.3f}", f"{ws[0][skewed].sum():.3f}"])
    print("\nSketched angles against exact ones (round 1: the same updates; later rounds: two close trajectories)")
    print_table(["seed", "round-1 max |Δψ|", "round-1 max |Δθ| (deg)", "mean max |Δψ|", "rounds",
                 "round-1 ψ of non-IID (exact)", "(sketch)"], rows)


if __name__ == "__main__":
    main()
