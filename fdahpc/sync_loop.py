"""The synchronous (SPMD) mode: every rank is a worker and all ranks step in lockstep.

One loop: a local step → the strategy (maybe sync) → evaluation on schedule → the run file.
``fdahpc.train`` parses the flags, builds the communicator and dispatches here for
``--mode sync`` (the default).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass

__all__ = ["Setup", "build", "train"]

log = logging.getLogger("fdahpc")


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
    from .worker import BatchStream, make_optimizer

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
    from .metrics import open_run_file
    from .worker import local_steps

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
                running_loss += local_steps(s.model, s.batches, 1, s.optimizer.step, s.optimizer.zero_grad)
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
        run.write_array("final/model", s.flat.w.numpy())
    finally:
        run.close()
    if comm.is_root:
        log.info("done: %d steps, %d syncs, %.4f GB training communication, final accuracy %.4f, %.1f s -> %s",
                 result["steps"], result["syncs"], result["comm_bytes"] / 1e9, result["final_accuracy"], result["wall_seconds"], s.out)
    return result
