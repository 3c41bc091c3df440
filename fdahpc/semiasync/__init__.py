"""Semi-asynchronous federated learning on a rank-0 coordinator (``--mode semiasync``).

    mpirun -n 4 python -m fdahpc.train --mode semiasync --clients 100 --buffer 10 \\
        --strategy fedqs-avg --rounds 400 --partition dirichlet:0.5 --speed-ratio 50

Rank 0 is the server (:mod:`.server`); ranks 1..R-1 host the N clients between them,
client i on rank ``1 + i mod (R-1)`` (:mod:`.client`). They meet only through the
messages of :mod:`.protocol`, ordered by the virtual clock of :mod:`.clock`; the rules of
:mod:`.rules` and FedQS's client logic in :mod:`.fedqs` are pure math.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..comm import Communicator

__all__ = ["SemiAsyncSetup", "build", "fedqs_params", "run"]

log = logging.getLogger("fdahpc")

#: Local training defaults of this mode: SGD at the FedQS paper's η0 = 0.1.
DEFAULT_OPTIMIZER, DEFAULT_LR = "sgd", 0.1


@dataclass
class SemiAsyncSetup:
    cfg: object
    comm: Communicator
    model: torch.nn.Module
    flat: object
    role: object  # the Server on rank 0, a Host elsewhere
    out: str


def fedqs_params(cfg):
    """Mod②'s hyper-parameters from the flags; validated (one wording) by FedQSParams."""
    from .fedqs import FedQSParams

    return FedQSParams(eta0=cfg.lr or DEFAULT_LR, a=cfg.fedqs_a, m0=cfg.fedqs_m0, k=cfg.fedqs_k,
                       lr_min=cfg.fedqs_lr_min, lr_max=cfg.fedqs_lr_max, momentum=not cfg.fedqs_no_momentum)


def host_of(num_clients: int, world_size: int) -> np.ndarray:
    """The rank that hosts each client: round robin over ranks 1..R-1."""
    return 1 + np.arange(num_clients) % (world_size - 1)


def _split(cfg, mine: list[int], parts: list[np.ndarray], x: np.ndarray, y: np.ndarray, fedqs: bool):
    """Per-client shares of this host's rows (in ``mine`` order): views of them, or for
    FedQS a copy split into training rows and a seeded validation split for the label test."""
    from ..worker import BatchStream
    from .client import ClientData
    from .clock import VALIDATION, stream_rng

    out, offset = {}, 0
    for c in mine:
        n = len(parts[c])
        rows = np.arange(offset, offset + n)
        offset += n
        n_val = int(cfg.fedqs_val_fraction * n) if fedqs and n > 1 else 0
        if n_val:
            rows = stream_rng(cfg.seed, VALIDATION + c).permutation(rows)
        val, train = np.sort(rows[:n_val]), np.sort(rows[n_val:])
        xt, yt = (x[train], y[train]) if n_val else (x[offset - n : offset], y[offset - n : offset])  # a view
        steps = cfg.tau if cfg.tau is not None else max(1, math.ceil(cfg.local_epochs * len(yt) / cfg.batch_size))
        out[c] = ClientData(BatchStream(xt, yt, cfg.batch_size, cfg.seed, c),
                            torch.from_numpy(x[val]), torch.from_numpy(y[val]), steps)
    return out


def build(cfg, comm: Communicator) -> SemiAsyncSetup:
    """Data, model and role for this rank (no file written); errors are agreed by the caller."""
    from ..data import load_dataset, partition
    from ..metrics import check_writable
    from ..models import build_model
    from ..params import FlatParams
    from .clock import VirtualClock, parse_scenarios
    from .rules import build_rule

    if comm.world_size < 2:
        raise ValueError("--mode semiasync: needs at least 2 ranks (a server and a client host); start it with mpirun -n 2 or more")
    out = cfg.out or os.path.join("runs", f"semiasync-{cfg.strategy}-{time.strftime('%Y%m%d-%H%M%S')}.h5")
    out = comm.bcast_obj(out)
    if comm.is_root:
        check_writable(out)
    hosts = host_of(cfg.clients, comm.world_size)
    mine = [c for c in range(cfg.clients) if hosts[c] == comm.rank]
    parts: list[np.ndarray] = []

    def my_rows(labels):
        parts.extend(partition(labels, cfg.clients, cfg.partition, cfg.seed))
        empty = [c for c, p in enumerate(parts) if len(p) == 0]
        if empty:
            raise ValueError(f"--partition {cfg.partition}: {len(empty)} of {cfg.clients} clients got no training samples "
                             f"(client {empty[0]}, ...); use fewer --clients or another partition")
        return np.concatenate([parts[c] for c in mine]) if mine else np.zeros(0, dtype=np.int64)

    data = load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed, train_indices=my_rows)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data.x_train.shape[1], data.x_train.shape[2], data.num_classes)
    flat = FlatParams(model, buffers=True)
    rule = build_rule(cfg.strategy, server_lr=cfg.server_lr or 1.0, feedback=not cfg.fedqs_no_feedback,
                      feedback_variant=cfg.fedqs_feedback)
    fedqs = fedqs_params(cfg) if rule.needs_client_state else None
    if comm.is_root:
        from .server import Server

        clock = VirtualClock(cfg.clients, cfg.speed_ratio, cfg.seed, parse_scenarios(cfg.scenario))
        role = Server(comm, model, flat, rule, clock, hosts, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test),
                      cfg.buffer, cfg.rounds, eval_every=cfg.eval_every or 1, target_accuracy=cfg.target_accuracy,
                      log_every=cfg.log_every)
    else:
        from .client import Host

        clients = _split(cfg, mine, parts, data.x_train, data.y_train, fedqs is not None)
        role = Host(comm, model, flat, clients, uploads=rule.uploads, optimizer=cfg.optimizer or DEFAULT_OPTIMIZER,
                    lr=cfg.lr or DEFAULT_LR, weight_decay=cfg.weight_decay, seed=cfg.seed, num_classes=data.num_classes,
                    num_clients=cfg.clients, fedqs=fedqs, similarity_kind=cfg.fedqs_similarity)
    return SemiAsyncSetup(cfg, comm, model, flat, role, out)


def run(s: SemiAsyncSetup, stop=None) -> dict:
    """Serve (rank 0) or host clients until the last round; rank 0 writes the run file."""
    from ..metrics import open_run_file

    cfg, comm = s.cfg, s.comm
    comm.bcast_(s.flat.state, "control")  # one initial model, whatever each platform's RNG did
    if not comm.is_root:
        return {"jobs": s.role.run()}
    attrs = dict(mode="semiasync", strategy=cfg.strategy, model=cfg.model, dataset=cfg.dataset, partition=cfg.partition,
                 world_size=comm.world_size, clients=cfg.clients, buffer=cfg.buffer, rounds=cfg.rounds,
                 speed_ratio=cfg.speed_ratio, scenario=cfg.scenario or "", params=s.flat.dim,
                 target_accuracy=cfg.target_accuracy or -1.0, config=cfg.to_json())
    run_file = open_run_file(s.out, True, attrs)
    try:
        result = s.role.run(run_file)
        run_file.write_array("final/model", s.flat.state.numpy())
        run_file.set_attrs(**result)
    finally:
        run_file.close()
    log.info("done: %d rounds, virtual time %d, convergence accuracy %.4f, final accuracy %.4f, %.4f GB, %.1f s -> %s",
             result["rounds_done"], result["virtual_time"], result["convergence_accuracy"], result["final_accuracy"],
             result["comm_bytes"] / 1e9, result["wall_seconds"], s.out)
    return result
