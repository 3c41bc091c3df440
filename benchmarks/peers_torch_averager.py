"""Synchronous Local-SGD two ways: fdahpc's FedAvg and torch's own model averaging.

    python benchmarks/peers_torch_averager.py                      # 900 steps, period 10, warm-up 100
    python benchmarks/peers_torch_averager.py --steps 300 --repeats 1

The same job each way, under ``torchrun --nproc-per-node 2`` over gloo: LeNet-5 on
FashionMNIST split over the 2 ranks by ``fdahpc.data.partition`` (``--partition``), SGD
(lr 0.05, batch 32, each rank's batches from fdahpc's seeded ``BatchStream``, so both draw
the same batches), the initial model built from the seed as fdahpc builds it; the models
averaged every ``--period`` steps. Three ways:

- fdahpc: ``python -m fdahpc.train --strategy fedavg --tau P --backend gloo`` (averages
  after steps P, 2P, ...); ``fdahpc-quiet`` adds ``--stop-check-every STEPS``: by default
  the ranks agree on signals and divergence every 10 steps (a 16-byte all-gather), which
  torch's averagers do not do;
- torch's ``PeriodicModelAverager(period=P, warmup_steps=0)`` called after every optimizer
  step, as its documentation shows (it averages after steps 1, 1+P, 1+2P, ...: its counter
  starts at 0);
- post-local SGD as torch documents it: the model in ``DistributedDataParallel`` with
  ``post_localSGD_hook`` (``PostLocalSGDState(start_localSGD_iter=W)``: gradients
  all-reduced every step for the first W steps) and ``PeriodicModelAverager(P, W)``. The
  hook's ``subgroup`` is one rank each: ``subgroup=None`` would make one subgroup per
  machine, and both ranks here share one, which keeps the gradients all-reduced after the
  warm-up and leaves nothing local; one rank per subgroup stands for one machine each.

Per run: seconds per step (the training loop's wall time over its steps; scoring apart),
averagings, the bytes each rank handed to all-reduce for training (4·d per model or
gradient all-reduce; fdahpc's ``comm_bytes_rank0`` counts the same), and the accuracy on
the 10 000 test images of the mean of the two ranks' final models (fdahpc's evaluator
scores that mean too), by ``fdahpc.evaluate.score``. Medians over ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)
from _common import REPO_ROOT, child_env, print_report, read_run

BATCH, LR, SEED = 32, 0.05, 0
WAYS = ("fdahpc", "fdahpc-quiet", "periodic", "postlocal")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=900, help="local steps per rank (900 < one epoch: no scoring inside)")
    p.add_argument("--period", type=int, default=10)
    p.add_argument("--warmup", type=int, default=100, help="post-local SGD's synchronous steps")
    p.add_argument("--partition", default="iid")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default=",".join(WAYS))
    p.add_argument("--worker", choices=("periodic", "postlocal"), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "runs", "peers_torch"))
    args = p.parse_args(argv)
    bad = [w for w in args.only.split(",") if w not in WAYS]
    if bad:
        p.exit(2, f"peers_torch_averager.py: --only {bad[0]!r}: unknown; use a comma list of {', '.join(WAYS)}\n")
    if min(args.steps, args.period) < 1 or args.warmup < 0:
        p.exit(2, "peers_torch_averager.py: --steps and --period must be >= 1 and --warmup >= 0, e.g. --steps 900 "
                  "--period 10 --warmup 100\n")
    return args


# ----------------------------------------------------------------------------- torch's averagers
def torch_worker(args) -> None:
    """One rank of torch's Local SGD (``periodic``) or post-local SGD (``postlocal``)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

    from fdahpc.data import load_dataset, partition
    from fdahpc.evaluate import score
    from fdahpc.models import build_model
    from fdahpc.worker import BatchStream

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    data = load_dataset("fashion-mnist", seed=SEED,
                        train_indices=lambda labels: partition(labels, size, args.partition, SEED)[rank])
    torch.manual_seed(SEED)
    model = build_model("lenet5", 1, 28, 10)
    d = sum(p.numel() for p in model.parameters())
    trained = model
    warmup = args.warmup if args.worker == "postlocal" else 0
    if args.worker == "postlocal":
        from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (PostLocalSGDState,
                                                                                     post_localSGD_hook)

        subgroup, _ = dist.new_subgroups(group_size=1)  # one "machine" per rank
        trained = torch.nn.parallel.DistributedDataParallel(model)
        trained.register_comm_hook(PostLocalSGDState(process_group=None, subgroup=subgroup, start_localSGD_iter=warmup),
                                   post_localSGD_hook)
    averager = PeriodicModelAverager(period=args.period, warmup_steps=warmup)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    batches = BatchStream(data.x_train, data.y_train, BATCH, SEED, rank)
    averagings = 0
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(args.steps):
        xb, yb = batches.next()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(trained(xb), yb).backward()
        opt.step()
        averagings += step >= warmup and (step - warmup) % args.period == 0  # what average_parameters will do
        averager.average_parameters(model.parameters())
    dist.barrier()
    seconds = time.perf_counter() - t0
    # Scored as fdahpc scores: the mean of the ranks' models (not counted as training traffic).
    with torch.no_grad():
        flat = torch.nn.utils.parameters_to_vector(model.parameters())
        dist.all_reduce(flat)
        torch.nn.utils.vector_to_parameters(flat / size, model.parameters())
    if rank == 0:
        acc = score(model, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)).accuracy
        with open(args.result, "w") as f:
            json.dump(dict(steps=args.steps, seconds=seconds, averagings=averagings, accuracy=acc,
                           bytes_rank0=4 * d * (averagings + min(warmup, args.steps))), f)
    dist.destroy_process_group()


