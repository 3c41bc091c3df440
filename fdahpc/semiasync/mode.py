"""``--mode semiasync``: the mode object, and the job that puts the roles on the ranks.

Rank 0 serves (:class:`.server.Server`), ranks 1..R-1 host the clients (:class:`.client.Host`);
the run around them (setup, resume, run file, exit code) is :mod:`fdahpc.run`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from .. import faults
from ..comm import TORCH_BACKENDS, LaunchError
from ..comm.launch import detect
from ..config import one_of
from ..data import partition
from ..data.text import as_tensor
from ..heap import release_freed_models
from ..lr_schedule import LRSchedule
from ..options import LRScheduleOptions, MeanOptions, PeriodicOptions, option_names, options_from
from ..params import FlatParams
from ..run import Job, Mode, Outcome, Plan, load_data, new_model
from ..worker import BatchStream, steps_per_job
from .client import ClientData, Host, LocalTraining, Uploads
from .clock import VALIDATION, VirtualClock, parse_scenarios, stream_rng
from .fedqs import SIMILARITIES, FedQSParams, label_probe
from .rounds import EventRounds, TickRounds
from .rules import BUFFER_RULES, rule_options
from .server import Server
from .sums import OnHosts, OnServer
from .ticks import CLOCKS, TickClock

__all__ = ["MODE", "SemiAsyncMode", "SemiAsyncOptions", "SemiAsyncJob", "fedqs_params", "host_of"]

#: Local training defaults of this mode: SGD at the FedQS paper's η0 = 0.1.
DEFAULT_OPTIMIZER, DEFAULT_LR = "sgd", 0.1
#: The FedQS paper's N, K and rounds; the buffer never exceeds the clients.
DEFAULT_CLIENTS, DEFAULT_BUFFER, DEFAULT_ROUNDS = 100, 10, 400
DEFAULT_MODEL_CACHE_GB = 1.0  # per rank; see store.py
DEFAULT_SPEED_RATIO = 50  # the paper's 1:50
AGGREGATE = ("server", "hosts")  # who adds the buffered updates (--aggregate)


def fedqs_params(cfg):
    """Mod②'s hyper-parameters from the flags; validated (one wording) by FedQSParams."""
    return FedQSParams(eta0=cfg.lr or DEFAULT_LR, a=cfg.fedqs_a, m0=cfg.fedqs_m0, k=cfg.fedqs_k,
                       lr_min=cfg.fedqs_lr_min, lr_max=cfg.fedqs_lr_max, momentum=not cfg.fedqs_no_momentum,
                       variant=cfg.fedqs_variant, similarity=cfg.fedqs_similarity,
                       authors_momentum=cfg.fedqs_authors_momentum, sketch=cfg.fedqs_sketch_similarity)


def host_of(num_clients: int, world_size: int) -> np.ndarray:
    """The rank that hosts each client: round robin over ranks 1..R-1."""
    return 1 + np.arange(num_clients) % (world_size - 1)


def train_device(cfg, comm) -> torch.device:
    """Where this rank trains: the CPU, or with ``--device cuda`` on a host one GPU of its
    node (its node-local rank modulo the GPUs visible; several hosts may share one). The
    server scores and aggregates on the CPU. Collective: every rank calls it."""
    if cfg.device != "cuda":
        return torch.device("cpu")
    launch = detect()  # the node-local rank, from MPI
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if comm.is_root:
        return torch.device("cpu")
    if count == 0:
        raise LaunchError(f"--device cuda: no CUDA GPU visible to rank {comm.rank} (CUDA_VISIBLE_DEVICES, driver); "
                          "use --device cpu")
    device = torch.device("cuda", (launch.local_rank if launch else comm.rank) % count)
    torch.cuda.set_device(device)
    return device


def _split(cfg, mine: list[int], parts: list[np.ndarray], x: np.ndarray, y: np.ndarray, fedqs: bool):
    """Per-client shares of this host's rows (in ``mine`` order), views of them; for FedQS
    also the label test's rows, up to 20 per label of the client's own training samples
    picked in a seeded order (nothing held out from training)."""
    out, offset = {}, 0
    for c in mine:
        n = len(parts[c])
        xt, yt = x[offset : offset + n], y[offset : offset + n]  # views
        offset += n
        steps = steps_per_job(n, cfg.batch_size, cfg.local_epochs, cfg.tau, cfg.drop_last)
        probe = label_probe(yt, stream_rng(cfg.seed, VALIDATION + c).permutation(n)) if fedqs else None
        out[c] = ClientData(BatchStream(xt, yt, cfg.batch_size, cfg.seed, c, drop_last=cfg.drop_last), steps, probe)
    return out


