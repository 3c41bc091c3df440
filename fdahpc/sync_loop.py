"""The synchronous (SPMD) mode: every rank is a worker and all ranks step in lockstep.

One loop: a local step → the strategy (maybe sync) → evaluation on schedule → the run file.
The skeleton of :mod:`fdahpc.run` sets the run up and tears it down; this module supplies
the mode's options, its job (:class:`SyncJob`) and its loop.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch

from . import faults
from .control import Diverged, agree
from .data import partition
from .decide import reached, step_plan
from .evaluate import Evaluator
from .lr_schedule import LRSchedule
from .options import LRScheduleOptions, SamplingOptions, SketchShape, WarmupOptions, option_names
from .params import FlatParams
from .renamed import current_purposes
from .run import Job, Mode, Outcome, Plan, load_data, new_model
from .strategies import (PRESETS, RULES, STRATEGIES, TRIGGERS, StrategyOptions, build_strategy, local_optimizer,
                         strategy_options, trigger_of)
from .worker import BatchStream, local_steps, make_optimizer

__all__ = ["MODE", "SyncMode", "SyncJob"]

log = logging.getLogger("fdahpc")

#: Training length in epochs of the mean partition, and steps between the ranks' agreement
#: on signals and divergence, when not given.
DEFAULT_EPOCHS, DEFAULT_STOP_CHECK_EVERY = 5.0, 10


def _theta_driven(strategy: str, trigger: str | None) -> bool:
    """Whether the run's trigger compares an estimate with Θ (then Θ names the run)."""
    if strategy not in PRESETS or (trigger is not None and trigger not in TRIGGERS):
        return False  # a run file from another version: no label is better than a wrong one
    return trigger_of(strategy, trigger).theta_driven