# ----------------------------------------------------------------------------- driver
def torchrun(port: int, target: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port), *target]


def run(args, way: str, rep: int) -> dict:
    out = os.path.join(args.out_dir, f"{way}-r{rep}")
    port = 29500 + os.getpid() % 1000 + rep  # clear of a neighbour's default port
    if way.startswith("fdahpc"):
        # fdahpc-quiet: the ranks agree on signals and divergence only at the end, not every
        # 10 steps (--stop-check-every): torch's averagers have no such check
        quiet = ["--stop-check-every", str(args.steps)] if way == "fdahpc-quiet" else []
        cmd = torchrun(port, ["-m", "fdahpc.train", "--strategy", "fedavg", "--tau", str(args.period), "--backend", "gloo",
                              "--model", "lenet5", "--dataset", "fashion-mnist", "--partition", args.partition,
                              "--optimizer", "sgd", "--lr", str(LR), "--batch-size", str(BATCH), "--seed", str(SEED),
                              "--max-steps", str(args.steps), "--threads", "1", "--log-every", "1000000",
                              *quiet, "--out", out + ".h5"])
    else:
        cmd = torchrun(port, [os.path.abspath(__file__), "--worker", way, "--steps", str(args.steps), "--period",
                              str(args.period), "--warmup", str(args.warmup), "--partition", args.partition,
                              "--result", out + ".json"])
    proc = subprocess.run(cmd, env=child_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
    if not way.startswith("fdahpc"):
        with open(out + ".json") as f:
            return json.load(f)
    r = read_run(out + ".h5")
    if r["steps"] != args.steps or r["last_eval_step"] != args.steps:
        raise RuntimeError(f"fdahpc ran {r['steps']} steps (scored at {r['last_eval_step']}), not {args.steps}")
    return dict(steps=r["steps"], seconds=r["wall_seconds"] - r["eval_seconds"], averagings=r["syncs"],
                accuracy=r["final_accuracy"], bytes_rank0=r["comm_bytes_rank0"])


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        torch_worker(args)
        return 0
    import torch

    os.makedirs(args.out_dir, exist_ok=True)
    ways = args.only.split(",")
    print(f"# torch {torch.__version__}, gloo, torchrun --nproc-per-node 2, 1 thread per rank")
    print(f"# job: LeNet-5, FashionMNIST {args.partition} over 2 ranks, SGD lr {LR}, batch {BATCH}, seed {SEED}, "
          f"{args.steps} steps, period {args.period}")
    print(f"# fdahpc: --strategy fedavg --tau {args.period} --backend gloo (uniform mean; the ranks agree on signals "
          f"every 10 steps, fdahpc-quiet only at the end: --stop-check-every {args.steps})")
    print(f"# periodic: PeriodicModelAverager(period={args.period}, warmup_steps=0), average_parameters after every step")
    print(f"# postlocal: DDP + post_localSGD_hook(PostLocalSGDState(subgroup=1 rank each, start_localSGD_iter="
          f"{args.warmup})) + PeriodicModelAverager(period={args.period}, warmup_steps={args.warmup})", flush=True)
    results = {w: [] for w in ways}
    for rep in range(args.repeats):
        for way in ways:  # interleaved
            results[way].append(run(args, way, rep))
            r = results[way][-1]
            print(f"repeat {rep}: {way} {1000 * r['seconds'] / r['steps']:.2f} ms/step, accuracy {r['accuracy']:.4f}",
                  file=sys.stderr, flush=True)
    rows = []
    ref = next((w for w in ways if w.startswith("fdahpc")), None)
    for way in ways:
        r = results[way]
        ms = statistics.median(1000 * x["seconds"] / x["steps"] for x in r)
        ratio = (statistics.median(a["seconds"] / b["seconds"] for a, b in zip(r, results[ref])) if ref
                 else float("nan"))
        rows.append([way, f"{ms:.2f}", f"{ratio:.2f}", str(r[0]["averagings"]), f"{r[0]['bytes_rank0'] / 2**20:.2f}",
                     f"{statistics.median(x['accuracy'] for x in r):.4f}"])
    print_report(f"Synchronous Local SGD: {args.steps} steps, period {args.period}, 2 ranks over gloo, "
                 f"{args.repeats} interleaved repeats (medians)",
                 ["way", "ms/step", f"/ {ref}", "averagings", "MiB all-reduced per rank", "final accuracy"], rows,
                 "ms/step: the training loop's wall time over its steps (scoring apart); MiB all-reduced per rank: "
                 "what rank 0 handed to all-reduce for training (model averagings, and post-local SGD's gradient "
                 "all-reduces in its warm-up), 4 bytes a parameter; final accuracy: the mean of the two ranks' models.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
