"""``python -m fdahpc.train``: one model replica per MPI rank, one readable loop.

    mpirun -n 4 python -m fdahpc.train                  # SketchFDA, LeNet-5, MNIST-5k
    mpirun -n 4 python -m fdahpc.train --strategy fedavg --local-epochs 1

Setup errors (bad flags, missing data, an unwritable ``--out``) are agreed on by all
ranks and reported as one line with exit code 2; an exception during training on any
rank prints its traceback and aborts the whole job, so no rank waits forever.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass

__all__ = ["main", "train"]

log = logging.getLogger("fdahpc")
_SETUP_ERRORS = (ValueError, FileNotFoundError, PermissionError, NotADirectoryError)


def _limit_threads(n: int) -> None:
    """One thread per rank by default: ranks already fill the cores, and idle OpenMP
    threads spinning beside other ranks' work cost more than they give."""
    import numba
    import torch

    torch.set_num_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


@dataclass
class Setup:
    """Everything ``train`` needs, built identically on every rank."""

    cfg: object
    comm: object
    model: object
    flat: object
    optimizer: object
    strategy: object
    evaluator: object
    batches: object
    steps_per_epoch: int
    total_steps: int
    out: str


class BatchStream:
    """Endless minibatches of this rank's partition, reshuffled every local pass.

    Batches always have ``batch_size`` samples (a pass that runs out is continued from the
    next permutation), so every rank takes the same number of steps per epoch whatever the
    size of its partition.
    """

    def __init__(self, x, y, batch_size: int, seed: int, rank: int) -> None:
        import torch

        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)
        self.batch_size = batch_size
        self.gen = torch.Generator().manual_seed(seed * 100_003 + rank)
        self.order = torch.empty(0, dtype=torch.long)

    def next(self):
        import torch

        while len(self.order) < self.batch_size:
            self.order = torch.cat([self.order, torch.randperm(len(self.y), generator=self.gen)])
        idx, self.order = self.order[: self.batch_size], self.order[self.batch_size :]
        return self.x[idx], self.y[idx]


def make_optimizer(name: str, lr: float, params, weight_decay: float):
    import torch

    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=weight_decay)


def build(cfg, comm) -> Setup:
    """Data, model, optimizer, strategy and evaluator for this rank (no file written).

    Purely local after the first broadcast: a rank that fails here must not leave the
    others inside a collective, so the ranks agree on success before training starts.
    """
    import torch

    from .data import load_dataset, partition
    from .evaluate import Evaluator
    from .metrics import check_writable
    from .models import build_model
    from .params import FlatParams
    from .strategies import build_strategy, local_optimizer

    out = cfg.out or os.path.join("runs", f"{cfg.strategy}-{time.strftime('%Y%m%d-%H%M%S')}.h5")
    out = comm.bcast_obj(out)  # one timestamp for the whole job
    if comm.is_root:
        check_writable(out)
    n_total = {}

    def my_indices(labels):
        n_total["train"] = len(labels)
        return partition(labels, comm.world_size, cfg.partition, cfg.seed)[comm.rank]

    data = load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed, train_indices=my_indices)
    if len(data.y_train) == 0:
        raise ValueError(f"--partition {cfg.partition}: rank {comm.rank} got no training samples; use fewer ranks or another partition")
    # An epoch is one pass over the mean partition, identical on every rank.
    steps_per_epoch = max(1, math.ceil(n_total["train"] / comm.world_size / cfg.batch_size))
    total_steps = math.ceil(cfg.epochs * steps_per_epoch)
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)

    def new_model():
        torch.manual_seed(cfg.seed)
        return build_model(cfg.model, data.x_train.shape[1], data.x_train.shape[2], data.num_classes)

    model = new_model()
    flat = FlatParams(model)
    optimizer = make_optimizer(*local_optimizer(cfg), model.parameters(), cfg.weight_decay)
    evaluator = Evaluator(comm, new_model(), data.x_test, data.y_test)
    batches = BatchStream(data.x_train, data.y_train, cfg.batch_size, cfg.seed, comm.rank)
    strategy = build_strategy(cfg, comm, flat.w, steps_per_epoch, num_samples=len(data.y_train))
    return Setup(cfg, comm, model, flat, optimizer, strategy, evaluator, batches, steps_per_epoch, total_steps, out)