class SemiAsyncOptions(NamedTuple):
    """What a semi-asynchronous run's rule and clients run with, built and checked once."""

    rule: object  # the rule's Options (rules.BUFFER_RULES[name].Options)
    fedqs: FedQSParams | None  # Mod②'s hyper-parameters (FedQS's rules, whose clients keep state; None for the others)
    schedule: LRSchedule | None = None  # --lr-schedule over --rounds (None for FedQS, whose clients set their rate)


class SemiAsyncMode(Mode):
    name = "semiasync"
    unit = "round"
    noun = "a semi-asynchronous rule"
    options = ("clients", "buffer", "rounds", "speed_ratio", "clock", "scenario", "aggregate", "model_cache_gb", "spill_dir",
               "tau", "local_epochs", "clients_per_round")

    @property
    def RULE_OPTIONS(self) -> dict[str, frozenset[str]]:
        """What each rule reads beside the mode's options: its ``Options`` and its clients'
        (:meth:`.rules.BufferRule.reads`), from the registry."""
        return {name: cls.reads() for name, cls in BUFFER_RULES.items()}

    def strategies(self) -> tuple[str, ...]:
        return tuple(BUFFER_RULES)

    def defaults(self, cfg) -> dict:
        clients = cfg.clients if cfg.clients is not None else DEFAULT_CLIENTS
        buffer = min(DEFAULT_BUFFER, clients) if isinstance(clients, int) and clients >= 1 else DEFAULT_BUFFER
        if cfg.clients_per_round is not None:  # cross-device FedAvg: a round waits for its sample
            buffer = cfg.clients_per_round
        return {"strategy": "fedqs-avg", "clients": clients, "buffer": buffer, "rounds": DEFAULT_ROUNDS, "clock": "events",
                "aggregate": "server", "model_cache_gb": DEFAULT_MODEL_CACHE_GB}

    def layout(self, config: dict, world_size: int | None) -> dict:
        # Spelled out: the FedQS paper's K (the buffer) is the FDA paper's workers.
        size = f"clients={config.get('clients')} buffer={config.get('buffer')}"
        label = [str(config.get("strategy")), size, f"1:{config.get('speed_ratio')}"]
        label += [str(config["scenario"])] if config.get("scenario") else []
        label += [str(config["partition"])] if config.get("partition") not in (None, "") else []
        return dict(x="round/version", accuracy="round/accuracy", loss="round/loss",
                    panels=[["round/version", "aggregation rounds", 1], ["round/virtual_time", "virtual time", 1]],
                    events="round/version", bytes=["round/bytes", "sum"],
                    workers=size, label=" ".join(label), convergence=True)

    def reads(self, cfg, options: "SemiAsyncOptions") -> set[str]:
        # A learning-rate schedule over the aggregations, except where FedQS sets each client's rate itself.
        schedule = set() if BUFFER_RULES[cfg.strategy].needs_client_state else set(option_names(LRScheduleOptions))
        return set(self.options) | self.RULE_OPTIONS.get(cfg.strategy, frozenset()) | schedule

    def readers(self, name: str) -> list[str]:
        rules = [r for r, names in self.RULE_OPTIONS.items() if name in names]
        if name in option_names(LRScheduleOptions):
            rules = [r for r, cls in BUFFER_RULES.items() if not cls.needs_client_state]
        return super().readers(name) + ([f"--strategy {', '.join(rules)}"] if rules else [])

    def check(self, cfg) -> "SemiAsyncOptions":
        super().check(cfg)
        options_from(PeriodicOptions, cfg)  # a client's local job: --tau or --local-epochs
        options_from(MeanOptions, cfg)

        def require(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(msg)

        require(cfg.clients >= 1, f"--clients {cfg.clients}: must be >= 1, e.g. --clients 100")
        if cfg.clients_per_round is not None:
            require(1 <= cfg.clients_per_round <= cfg.clients, f"--clients-per-round {cfg.clients_per_round}: must be "
                    f"in [1, --clients {cfg.clients}], e.g. --clients-per-round 10")
        require(1 <= cfg.buffer <= cfg.clients, f"--buffer {cfg.buffer}: must be in [1, --clients {cfg.clients}], e.g. --buffer 10")
        if cfg.clients_per_round is not None:
            require(cfg.buffer == cfg.clients_per_round, f"--buffer {cfg.buffer}: with --clients-per-round "
                    f"{cfg.clients_per_round} a round waits for all its clients; drop --buffer")
        one_of("--aggregate", cfg.aggregate, AGGREGATE)
        if cfg.aggregate == "hosts":
            require(BUFFER_RULES[cfg.strategy].weights_from_headers, f"--aggregate hosts: {cfg.strategy}'s weights read "
                    "every update's payload; use --aggregate server")
        require(cfg.model_cache_gb > 0, f"--model-cache-gb {cfg.model_cache_gb}: must be > 0, e.g. 1 "
                "(the models that do not fit wait in --spill-dir)")
        require(cfg.rounds >= 1, f"--rounds {cfg.rounds}: must be >= 1, e.g. --rounds 400")
        require(cfg.speed_ratio >= 1, f"--speed-ratio {cfg.speed_ratio}: must be >= 1 (1 = equal speeds), e.g. 50")
        parse_scenarios(cfg.scenario)
        one_of("--clock", cfg.clock, CLOCKS)
        if cfg.clock == "ticks":  # what the authors' simulator cannot express (ticks.py)
            for flag, given, why in (
                    ("--scenario", cfg.scenario, "it has no churn or speed changes"),
                    ("--clients-per-round", cfg.clients_per_round, "every client is always training"),
                    ("--aggregate hosts", cfg.aggregate == "hosts", "a carried entry reads a result the server keeps")):
                require(not given, f"{flag}: not with --clock ticks ({why}); drop it or use --clock events")
        if cfg.strategy.startswith("fedqs"):
            require(cfg.model != "gpt", f"--strategy {cfg.strategy}: FedQS's label test needs one label per sample, the "
                    "gpt predicts every position; use --model lstm")
            require(cfg.optimizer in (None, "sgd"), f"--optimizer {cfg.optimizer}: FedQS clients train with their own "
                    "SGD heavy-ball step; drop --optimizer")
        schedule = None  # a warm-up longer than the run is refused here
        if not BUFFER_RULES[cfg.strategy].needs_client_state:
            schedule = options_from(LRScheduleOptions, cfg).schedule(cfg.rounds)
        rule = rule_options(cfg.strategy, cfg)  # the rule's options, checked where they live
        # FedQS's ranges (its lr bounds against --lr among them) are checked where they live
        fedqs = fedqs_params(cfg) if BUFFER_RULES[cfg.strategy].needs_client_state else None
        one_of("--fedqs-similarity", cfg.fedqs_similarity, SIMILARITIES)
        require(cfg.backend not in TORCH_BACKENDS, f"--backend {cfg.backend}: the semi-asynchronous coordinator needs "
                "MPI's probe, which torch.distributed lacks; use --backend mpi (or auto under mpirun/srun --mpi=pmi2)")
        return SemiAsyncOptions(rule, fedqs, schedule)

    def prepare(self, plan: Plan, comm) -> None:
        """Every rank returns freed models to the system at once (heap.py)."""
        release_freed_models()

    def device(self, cfg) -> str:
        return "cpu"  # the coordinator's messages: MPI on CPU buffers; hosts may train on a GPU (train_device)

    def stem(self, cfg) -> str:
        return f"semiasync-{cfg.strategy}"

    def build(self, plan: Plan, comm) -> "SemiAsyncJob":
        """Data, model and role for this rank (no file written)."""
        cfg = plan.cfg
        if not comm.point_to_point:
            raise ValueError("--mode semiasync: the coordinator needs MPI's probe, which torch.distributed lacks; "
                             "start it under mpirun or srun --mpi=pmi2 with --backend mpi")
        if comm.world_size < 2:
            raise ValueError("--mode semiasync: needs at least 2 ranks (a server and a client host); start it with "
                             "mpirun -n 2 or more")
        hosts = host_of(cfg.clients, comm.world_size)
        mine = [c for c in range(cfg.clients) if hosts[c] == comm.rank]
        parts: list[np.ndarray] = []

        def my_rows(labels):
            parts.extend(partition(labels, cfg.clients, cfg.partition, cfg.seed))
            empty = [c for c, p in enumerate(parts) if len(p) == 0]
            if empty:
                raise ValueError(f"--partition {cfg.partition}: {len(empty)} of {cfg.clients} clients got no training "
                                 f"samples (client {empty[0]}, ...); use fewer --clients or another partition")
            return np.concatenate([parts[c] for c in mine]) if mine else np.zeros(0, dtype=np.int64)

        data = load_data(cfg, my_rows, None if comm.is_root else lambda labels: labels[:0])  # the server alone scores
        device = train_device(cfg, comm)
        model = new_model(cfg, data).to(device)  # initialized on the CPU: the same model on any device
        flat = FlatParams(model, buffers=True)
        rule = BUFFER_RULES[cfg.strategy].build(plan.options.rule)
        fedqs = plan.options.fedqs
        if comm.is_root:
            rounds = (TickRounds(TickClock(cfg.clients, cfg.speed_ratio, cfg.seed, cfg.buffer)) if cfg.clock == "ticks"
                      else EventRounds(VirtualClock(cfg.clients, cfg.speed_ratio, cfg.seed, parse_scenarios(cfg.scenario),
                                                    per_round=cfg.clients_per_round), cfg.buffer))
            numel = flat.state.numel()
            sums = (OnHosts(comm, hosts, numel) if cfg.aggregate == "hosts"
                    else OnServer(comm, hosts, numel, cfg.model_cache_gb, cfg.spill_dir))
            role = Server(comm, model, flat, rule, rounds, sums, hosts, as_tensor(data.x_test), as_tensor(data.y_test),
                          cfg.buffer, cfg.rounds, eval_every=cfg.eval_every or 1,
                          target_accuracy=cfg.target_accuracy, target_loss=cfg.target_loss, log_every=cfg.log_every)
        else:
            clients = _split(cfg, mine, parts, data.x_train, data.y_train, fedqs is not None)
            training = LocalTraining(cfg.optimizer or DEFAULT_OPTIMIZER, cfg.lr or DEFAULT_LR, cfg.weight_decay,
                                     cfg.clip_grad_norm, device, cfg.seed, plan.options.schedule)
            uploads = Uploads(rule.uploads, rule.stats_updates, cfg.aggregate == "hosts", fedqs)
            role = Host(comm, model, flat, clients, training=training, uploads=uploads, num_classes=data.num_classes,
                        num_clients=cfg.clients, nan_from=faults.nan_at(comm.rank), model_cache_gb=cfg.model_cache_gb,
                        spill_dir=cfg.spill_dir)
        return SemiAsyncJob(cfg, comm, model, flat, role)


MODE = SemiAsyncMode()


@dataclass
class SemiAsyncJob(Job):
    """The server on rank 0, a client host elsewhere. ``stop`` matters on rank 0 only: the
    server decides when the run stops, hosts follow its messages."""

    cfg: object
    comm: object
    model: torch.nn.Module
    flat: object
    role: object  # the Server on rank 0, a Host elsewhere

    @property
    def attrs(self) -> dict:
        c = self.cfg
        return dict(clients=c.clients, buffer=c.buffer, rounds=c.rounds, speed_ratio=c.speed_ratio, scenario=c.scenario or "",
                    clock=c.clock)

    @property
    def position(self) -> int:
        return getattr(self.role, "version", 0)

    def fresh(self) -> None:
        # One initial model, whatever each platform's RNG did (through a CPU copy on a GPU host).
        state = self.flat.state.cpu()
        self.comm.bcast_(state, "control")
        self.flat.state.copy_(state)

    def state_dict(self) -> dict:
        return {"role": self.role.state_dict(), "comm": self.comm.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.role.load_state_dict(state["role"])
        self.comm.load_state_dict(state["comm"])

    def final_model(self):
        return self.flat.state.numpy()

    def summary(self, result: dict, out: str) -> str:
        return (f"done: {result['rounds_done']} rounds, virtual time {result['virtual_time']}, convergence accuracy "
                f"{result['convergence_accuracy']:.4f}, final accuracy {result['final_accuracy']:.4f}, "
                f"{result['comm_bytes'] / 1e9:.4f} GB, {result['wall_seconds']:.1f} s -> {out}")

    def loop(self, session) -> Outcome:
        """Serve (rank 0) or host clients until the last round."""
        cfg = self.cfg
        save = (lambda position: session.save(position, self.state_dict())) if cfg.checkpoint_dir else None
        if not self.comm.is_root:
            return Outcome({"jobs": self.role.run(save)}, 0)
        result = self.role.run(session.run_file, stop=session.stop, save=save, checkpoint_every=cfg.checkpoint_every)
        stopped_by, folder = result.pop("stopped_by"), result.pop("checkpoint")
        return Outcome(result, result["rounds_done"], stopped_by, folder)
