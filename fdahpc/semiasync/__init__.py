"""Semi-asynchronous federated learning on a rank-0 coordinator (``--mode semiasync``).

    mpirun -n 4 python -m fdahpc.train --mode semiasync --clients 100 --buffer 10 \\
        --strategy fedqs-avg --rounds 400 --partition dirichlet:0.5 --speed-ratio 50

Rank 0 is the server (:mod:`.server`); ranks 1..R-1 host the N clients between them,
client i on rank ``1 + i mod (R-1)`` (:mod:`.client`). They meet only through the
messages of :mod:`.protocol`, ordered by the virtual clock of :mod:`.clock`; the rules of
:mod:`.rules` and FedQS's client logic in :mod:`.fedqs` are pure math.

``--checkpoint-dir``/``--resume`` work as in the synchronous mode (:mod:`fdahpc.checkpoint`):
a checkpoint every ``--checkpoint-every`` rounds, at the end and on SIGTERM/SIGUSR1 (seen by
the server after each round), written by all ranks once the hosts are quiescent (see
:mod:`.server`); a resumed run continues bit for bit like an uninterrupted one. A NaN or
Inf in an update or the global model ends every rank with exit code 3.
"""

from __future__ import annotations

import json
import logging
import math
import os
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
    resumed: object = None  # checkpoint.Resumed when continuing a checkpoint


def fedqs_params(cfg):
    """Mod②'s hyper-parameters from the flags; validated (one wording) by FedQSParams."""
    from .fedqs import FedQSParams

    return FedQSParams(eta0=cfg.lr or DEFAULT_LR, a=cfg.fedqs_a, m0=cfg.fedqs_m0, k=cfg.fedqs_k,
                       lr_min=cfg.fedqs_lr_min, lr_max=cfg.fedqs_lr_max, momentum=not cfg.fedqs_no_momentum,
                       variant=cfg.fedqs_variant, similarity=cfg.fedqs_similarity,
                       authors_momentum=cfg.fedqs_authors_momentum)


def host_of(num_clients: int, world_size: int) -> np.ndarray:
    """The rank that hosts each client: round robin over ranks 1..R-1."""
    return 1 + np.arange(num_clients) % (world_size - 1)


def _split(cfg, mine: list[int], parts: list[np.ndarray], x: np.ndarray, y: np.ndarray, fedqs: bool):
    """Per-client shares of this host's rows (in ``mine`` order), views of them; for FedQS
    also the label test's rows, up to 20 per label of the client's own training samples
    picked in a seeded order (nothing held out from training)."""
    from ..worker import BatchStream
    from .client import ClientData
    from .clock import VALIDATION, stream_rng
    from .fedqs import label_probe

    out, offset = {}, 0
    for c in mine:
        n = len(parts[c])
        xt, yt = x[offset : offset + n], y[offset : offset + n]  # views
        offset += n
        steps = cfg.tau if cfg.tau is not None else max(1, math.ceil(cfg.local_epochs * n / cfg.batch_size))
        probe = label_probe(yt, stream_rng(cfg.seed, VALIDATION + c).permutation(n)) if fedqs else None
        out[c] = ClientData(BatchStream(xt, yt, cfg.batch_size, cfg.seed, c), steps, probe)
    return out


def build(cfg, comm: Communicator) -> SemiAsyncSetup:
    """Data, model and role for this rank (no file written); errors are agreed by the caller."""
    from .. import checkpoint, faults
    from ..data import load_dataset, partition
    from ..models import build_model
    from ..params import FlatParams
    from .clock import VirtualClock, parse_scenarios
    from .rules import build_rule

    if comm.world_size < 2:
        raise ValueError("--mode semiasync: needs at least 2 ranks (a server and a client host); start it with mpirun -n 2 or more")
    found, out = checkpoint.prepare(cfg, comm, f"semiasync-{cfg.strategy}")
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
    rule = build_rule(cfg.strategy, server_lr=cfg.server_lr, feedback=not cfg.fedqs_no_feedback,
                      variant=cfg.fedqs_variant, feedback_weight=cfg.fedqs_feedback, weighting=cfg.weighting)
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
                    num_clients=cfg.clients, fedqs=fedqs, clip_grad_norm=cfg.clip_grad_norm,
                    nan_from=faults.nan_at(comm.rank))
    resumed = checkpoint.open_for_resume(cfg, found, comm.rank, comm.world_size, flat.dim) if found else None
    return SemiAsyncSetup(cfg, comm, model, flat, role, out, resumed)


