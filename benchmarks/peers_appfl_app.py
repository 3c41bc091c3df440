"""APPFL's side of ``peers_appfl.py``: the files APPFL loads by path, and its MPI roles.

Imported only under ``mpiexec`` by ``peers_appfl.py --worker appfl``, in an interpreter that
has APPFL (``pip install -e ".[peers-appfl]"``). APPFL reads a model, a dataset and a metric
from files named in its configuration (``model_path``, ``dataset_path``, ``metric_path``) and
sends the model's and the metric's source to the clients as text, which they execute; the
three functions below are those files' contents, each a thin door to the job of
``peers_job.py`` (fdahpc's LeNet-5 with the run seed, fdahpc's Dirichlet split, one load of
the training set per process).

The roles follow APPFL's batched asynchronous MPI example (``examples/mpi``): rank 0 a
``ServerAgent`` behind ``MPIServerCommunicator.serve()``; every other rank one
``MPIClientCommunicator`` for a contiguous block of clients (``np.array_split``), which it
trains one after another, each sending its update alone and training next from the global
model the server returns. The one addition is :class:`ReportingServerAgent`: APPFL's MPI
server scores nothing while it runs (``server_validate`` is called by its serial simulator
only), so the subclass prints a line per aggregation, scored with fdahpc's scoring function
on the 10 000 test images, and records each version's clients and staleness. It overrides
``global_update`` (APPFL's documented way to change a server's behaviour) and does not touch
the aggregation.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import torch
from appfl.agent import ClientAgent, ServerAgent
from appfl.comm.mpi import MPIClientCommunicator, MPIServerCommunicator
from mpi4py import MPI
from omegaconf import OmegaConf

import peers_job as job

__all__ = ["ReportingServerAgent", "accuracy", "client_data", "lenet5", "run", "unpack"]


# ----------------------------------------------------------------------------- files APPFL loads
def lenet5(seed: int):
    """model_path/model_name: fdahpc's LeNet-5 as fdahpc builds it for ``--seed``."""
    return job.new_lenet(seed)


def client_data(num_clients: int, client_id: int, seed: int):
    """dataset_path/dataset_name: client ``client_id``'s rows of fdahpc's split, no validation set."""
    # APPFL executes this file afresh for every client, so a cache kept here would be new each
    # time; the cache lives in the module imported the ordinary way (one per process)
    import peers_appfl_app

    x, y, parts = peers_appfl_app._train(num_clients, seed)
    rows = torch.from_numpy(np.asarray(parts[client_id]))
    return torch.utils.data.TensorDataset(x[rows], y[rows]), None


@functools.lru_cache(maxsize=1)
def _train(num_clients: int, seed: int):
    return job.load_train(num_clients, seed)


def accuracy(y_true, y_pred):
    """metric_path/metric_name: the share of rows whose largest logit is the label."""
    return float(np.mean(np.argmax(y_pred, axis=1) == y_true)) if len(y_true) else 0.0


# ----------------------------------------------------------------------------- the server
class ReportingServerAgent(ServerAgent):
    """APPFL's ServerAgent, printing ``round v accuracy a staleness mean m max M`` when its
    aggregator moves to version v, and keeping each version's clients and staleness."""

    def __init__(self, server_agent_config, eval_every: int, rounds: int, seed: int):
        super().__init__(server_agent_config=server_agent_config)
        self.eval_every, self.rounds = eval_every, rounds
        self.test = job.load_test(seed)
        self.pending: list[tuple[str, int]] = []
        self.versions: list[dict] = []

    def global_update(self, client_id, local_model, blocking=False, **kwargs):
        if self.training_finished():
            return super().global_update(client_id, local_model, blocking=blocking, **kwargs)
        agg = self.aggregator
        # staleness as FedBuffAggregator counts it: versions since the one the client trained from
        self.pending.append((client_id, agg.global_step - agg.client_step.get(client_id, 0)))
        before = agg.global_step
        out = super().global_update(client_id, local_model, blocking=blocking, **kwargs)
        if agg.global_step > before:
            self._report(agg.global_step)
        return out

    def _report(self, version: int) -> None:
        taus = [t for _, t in self.pending]
        scored = version % self.eval_every == 0 or version == self.rounds
        acc = job.score_model(self.model, *self.test) if scored else float("nan")
        self.versions.append(dict(version=version, clients=[c for c, _ in self.pending], staleness=taus,
                                  accuracy=acc))
        self.pending = []
        print(f"round {version} accuracy {acc:.4f} staleness mean {np.mean(taus):.2f} max {max(taus)}", flush=True)


def unpack(reply) -> tuple:
    """APPFL hands back a model alone or (model, metadata): always the pair."""
    return reply if isinstance(reply, tuple) else (reply, {})


# ----------------------------------------------------------------------------- the roles
def run(server_config: dict, client_configs: list[dict], eval_every: int, rounds: int, seed: int,
        summary_path: str, optimize_memory: bool = True) -> None:
    """This rank's role: rank 0 serves, rank r ≥ 1 hosts block r-1 of the clients."""
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        agent = ReportingServerAgent(OmegaConf.create(server_config), eval_every, rounds, seed)
        MPIServerCommunicator(comm, agent, logger=agent.logger).serve()
        with open(summary_path, "w") as f:
            json.dump(agent.versions, f)
        return
    blocks = np.array_split(np.arange(len(client_configs)), comm.size - 1)
    _host([client_configs[i] for i in blocks[comm.rank - 1]], comm, optimize_memory)


def _host(configs: list[dict], comm, optimize_memory: bool) -> None:
    agents = [ClientAgent(client_agent_config=OmegaConf.create(c)) for c in configs]
    names = [a.get_id() for a in agents]
    link = MPIClientCommunicator(comm, server_rank=0, client_ids=names, optimize_memory=optimize_memory)
    shared = link.get_configuration()
    for a in agents:
        a.load_config(shared)
    init, _ = unpack(link.get_global_model(init_model=True))
    for a in agents:
        a.load_parameters(init)
    link.invoke_custom_action(action="set_sample_size",
                              kwargs={n: {"sample_size": a.get_sample_size(), "sync": True} for n, a in zip(names, agents)})
    done = False
    while not done:
        for name, agent in zip(names, agents):
            agent.train()
            params, meta = unpack(agent.get_parameters())
            model, reply = link.update_global_model(params, client_id=name, **meta)
            if reply["status"] == "DONE":
                done = True
                break
            agent.load_parameters(model)
    link.invoke_custom_action(action="close_connection")
