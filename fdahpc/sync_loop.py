"""The synchronous (SPMD) mode: every rank is a worker and all ranks step in lockstep.

One loop: a local step → the strategy (maybe sync) → evaluation on schedule → the run file.
``fdahpc.train`` parses the flags, builds the communicator and dispatches here for
``--mode sync`` (the default).
"""

from __future__ import annotations

import json
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
    resumed: object = None  # checkpoint.Resumed when continuing a checkpoint


def build(cfg, comm) -> Setup:
    """Data, model, optimizer, strategy and evaluator for this rank (no file written).

    Purely local after the first broadcast: a rank that fails here must not leave the
    others inside a collective, so the ranks agree on success before training starts.
    """
    import torch

    from . import checkpoint
    from .data import load_dataset, partition
    from .evaluate import Evaluator
    from .models import build_model
    from .params import FlatParams
    from .strategies import build_strategy, local_optimizer
    from .worker import BatchStream, make_optimizer

    found, out = checkpoint.prepare(cfg, comm, cfg.strategy)
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

    model = new_model().to(comm.device)  # initialized on the CPU: the same model on any device
    flat = FlatParams(model)
    optimizer = make_optimizer(*local_optimizer(cfg), model.parameters(), cfg.weight_decay)
    evaluator = Evaluator(comm, new_model().to(comm.device), data.x_test, data.y_test)
    batches = BatchStream(data.x_train, data.y_train, cfg.batch_size, cfg.seed, comm.rank, device=comm.device)
    strategy = build_strategy(cfg, comm, flat.w, steps_per_epoch, num_samples=len(data.y_train))
    resumed = checkpoint.open_for_resume(cfg, found, comm.rank, comm.world_size, flat.dim) if found else None
    return Setup(cfg, comm, model, flat, optimizer, strategy, evaluator, batches, steps_per_epoch, total_steps, out, resumed)


@dataclass
class Progress:
    """The loop's own bookkeeping, saved in checkpoints beside the model and strategy."""

    step: int = 0
    running_loss: float = 0.0
    last_eval: int = 0
    eval_seconds: float = 0.0
    wall_seconds: float = 0.0  # before this process started (earlier segments of a resumed run)
    bytes_before: dict | None = None  # counters when training started
    result: dict | None = None


def rank_state(s: Setup, progress: Progress) -> dict:
    """Everything this rank needs to continue bit for bit (see :mod:`fdahpc.checkpoint`)."""
    import torch

    return {
        "w": s.flat.w.clone(),
        "buffers": {name: b.clone() for name, b in s.model.named_buffers()},
        "optimizer": s.optimizer.state_dict(),
        "strategy": s.strategy.state_dict(),
        "batches": s.batches.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "comm": s.comm.state_dict(),
        "progress": dict(progress.__dict__),
    }


def load_rank_state(s: Setup, state: dict) -> Progress:
    import torch

    s.flat.w.copy_(state["w"])
    buffers = dict(s.model.named_buffers())
    for name, value in state["buffers"].items():
        buffers[name].copy_(value)
    s.optimizer.load_state_dict(state["optimizer"])
    s.strategy.load_state_dict(state["strategy"])
    s.batches.load_state_dict(state["batches"])
    torch.set_rng_state(state["torch_rng"])
    s.comm.load_state_dict(state["comm"])
    return Progress(**state["progress"])