def train(s: Setup) -> dict:
    """The loop: local step → strategy (maybe sync) → evaluate on schedule → record."""
    import torch

    from .metrics import open_run_file

    cfg, comm, strategy = s.cfg, s.comm, s.strategy
    # The same initial model everywhere, whatever the platform's RNG does.
    comm.bcast_(s.flat.w, "control")
    strategy.reset()
    attrs = dict(
        strategy=cfg.strategy, model=cfg.model, dataset=cfg.dataset, partition=cfg.partition,
        world_size=comm.world_size, workers=comm.world_size, params=s.flat.dim,
        target_accuracy=cfg.target_accuracy or -1.0, steps_per_epoch=s.steps_per_epoch,
        state_bytes=strategy.trigger.state_bytes, config=cfg.to_json(),
    )
    run = open_run_file(s.out, comm.is_root, attrs)
    loss_fn = torch.nn.CrossEntropyLoss()

    def sent(purpose: str) -> int:
        return comm.bytes_sent[purpose] - bytes_before[purpose]

    result = dict(steps_to_target=-1, comm_bytes_to_target=-1, final_accuracy=float("nan"), final_loss=float("nan"))
    start = time.perf_counter()
    running_loss, last_eval, eval_seconds = 0.0, 0, 0.0
    bytes_before = dict(comm.bytes_sent)  # the communicator may have served earlier runs
    s.model.train()
    try:
        for step in range(1, s.total_steps + 1):
            if strategy.participating:  # a worker left out of this round keeps the global model
                xb, yb = s.batches.next()
                s.optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(s.model(xb), yb)
                loss.backward()
                s.optimizer.step()
                running_loss += loss.item()
            if strategy.after_step():
                run.append("sync/step", step)
            for name, value in strategy.records():
                run.append(name, value)
            if comm.is_root and step % cfg.log_every == 0:
                log.info("step %d  epoch %.2f  loss %.4f  syncs %d  comm %.4f GB",
                         step, step / s.steps_per_epoch, running_loss / cfg.log_every, strategy.syncs, strategy.comm_bytes() / 1e9)
                running_loss = 0.0
            due = step % s.steps_per_epoch == 0 or (cfg.eval_every and step % cfg.eval_every == 0) or step == s.total_steps
            if not due:
                continue
            t_eval = time.perf_counter()
            acc, test_loss = s.evaluator.evaluate(s.flat.w, s.model)
            eval_seconds += time.perf_counter() - t_eval
            last_eval = step
            s.model.train()
            run.append("eval/step", step)
            run.append("eval/accuracy", acc)
            run.append("eval/loss", test_loss)
            run.append("eval/comm_bytes", strategy.comm_bytes())
            run.append("eval/wall_seconds", time.perf_counter() - start)
            run.flush()
            result.update(final_accuracy=acc, final_loss=test_loss)
            if comm.is_root:
                log.info("eval  step %d  epoch %.2f  accuracy %.4f  loss %.4f  syncs %d  comm %.4f GB",
                         step, step / s.steps_per_epoch, acc, test_loss, strategy.syncs, strategy.comm_bytes() / 1e9)
            if cfg.target_accuracy is not None and acc >= cfg.target_accuracy:
                result.update(steps_to_target=step, comm_bytes_to_target=strategy.comm_bytes())
                break
        result.update(
            steps=strategy.steps, syncs=strategy.syncs, comm_bytes=strategy.comm_bytes(),
            comm_bytes_rank0=sent("sync") + sent("monitor"),
            comm_bytes_monitor_rank0=sent("monitor"), comm_bytes_eval_rank0=sent("eval"),
            wall_seconds=time.perf_counter() - start, eval_seconds=eval_seconds, last_eval_step=last_eval,
        )
        run.set_attrs(**result)
    finally:
        run.close()
    if comm.is_root:
        log.info("done: %d steps, %d syncs, %.4f GB training communication, final accuracy %.4f, %.1f s -> %s",
                 result["steps"], result["syncs"], result["comm_bytes"] / 1e9, result["final_accuracy"], result["wall_seconds"], s.out)
    return result


def _compile_once(cfg, comm) -> None:
    """Rank 0 compiles the Numba sketch kernels (or loads them from the cache) while the
    others wait, so that 44 ranks do not all compile and race on the cache at once."""
    from .strategies import uses_sketch

    if not uses_sketch(cfg):
        return
    if comm.is_root:
        from .sketch import compile_kernels

        compile_kernels()
    comm.barrier()


def _fail_setup(comm, errors: list) -> int:
    first = next(e for e in errors if e is not None)
    if comm is None or comm.is_root:
        print(f"fdahpc.train: error: {first}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    from .comm import make_communicator
    from .config import parse_args

    try:
        cfg = parse_args(argv)
    except _SETUP_ERRORS as exc:
        # Every rank parsed the same flags and failed the same way; let only rank 0 say so.
        try:
            comm = make_communicator("auto")
        except Exception:
            comm = None
        return _fail_setup(comm, [str(exc)])
    _limit_threads(cfg.threads)
    comm = make_communicator(cfg.backend)
    logging.basicConfig(level=logging.INFO if comm.is_root else logging.WARNING, format="%(message)s", stream=sys.stdout)
    try:
        _compile_once(cfg, comm)
        try:
            setup, error = build(cfg, comm), None
        except _SETUP_ERRORS as exc:
            setup, error = None, str(exc)
        errors = comm.allgather_obj(error)  # all ranks agree before anyone trains
        if any(e is not None for e in errors):
            return _fail_setup(comm, errors)
        train(setup)
    except BaseException:
        if comm.world_size == 1:
            raise
        print(f"[rank {comm.rank}] fdahpc.train failed; aborting the job\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        comm.abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
