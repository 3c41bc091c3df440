"""The character GPT on Shakespeare's role split: Synchronous, FedAvg and LinearFDA side by side.

    python benchmarks/shakespeare.py [--ranks 4] [--steps 300] [--methods a,b] [--out-dir runs/shakespeare]

Needs the corpus (``python -m fdahpc.data fetch shakespeare``). K ranks train the default
GPT (0.21 M parameters, context 64, batch 32, Adam 1e-3) on ``--partition roles`` for the
same number of steps; the averaged model is scored on the whole held-out text at each
third of the run. Resumable: a run whose file is complete is read back, not rerun (``--fresh``
reruns all). Prints the loss and next-character accuracy reached, steps, model syncs
and training bytes of each method.
"""

from __future__ import annotations

import argparse
import os

from _common import print_report, read_run, run_train

METHODS = {
    "synchronous": ["--strategy", "synchronous"],
    "fedavg tau=10": ["--strategy", "fedavg", "--tau", "10"],
    "fedavg tau=50": ["--strategy", "fedavg", "--tau", "50"],
    "linearfda theta=0.5": ["--strategy", "linearfda", "--theta", "0.5"],
    "linearfda theta=2": ["--strategy", "linearfda", "--theta", "2"],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="runs/shakespeare")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated labels of METHODS")
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args()
    chosen = [m.strip() for m in args.methods.split(",")]
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        p.error(f"--methods: unknown {unknown}; choose from {', '.join(METHODS)}")
    third = max(1, args.steps // 3)
    os.makedirs(args.out_dir, exist_ok=True)
    common = ["--dataset", "shakespeare", "--model", "gpt", "--partition", "roles", "--max-steps", str(args.steps),
              "--eval-every", str(third), "--seed", str(args.seed)]
    rows = []
    for label in chosen:
        flags = METHODS[label]
        stem = label.replace(" ", "_").replace("=", "")
        out = os.path.join(args.out_dir, f"{stem}-k{args.ranks}-n{args.steps}-s{args.seed}.h5")
        run = read_run(out) if os.path.exists(out) and not args.fresh else None
        if run is None or run.get("status") != "finished":
            run = run_train(args.ranks, common + flags, out, args.timeout)
        loss, acc, steps = run["eval/loss"], run["eval/accuracy"], run["eval/step"]
        at = {int(s): f"{l:.3f}" for s, l in zip(steps, loss)}
        rows.append([label, run["steps"], run["syncs"], f"{run['comm_bytes'] / 1e6:.1f}", at.get(third, "-"),
                     at.get(2 * third, "-"), f"{loss[-1]:.3f}", f"{acc[-1]:.4f}", f"{run['wall_seconds']:.0f}"])
    print_report(f"GPT (0.21 M) on Shakespeare, --partition roles, K = {args.ranks}, {args.steps} steps, "
                 f"seed {args.seed}",
                 ["method", "steps", "syncs", "MB", f"loss@{third}", f"loss@{2 * third}", "loss", "accuracy", "wall s"],
                 rows,
                 "loss: mean next-character cross-entropy of the averaged model on the held-out text (nats); "
                 "accuracy: next-character accuracy; MB: training bytes (model syncs and FDA states), all ranks")


if __name__ == "__main__":
    main()