class SyncMode(Mode):
    name = "sync"
    noun = "a synchronous strategy"
    options = ("trigger", "max_steps", "epochs", "stop_check_every")

    def strategies(self) -> tuple[str, ...]:
        return STRATEGIES

    def defaults(self, cfg) -> dict:
        preset = PRESETS.get(cfg.strategy or "sketchfda")  # an unknown name is refused by the checks
        return {"strategy": "sketchfda", **({"lr_schedule": preset.lr_schedule} if preset else {})}

    def reads(self, cfg, options: StrategyOptions) -> set[str]:
        """The mode's options and those of the strategy's parts: its trigger's, its rule's, the
        warm-up, client sampling (round-based triggers) and the sketch's shape (when it sketches)."""
        o = options
        parts = [type(o.trigger_options), type(o.rule_options), WarmupOptions, LRScheduleOptions]
        parts += [SamplingOptions] if o.trigger.round_based else []
        parts += [SketchShape] if o.uses_sketch else []
        return set(self.options) | {name for cls in parts for name in option_names(cls)}

    def readers(self, name: str) -> list[str]:
        every_run = option_names(WarmupOptions) + option_names(LRScheduleOptions)
        out = super().readers(name) + ([f"--mode {self.name}"] if name in every_run else [])
        triggers = [t for t, cls in TRIGGERS.items() if name in option_names(cls.Options)]
        strategies = [s for s, p in PRESETS.items() if p.trigger in triggers or name in option_names(RULES[p.rule].Options)]
        out += [f"--strategy {', '.join(strategies)}"] if strategies else []
        out += [f"--trigger {', '.join(triggers)}"] if triggers else []
        if name in option_names(SamplingOptions):
            out.append("round-based triggers (--trigger every, periodic)")
        if name in option_names(SketchShape):
            out.append("sketchfda and --fedadp-angles sketch")
        return out

    def who(self, cfg) -> str:
        return f"--strategy {cfg.strategy}" + (f" --trigger {cfg.trigger}" if cfg.trigger else "")

    def layout(self, config: dict, world_size: int | None) -> dict:
        strategy = str(config.get("strategy"))
        label = [strategy] + ([f"workers={world_size}"] if world_size is not None else [])  # K in the FDA paper
        # Θ names a run only when its trigger compares an estimate with Θ (every older config
        # carries a default Θ, which on a FedAvg line would suggest it mattered); τ when given.
        if _theta_driven(strategy, config.get("trigger")) and config.get("theta") is not None:
            theta = config["theta"]
            label.append(f"θ={theta:g}" if isinstance(theta, (int, float)) else f"θ={theta}")
        if config.get("tau") is not None:
            label.append(f"τ={config['tau']}")
        if config.get("partition") not in (None, ""):
            label.append(str(config["partition"]))
        return dict(x="eval/step", accuracy="eval/accuracy", loss="eval/loss",
                    panels=[["eval/comm_bytes", "training communication (GB)", 1e9], ["eval/step", "local steps", 1]],
                    events="sync/step", bytes=["eval/comm_bytes", "cumulative"],
                    workers="?" if world_size is None else str(world_size), label=" ".join(label), convergence=False)

    def check(self, cfg) -> StrategyOptions:
        super().check(cfg)
        options = strategy_options(cfg.strategy, cfg.trigger, cfg)  # the trigger's and the rule's, checked
        if cfg.weighting != "uniform" and cfg.strategy == "fedadp":
            raise ValueError("--weighting samples: FedAdp's weights already include the sample counts; drop --weighting")
        lr = options.lr
        if options.trigger.reads_lr and not lr.decays:
            flag = (f"--trigger {cfg.trigger}" if cfg.trigger else f"--lr-floor {lr.lr_floor}" if lr.lr_floor == 1
                    else f"--lr-schedule {lr.lr_schedule}")
            raise ValueError(f"{flag}: {options.trigger.name} lengthens its rounds as the learning rate decays; give "
                             "--lr-schedule cosine (or linear) with --lr-floor below 1")
        return options

    def prepare(self, plan: Plan, comm) -> None:
        """Rank 0 compiles the Numba sketch kernels (or loads them from the cache) while the
        others wait, so that 44 ranks do not all compile and race on the cache at once."""
        if not plan.options.uses_sketch:
            return
        if comm.is_root:
            from .sketch import compile_kernels  # Numba: imported only by runs that sketch (start-up)

            compile_kernels()
        comm.barrier()

    def build(self, plan: Plan, comm) -> "SyncJob":
        """Data, model, optimizer, strategy and evaluator for this rank (no file written)."""
        cfg = plan.cfg
        n_total = {}

        def my_indices(labels):
            n_total["train"] = len(labels)
            return partition(labels, comm.world_size, cfg.partition, cfg.seed)[comm.rank]

        data = load_data(cfg, my_indices)
        if len(data.y_train) == 0:
            raise ValueError(f"--partition {cfg.partition}: rank {comm.rank} got no training samples; use fewer ranks or another partition")
        # An epoch is one pass over the mean partition, identical on every rank.
        steps_per_epoch = max(1, math.ceil(n_total["train"] / comm.world_size / cfg.batch_size))
        if cfg.drop_last:  # --drop-last: an epoch is the full batches of the mean partition
            steps_per_epoch = max(1, int(n_total["train"] // comm.world_size) // cfg.batch_size)
        total_steps = math.ceil(cfg.epochs * steps_per_epoch)
        if cfg.max_steps is not None:
            total_steps = min(total_steps, cfg.max_steps)
        if cfg.warmup_steps > total_steps:
            raise ValueError(f"--warmup-steps {cfg.warmup_steps}: beyond the run's {total_steps} steps; give at most "
                             f"{total_steps} or lengthen the run (--epochs, --max-steps)")
        schedule = plan.options.lr.schedule(total_steps)  # refuses a warm-up longer than the run
        model = new_model(cfg, data).to(comm.device)  # initialized on the CPU: the same model on any device
        flat = FlatParams(model)
        optimizer_name, peak = local_optimizer(cfg)
        optimizer = make_optimizer(optimizer_name, peak, model.parameters(), cfg.weight_decay)
        evaluator = Evaluator(comm, new_model(cfg, data).to(comm.device), data.x_test, data.y_test)
        if cfg.drop_last and len(data.y_train) < cfg.batch_size:  # lockstep: every rank must step
            raise ValueError(f"--drop-last: rank {comm.rank} holds {len(data.y_train)} training samples, less than one "
                             f"batch of {cfg.batch_size}; lower --batch-size, use fewer ranks or drop --drop-last")
        batches = BatchStream(data.x_train, data.y_train, cfg.batch_size, cfg.seed, comm.rank, device=comm.device,
                              drop_last=cfg.drop_last)
        strategy = build_strategy(plan.options, comm, flat.w, steps_per_epoch, num_samples=len(data.y_train),
                                  seed=cfg.seed, lr_at=lambda step: schedule.rate_at(peak, step),
                                  lr_warmup_steps=schedule.warmup_steps, optimizer=optimizer_name)
        return SyncJob(cfg, comm, model, flat, optimizer, strategy, evaluator, batches, steps_per_epoch, total_steps,
                       schedule, peak)


MODE = SyncMode()

#: What ``eval/accuracy`` scores and what the run ends on, said in its run file.
EVALUATED_MODEL = ("held: the rule applied to a synchronization forced at the evaluated step (eval/held_bytes: its "
                   "cost, 0 when the step synchronized); the run ends with that synchronization (result final_sync)")


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
    lr_horizon: int | None = None  # the steps the learning-rate schedule spans (None: older checkpoints)


@dataclass
class SyncJob(Job):
    """One worker: everything the loop needs, built identically on every rank."""

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
    schedule: LRSchedule
    peak_lr: float
    progress: Progress | None = None

    @property
    def attrs(self) -> dict:
        return dict(steps_per_epoch=self.steps_per_epoch, state_bytes=self.strategy.trigger.state_bytes,
                    evaluated_model=EVALUATED_MODEL)

    @property
    def position(self) -> int:
        return self.progress.step

    def fresh(self) -> None:
        # The same initial model everywhere, whatever the platform's RNG does.
        self.comm.bcast_(self.flat.w, "control")
        self.strategy.reset()
        # the communicator may have served earlier runs: its counters now are this run's zero
        self.progress = Progress(lr_horizon=self.total_steps, bytes_before=dict(self.comm.bytes_sent),
                                 result=dict(steps_to_target=-1, comm_bytes_to_target=-1,
                                             final_accuracy=float("nan"), final_loss=float("nan"), final_sync=0))

    def state_dict(self) -> dict:
        """Everything this rank needs to continue bit for bit (see :mod:`fdahpc.checkpoint`)."""
        return {
            "w": self.flat.w.clone(),
            "buffers": {name: b.clone() for name, b in self.model.named_buffers()},
            "optimizer": self.optimizer.state_dict(),
            "strategy": self.strategy.state_dict(),
            "batches": self.batches.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "comm": self.comm.state_dict(),
            "progress": dict(self.progress.__dict__),
        }

    def load_state_dict(self, state: dict) -> None:
        self.flat.w.copy_(state["w"])
        buffers = dict(self.model.named_buffers())
        for name, value in state["buffers"].items():
            buffers[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.strategy.load_state_dict(state["strategy"])
        self.batches.load_state_dict(state["batches"])
        torch.set_rng_state(state["torch_rng"])
        self.comm.load_state_dict(state["comm"])
        self.progress = Progress(**state["progress"])
        self.progress.bytes_before = current_purposes(self.progress.bytes_before)  # older checkpoints: "sync"

    def check_resume(self, state: dict) -> None:
        """A decaying learning rate spans the run's steps: a resume must keep them."""
        saved = state["progress"].get("lr_horizon")
        if self.schedule.decays and saved not in (None, self.total_steps):
            raise ValueError(f"--lr-schedule {self.schedule.kind}: the checkpoint's rate decays over {saved} steps, "
                             f"this run has {self.total_steps}; resume with the same --epochs/--max-steps (the run may "
                             "stop earlier at a --target-*)")

    def final_model(self):
        return self.flat.w.cpu().numpy()

    def summary(self, result: dict, out: str) -> str:
        return (f"done: {result['steps']} steps, {result['syncs']} syncs, {result['comm_bytes'] / 1e9:.4f} GB training "
                f"communication, final accuracy {result['final_accuracy']:.4f}, {result['wall_seconds']:.1f} s -> {out}")

    def loop(self, session) -> Outcome:
        """Local step → strategy (maybe sync) → evaluate on schedule → record.

        Every ``--stop-check-every`` steps the ranks agree on signals and divergence
        (:mod:`fdahpc.control`); checkpoints are written every ``--checkpoint-every`` steps,
        when a signal stops the run, and at its end.
        """
        cfg, comm, strategy, progress, stop = self.cfg, self.comm, self.strategy, self.progress, session.stop
        run = session.run_file
        strategy.sink = run.append  # sync/step, fda/*, round/* series
        result = progress.result
        nan_step = faults.nan_at(comm.rank)

        def sent(purpose: str) -> int:
            return comm.bytes_sent[purpose] - progress.bytes_before[purpose]

        def evaluate(step: int) -> float:
            t_eval = time.perf_counter()
            acc, test_loss = self.evaluator.evaluate(self.model, strategy.held_model)
            progress.eval_seconds += time.perf_counter() - t_eval
            progress.last_eval = step
            self.model.train()
            for name, value in (("eval/step", step), ("eval/accuracy", acc), ("eval/loss", test_loss),
                                ("eval/comm_bytes", strategy.comm_bytes()), ("eval/held_bytes", strategy.held_bytes),
                                ("eval/lr", self.schedule.rate_at(self.peak_lr, step)),
                                ("eval/wall_seconds", elapsed())):
                run.append(name, value)
            run.flush()
            result.update(final_accuracy=acc, final_loss=test_loss)
            if comm.is_root:
                log.info("eval  step %d  epoch %.2f  accuracy %.4f  loss %.4f  syncs %d  comm %.4f GB",
                         step, step / self.steps_per_epoch, acc, test_loss, strategy.syncs, strategy.comm_bytes() / 1e9)
            return acc

        def save_checkpoint(step: int) -> str | None:
            progress.wall_seconds = elapsed()
            return session.save(step, self.state_dict())

        started = time.perf_counter()
        wall_before = progress.wall_seconds

        def elapsed() -> float:
            return wall_before + time.perf_counter() - started

        stopped_by, diverged_at, folder = None, None, None
        self.model.train()
        for step in range(progress.step + 1, self.total_steps + 1):
            loss = None  # a worker left out of this round keeps the global model and has no loss
            if strategy.participating:
                self.schedule.apply(self.optimizer, (self.peak_lr,), step - 1)
                loss = local_steps(self.model, self.batches, 1, self.optimizer.step, self.optimizer.zero_grad,
                                   cfg.clip_grad_norm)
                progress.running_loss += loss
                if step == nan_step:
                    faults.poison(self.model)
                if not math.isfinite(loss) and diverged_at is None:
                    diverged_at = step
            strategy.after_step(loss)  # records its own series through strategy.sink
            if comm.is_root and step % cfg.log_every == 0:
                log.info("step %d  epoch %.2f  loss %.4f  syncs %d  comm %.4f GB", step, step / self.steps_per_epoch,
                         progress.running_loss / cfg.log_every, strategy.syncs, strategy.comm_bytes() / 1e9)
                progress.running_loss = 0.0
            progress.step = step
            due = step_plan(step, total=self.total_steps, steps_per_epoch=self.steps_per_epoch,
                            eval_every=cfg.eval_every, check_every=cfg.stop_check_every,
                            checkpoint_every=cfg.checkpoint_every, checkpointing=cfg.checkpoint_dir is not None)
            verdict = None
            if due.check:
                if diverged_at is None and not bool(torch.isfinite(self.flat.w).all()):
                    diverged_at = step
                verdict = agree(comm, stop is not None and stop.requested, diverged_at)
                if verdict.diverged_rank is not None:
                    raise Diverged(f"diverged: NaN or Inf on rank {verdict.diverged_rank} at step {verdict.diverged_step} "
                                   f"(strategy {cfg.strategy}); run file {session.out} flushed up to step "
                                   f"{progress.last_eval}; lower --lr or resume from an earlier checkpoint")
            acc = evaluate(step) if due.evaluate else None
            if verdict is not None and verdict.stop:
                stopped_by = (stop.signal_name if stop is not None and stop.requested else None) or "a signal on another rank"
                break
            saved = due.checkpoint
            if saved:
                folder = save_checkpoint(step)
            if due.evaluate_last:
                acc = evaluate(step)  # the run's end, after its checkpoint: a longer resumed run does not repeat it
            if acc is not None and reached(cfg.target_accuracy, cfg.target_loss, acc, result["final_loss"]):
                result.update(steps_to_target=step)
                if cfg.checkpoint_dir and not saved:
                    folder = save_checkpoint(step)
                break
        strategy.finish()
        if stopped_by is None:
            # The run ends on the model its last evaluation scored (taken after its checkpoint, so
            # that a longer resumed run goes on as if it had not ended); bytes to the target include it.
            result["final_sync"] = int(strategy.settle())
            if result["steps_to_target"] == progress.step:
                result["comm_bytes_to_target"] = strategy.comm_bytes()
        if stopped_by is not None and cfg.checkpoint_dir:
            folder = save_checkpoint(progress.step)
        result.update(
            steps=strategy.steps, syncs=strategy.syncs, comm_bytes=strategy.comm_bytes(),
            comm_bytes_rank0=sent("model") + sent("monitor"),
            comm_bytes_monitor_rank0=sent("monitor"), comm_bytes_eval_rank0=sent("eval"),
            wall_seconds=elapsed(), eval_seconds=progress.eval_seconds, last_eval_step=progress.last_eval,
            stopped_at=progress.step if stopped_by else -1,
        )
        return Outcome(result, progress.step, stopped_by, folder)