def train(s: Setup, stop=None) -> dict:
    """The loop: local step → strategy (maybe sync) → evaluate on schedule → record.

    Every ``--stop-check-every`` steps the ranks agree on signals and divergence
    (:mod:`fdahpc.control`); checkpoints are written every ``--checkpoint-every`` steps,
    when a signal stops the run, and at its end.
    """
    import torch

    from . import checkpoint, faults, provenance
    from .control import Diverged, agree, stopped
    from .metrics import open_run_file
    from .worker import local_steps

    cfg, comm, strategy = s.cfg, s.comm, s.strategy
    attrs = dict(
        strategy=cfg.strategy, model=cfg.model, dataset=cfg.dataset, partition=cfg.partition,
        world_size=comm.world_size, params=s.flat.dim,
        target_accuracy=cfg.target_accuracy or -1.0, steps_per_epoch=s.steps_per_epoch,
        state_bytes=strategy.trigger.state_bytes, config=cfg.to_json(),
    )
    if s.resumed is None:
        # The same initial model everywhere, whatever the platform's RNG does.
        comm.bcast_(s.flat.w, "control")
        strategy.reset()
        progress = Progress(bytes_before=dict(comm.bytes_sent),  # the communicator may have served earlier runs
                            result=dict(steps_to_target=-1, comm_bytes_to_target=-1,
                                        final_accuracy=float("nan"), final_loss=float("nan")))
    else:
        progress = load_rank_state(s, s.resumed.state)
        if comm.is_root:
            log.info("resumed from %s at step %d", s.resumed.folder, progress.step)
    segments = provenance.start(comm, s.resumed)
    run = open_run_file(s.out, comm.is_root, dict(attrs, provenance=json.dumps(segments)), s.resumed)
    strategy.sink = run.append  # sync/step, fda/*, round/* series
    result = progress.result
    nan_step = faults.nan_at(comm.rank)
    identity = checkpoint.identity(cfg, comm.world_size, s.flat.dim)

    def sent(purpose: str) -> int:
        return comm.bytes_sent[purpose] - progress.bytes_before[purpose]

    def evaluate(step: int) -> float:
        t_eval = time.perf_counter()
        acc, test_loss = s.evaluator.evaluate(s.flat.w, s.model)
        progress.eval_seconds += time.perf_counter() - t_eval
        progress.last_eval = step
        s.model.train()
        for name, value in (("eval/step", step), ("eval/accuracy", acc), ("eval/loss", test_loss),
                            ("eval/comm_bytes", strategy.comm_bytes()), ("eval/wall_seconds", elapsed())):
            run.append(name, value)
        run.flush()
        result.update(final_accuracy=acc, final_loss=test_loss)
        if comm.is_root:
            log.info("eval  step %d  epoch %.2f  accuracy %.4f  loss %.4f  syncs %d  comm %.4f GB",
                     step, step / s.steps_per_epoch, acc, test_loss, strategy.syncs, strategy.comm_bytes() / 1e9)
        return acc

    def save_checkpoint(step: int) -> str | None:
        """Collective; None (and a warning) when a rank could not write, e.g. a full disk."""
        run.flush()
        progress.wall_seconds = elapsed()
        return checkpoint.save_or_warn(comm, cfg.checkpoint_dir, step, rank_state(s, progress),
                                       dict(identity, provenance=segments, run_file=os.path.abspath(s.out),
                                            run_rows=run.rows()))

    started = time.perf_counter()
    wall_before = progress.wall_seconds

    def elapsed() -> float:
        return wall_before + time.perf_counter() - started

    status, exit_code, stopped_by, diverged_at, folder = "failed", 0, None, None, None
    s.model.train()
    try:
        for step in range(progress.step + 1, s.total_steps + 1):
            if strategy.participating:  # a worker left out of this round keeps the global model
                loss = local_steps(s.model, s.batches, 1, s.optimizer.step, s.optimizer.zero_grad, cfg.clip_grad_norm)
                progress.running_loss += loss
                if step == nan_step:
                    faults.poison(s.model)
                if not math.isfinite(loss) and diverged_at is None:
                    diverged_at = step
            strategy.after_step()  # records its own series through strategy.sink
            if comm.is_root and step % cfg.log_every == 0:
                log.info("step %d  epoch %.2f  loss %.4f  syncs %d  comm %.4f GB",
                         step, step / s.steps_per_epoch, progress.running_loss / cfg.log_every, strategy.syncs, strategy.comm_bytes() / 1e9)
                progress.running_loss = 0.0
            progress.step = step
            last = step == s.total_steps
            verdict = None
            if step % cfg.stop_check_every == 0 or last:
                if diverged_at is None and not bool(torch.isfinite(s.flat.w).all()):
                    diverged_at = step
                verdict = agree(comm, stop is not None and stop.requested, diverged_at)
                if verdict.diverged_rank is not None:
                    status = "diverged"
                    raise Diverged(f"diverged: NaN or Inf on rank {verdict.diverged_rank} at step {verdict.diverged_step} "
                                   f"(strategy {cfg.strategy}); run file {s.out} flushed up to step {progress.last_eval}; "
                                   "lower --lr or resume from an earlier checkpoint")
            scheduled = step % s.steps_per_epoch == 0 or (cfg.eval_every and step % cfg.eval_every == 0)
            acc = evaluate(step) if scheduled else None
            if verdict is not None and verdict.stop:
                stopped_by = (stop.signal_name if stop is not None and stop.requested else None) or "a signal on another rank"
                break
            saved = bool((cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or (last and cfg.checkpoint_dir))
            if saved:
                folder = save_checkpoint(step)
            if last and not scheduled:
                acc = evaluate(step)  # the run's end, after its checkpoint: a longer resumed run does not repeat it
            if cfg.target_accuracy is not None and acc is not None and acc >= cfg.target_accuracy:
                result.update(steps_to_target=step, comm_bytes_to_target=strategy.comm_bytes())
                if cfg.checkpoint_dir and not saved:
                    folder = save_checkpoint(step)
                break
        strategy.finish()
        if stopped_by is not None and cfg.checkpoint_dir:
            folder = save_checkpoint(progress.step)
        if stopped_by is not None:
            status = "stopped"
            line, exit_code = stopped(stopped_by, "step", progress.step, folder, cfg.checkpoint_dir)
            if comm.is_root:
                log.info(line)
        else:
            status = "finished"
        result.update(
            steps=strategy.steps, syncs=strategy.syncs, comm_bytes=strategy.comm_bytes(),
            comm_bytes_rank0=sent("sync") + sent("monitor"),
            comm_bytes_monitor_rank0=sent("monitor"), comm_bytes_eval_rank0=sent("eval"),
            wall_seconds=elapsed(), eval_seconds=progress.eval_seconds, last_eval_step=progress.last_eval,
            stopped_at=progress.step if stopped_by else -1,
        )
        run.set_attrs(**result)
        run.write_array("final/model", s.flat.w.cpu().numpy())
    finally:
        run.close(status)
    if comm.is_root and status == "finished":
        log.info("done: %d steps, %d syncs, %.4f GB training communication, final accuracy %.4f, %.1f s -> %s",
                 result["steps"], result["syncs"], result["comm_bytes"] / 1e9, result["final_accuracy"], result["wall_seconds"], s.out)
    return dict(result, exit_code=exit_code)
