"""torchft's fault-tolerant ``LocalSGD`` on the job of ``peers_torch_averager.py`` (CPU, gloo).

    pip install -e ".[peers-torchft]"     # or a venv of its own: python -m venv V && V/bin/pip install torch==2.13.0 torchft
    PYTHONPATH=. V/bin/python benchmarks/peers_torchft.py --steps 900 --period 10

Two replica groups of one process each (torchft's unit of fault tolerance), a
``LighthouseServer(min_replicas=2)`` in this process, each replica a ``Manager`` over
``ProcessGroupGloo`` with its own ``TCPStore``, as torchft's own integration tests set them
up; the model averaged by ``LocalSGD(manager, model, optimizer, sync_every=P)``.

The Manager is built as torchft's LocalSGD integration test and its ``train_diloco.py`` build
it: ``use_async_quorum=False`` (its ``DiLoCo`` refuses anything else), and ``init_sync=False``
because both replicas build the same model from the same seed (its docstring advises turning
it off when every replica initialises its weights from the same seed).
With the defaults (``--async-quorum --init-sync``: the configuration this script ran before)
the first sync halves the model: at step 0 the quorum makes the non-primary replica heal
from the primary, an asynchronous quorum counts a healing replica as not participating, so
it all-reduces zeros, and the sum is still divided by the 2 replicas at the max step; both
replicas then copy w_primary / 2 into their parameters. ``--trace`` prints, per sync, each
replica's model norm before and after, the participants and the committed steps (the trace
and both configurations' accuracies: ``benchmarks/results/peers_torchft.txt``). The job:
LeNet-5, FashionMNIST split over the 2 replicas by ``fdahpc.data.partition``, SGD lr 0.05,
batch 32 from fdahpc's ``BatchStream`` (the batches fdahpc's ranks draw). Prints seconds per
step (the loop, scoring apart), syncs (the manager's committed steps), bytes all-reduced per
replica (4·d per sync) and the accuracy of the mean of the two final models.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from datetime import timedelta

import _common  # noqa: F401  (makes fdahpc importable from a plain checkout)

BATCH, LR, SEED = 32, 0.05, 0


def norm(model) -> float:
    import torch

    return float(torch.nn.utils.parameters_to_vector(model.parameters()).detach().norm())


def replica(replica_id: int, lighthouse: str, args, out: "mp.Queue") -> None:
    import torch
    import torch.distributed as dist
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import LocalSGD

    from fdahpc.data import load_dataset, partition
    from fdahpc.models import build_model
    from fdahpc.worker import BatchStream

    torch.set_num_threads(1)
    data = load_dataset("fashion-mnist", seed=SEED,
                        train_indices=lambda labels: partition(labels, 2, args.partition, SEED)[replica_id])
    torch.manual_seed(SEED)
    model = build_model("lenet5", 1, 28, 10)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    store = dist.TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
    manager = Manager(pg=ProcessGroupGloo(), min_replica_size=2, load_state_dict=model.load_state_dict,
                      state_dict=model.state_dict, replica_id=str(replica_id), store_addr="localhost",
                      store_port=store.port, rank=0, world_size=1, lighthouse_addr=lighthouse,
                      timeout=timedelta(seconds=120), use_async_quorum=args.async_quorum, init_sync=args.init_sync)
    batches = BatchStream(data.x_train, data.y_train, BATCH, SEED, replica_id)
    trace, before = [], [0.0]
    if args.trace:
        # registered before LocalSGD's own hook, so it runs first: the norm before the sync
        opt.register_step_post_hook(lambda *_: before.__setitem__(0, norm(model)))
        trace.append(f"replica {replica_id} start norm {norm(model):.6f}")
    t0 = time.perf_counter()
    with LocalSGD(manager, model, opt, sync_every=args.period):
        for step in range(1, args.steps + 1):
            xb, yb = batches.next()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            if args.trace and step % args.period == 0:
                trace.append(f"replica {replica_id} step {step}: norm {before[0]:.4f} -> {norm(model):.4f}, "
                             f"participants {manager.num_participants()}, participating {manager.is_participating()}, "
                             f"committed steps {manager.current_step()}")
    seconds = time.perf_counter() - t0
    for line in trace:
        print(line, file=sys.stderr, flush=True)
    out.put(dict(replica=replica_id, seconds=seconds, syncs=manager.current_step(),
                 flat=torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy(),
                 d=sum(p.numel() for p in model.parameters())))
    manager.shutdown(wait=False)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=900)
    p.add_argument("--period", type=int, default=10)
    p.add_argument("--partition", default="iid")
    p.add_argument("--async-quorum", action="store_true",
                   help="Manager(use_async_quorum=True), torchft's default (its LocalSGD test and DiLoCo use False)")
    p.add_argument("--init-sync", action="store_true",
                   help="Manager(init_sync=True), torchft's default: the first quorum heals replica 1 from replica 0 "
                        "(False here: both build the model from the same seed)")
    p.add_argument("--trace", action="store_true", help="per sync: each replica's model norm before and after, "
                                                         "participants, committed steps (on stderr)")
    args = p.parse_args(argv)
    if min(args.steps, args.period) < 1:
        p.exit(2, "peers_torchft.py: --steps and --period must be >= 1, e.g. --steps 900 --period 10\n")
    try:
        import torch
        import torchft
        from torchft._torchft import LighthouseServer
    except ImportError as exc:
        print(f"peers_torchft.py: torchft is missing ({exc}); install it in a venv of its own: python -m venv V && "
              "V/bin/pip install torch==2.13.0 torchft", file=sys.stderr)
        return 2
    from importlib.metadata import version

    from fdahpc.data import load_dataset
    from fdahpc.evaluate import score
    from fdahpc.models import build_model

    print(f"# torch {torch.__version__}, torchft {version('torchft')}, gloo; 2 replica groups of 1 process, "
          f"LighthouseServer(min_replicas=2), Manager(min_replica_size=2, use_async_quorum={args.async_quorum}, "
          f"init_sync={args.init_sync}), LocalSGD(sync_every={args.period}); LeNet-5, FashionMNIST {args.partition}, "
          f"SGD lr {LR}, batch {BATCH}, {args.steps} steps", flush=True)
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=replica, args=(i, lighthouse.address(), args, out)) for i in range(2)]
    for proc in procs:
        proc.start()
    results = sorted((out.get(timeout=3600) for _ in procs), key=lambda r: r["replica"])
    for proc in procs:
        proc.join(60)
    lighthouse.shutdown()
    data = load_dataset("fashion-mnist", seed=SEED, train_indices=lambda labels: labels[:0])
    torch.manual_seed(SEED)
    model = build_model("lenet5", 1, 28, 10)
    torch.nn.utils.vector_to_parameters(torch.from_numpy((results[0]["flat"] + results[1]["flat"]) / 2),
                                        model.parameters())
    acc = score(model, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)).accuracy
    seconds = max(r["seconds"] for r in results)
    syncs = results[0]["syncs"]
    print(json.dumps(dict(way="torchft LocalSGD", ms_per_step=round(1000 * seconds / args.steps, 2), syncs=syncs,
                          mib_allreduced_per_replica=round(4 * results[0]["d"] * syncs / 2**20, 2),
                          final_accuracy=round(acc, 4))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