def run(s: SemiAsyncSetup, stop=None) -> dict:
    """Serve (rank 0) or host clients until the last round; rank 0 writes the run file.

    ``stop`` (a :class:`fdahpc.control.StopRequest`) matters on rank 0 only: the server
    decides when the run stops, hosts follow its messages. Returns the result; its
    ``exit_code`` is 1 when a stop signal's checkpoint could not be written.
    """
    from .. import checkpoint, provenance
    from ..control import Diverged, stopped
    from ..metrics import open_run_file

    cfg, comm = s.cfg, s.comm
    if s.resumed is None:
        comm.bcast_(s.flat.state, "control")  # one initial model, whatever each platform's RNG did
    else:
        s.role.load_state_dict(s.resumed.state["role"])
        comm.load_state_dict(s.resumed.state["comm"])
    identity = checkpoint.identity(cfg, comm.world_size, s.flat.dim)
    segments = provenance.start(comm, s.resumed)
    run_file = None

    def save(position: int) -> str | None:
        """Collective; None (and a warning) when a rank could not write, e.g. a full disk."""
        meta = {}
        if run_file is not None:
            run_file.flush()
            meta = dict(identity, provenance=segments, run_file=os.path.abspath(s.out), run_rows=run_file.rows())
        return checkpoint.save_or_warn(comm, cfg.checkpoint_dir, position,
                                       {"role": s.role.state_dict(), "comm": comm.state_dict()}, meta, unit="round")

    if not comm.is_root:
        return {"jobs": s.role.run(save if cfg.checkpoint_dir else None)}
    attrs = dict(mode="semiasync", strategy=cfg.strategy, model=cfg.model, dataset=cfg.dataset, partition=cfg.partition,
                 world_size=comm.world_size, clients=cfg.clients, buffer=cfg.buffer, rounds=cfg.rounds,
                 speed_ratio=cfg.speed_ratio, scenario=cfg.scenario or "", params=s.flat.dim,
                 target_accuracy=cfg.target_accuracy or -1.0, config=cfg.to_json(), provenance=json.dumps(segments))
    run_file = open_run_file(s.out, True, attrs, s.resumed)
    if s.resumed is not None:
        log.info("resumed from %s at round %d", s.resumed.folder, s.role.version)
    status, exit_code = "failed", 0
    try:
        try:
            result = s.role.run(run_file, stop=stop, save=save if cfg.checkpoint_dir else None,
                                checkpoint_every=cfg.checkpoint_every)
        except Diverged:
            status = "diverged"
            raise
        stopped_by, folder = result.pop("stopped_by"), result.pop("checkpoint")
        run_file.write_array("final/model", s.flat.state.numpy())
        run_file.set_attrs(**result)
        status = "stopped" if stopped_by else "finished"
    finally:
        run_file.close(status)
    if stopped_by:
        line, exit_code = stopped(stopped_by, "round", result["rounds_done"], folder, cfg.checkpoint_dir)
        log.info(line)
    else:
        log.info("done: %d rounds, virtual time %d, convergence accuracy %.4f, final accuracy %.4f, %.4f GB, %.1f s -> %s",
                 result["rounds_done"], result["virtual_time"], result["convergence_accuracy"], result["final_accuracy"],
                 result["comm_bytes"] / 1e9, result["wall_seconds"], s.out)
    return dict(result, exit_code=exit_code)
