"""What a long first round costs FDA: a probe for ``--theta auto``'s calibration.

    mpiexec -n 8 python benchmarks/theta_probe.py --partition classes:2 --optimizer sgd --lr 0.1 \\
        --first 235 --theta 1 --targets 0.75,0.8

``--theta auto`` learns Θ from a first round of E epochs that nothing interrupts. Whether
any rule built that way can land near the best tuned Θ depends on one fact per regime:
does that first round itself cost steps to the target? This script trains LinearFDA
exactly as ``fdahpc.train`` does (same data, partition, batches, model, evaluation) but
with a scripted schedule: the first ``--first`` steps run unsynchronized (Θ = ∞), a sync
ends them, and from then on the trigger runs with the fixed ``--theta``. ``--first 0`` is
plain LinearFDA with that Θ, the reference. It prints the steps and GB at which the
averaged model first reached each target (evaluated every ``--eval-every`` steps on the
whole test set, as the frontier's runs are), and the syncs.
"""

from __future__ import annotations

import argparse
import math
import sys

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--first", type=int, default=0, help="steps of the unsynchronized first round (0: none)")
    p.add_argument("--theta", type=float, required=True, help="LinearFDA's Θ after the first round")
    p.add_argument("--targets", default="0.75,0.8", help="comma-separated test accuracies")
    p.add_argument("--partition", default="classes:2")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--model", default="lenet5")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--epochs", type=float, default=6)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--first-only", action="store_true",
                   help="stop after the first round and print its divergence: the exact model variance Var, the mean "
                        "squared drift mean||u_k||^2 and their ratio (1 - ||ū||^2 / mean||u_k||^2: 0 when every "
                        "worker drifted alike, 1 when their drifts cancel)")
    args = p.parse_args(argv)
    if args.first_only and args.first < 1:
        p.error("--first-only reports the first round's end: give it --first STEPS (>= 1)")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    from fdahpc.comm import make_communicator
    from fdahpc.strategies.fda import exact_variance
    from fdahpc.cli import parse_args
    from fdahpc.sync_loop import MODE
    from fdahpc.worker import local_steps

    comm = make_communicator()
    plan = parse_args(["--strategy", "linearfda", "--theta", f"{args.theta:g}", "--dataset", args.dataset,
                      "--model", args.model, "--partition", args.partition, "--optimizer", args.optimizer,
                      "--lr", f"{args.lr:g}", "--epochs", f"{args.epochs:g}", "--seed", str(args.seed)])
    cfg = plan.cfg
    job = MODE.build(plan, comm)
    job.fresh()
    strategy, trigger = job.strategy, job.strategy.trigger
    targets = sorted(float(t) for t in args.targets.split(","))
    hits: dict[float, tuple[int, float]] = {}
    job.model.train()
    for step in range(1, job.total_steps + 1):
        # The schedule: Θ = ∞ through the first round, Θ = 0 at its last step (a sync), then Θ.
        trigger.theta = (math.inf if step < args.first else 0.0 if step == args.first else args.theta)
        local_steps(job.model, job.batches, 1, job.optimizer.step, job.optimizer.zero_grad, cfg.clip_grad_norm)
        if args.first_only and step == args.first:
            u = job.flat.w - strategy.anchor
            mean_sq = float(comm.allreduce_mean_(torch.dot(u, u).reshape(1), "eval")[0])
            variance = exact_variance(comm, u)
            if comm.is_root:
                print(f"{cfg.partition}@{comm.world_size} {args.optimizer} {args.lr:g}, seed {args.seed}, first round "
                      f"{args.first} steps: Var {variance:.4g}, mean||u||^2 {mean_sq:.4g}, ratio {variance / mean_sq:.3f}")
            comm.close()
            return 0
        strategy.after_step()
        if step % args.eval_every == 0 or step == job.total_steps:
            acc, _ = job.evaluator.evaluate(job.model, strategy.held_model)
            job.model.train()
            for t in targets:
                if acc >= t and t not in hits:
                    hits[t] = (step, strategy.comm_bytes() / 1e9)
            if len(hits) == len(targets):
                break
    strategy.finish()
    if comm.is_root:
        plan = f"first round {args.first} steps, then Θ={args.theta:g}" if args.first else f"Θ={args.theta:g} throughout"
        print(f"{cfg.partition}@{comm.world_size} {args.optimizer} {args.lr:g}, {plan}: {strategy.syncs} syncs, "
              f"final accuracy {acc:.4f} at step {step}")
        for t in targets:
            print(f"  target {t:g}: " + (f"step {hits[t][0]}, {hits[t][1]:.4f} GB" if t in hits else "not reached"))
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
