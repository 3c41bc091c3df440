"""Flower's side of ``benchmarks/peers.py``: its ClientApp and ServerApp, in an importable module.

Why a module: the simulation engine sends the ClientApp to its Ray actors with every
message, pickled by cloudpickle. Functions of an importable module travel by reference,
so each actor imports this module once and :data:`_CACHE` (the training set and the
clients' row lists) lives for the actor's lifetime, as Flower's own examples keep their
data. A ClientApp defined in the launching script travels by value, its cache with it,
and every call reloads the whole training set (``peers.py --flower-app inline`` keeps
that arrangement to show the guard in :mod:`peers_job` failing on it).

Which clients: :class:`ScheduledFedAvg` is Flower's ``FedAvg`` whose ``configure_train``
sends round r's scheduled clients (:func:`peers_job.schedule`, fdahpc's sampler) instead of
sampling its own: client c goes to the c-th node (node ids sorted) with ``client`` and
``job`` (how many jobs it ran before) in the message's config, so the ClientApp trains
the batches fdahpc's host trains for it. Aggregation is ``FedAvg``'s own (weighted by the
``num-examples`` each reply reports); the global model is scored by ``evaluate_fn`` on the
driver, the central evaluation of Flower's examples.
"""

from __future__ import annotations

import time

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

import peers_job as job

__all__ = ["ScheduledFedAvg", "app", "server_app", "train_on"]

_CACHE: dict = {}  # per actor process: (N, seed) -> (x_train, y_train, parts)


def train_on(msg: Message, cache: dict) -> Message:
    """One scheduled client's local job on the message's model; data from ``cache``."""
    cfg = msg.content["config"]
    n, seed, client, jobs = int(cfg["clients"]), int(cfg["seed"]), int(cfg["client"]), int(cfg["job"])
    if (n, seed) not in cache:  # once per actor when the cache holds
        torch.set_num_threads(1)  # one CPU per actor (client_resources)
        cache[n, seed] = job.load_train(n, seed)
    x, y, parts = cache[n, seed]
    model = job.new_lenet(seed)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    n_samples = job.client_job(model, x, y, parts[client], client, jobs, seed)
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord({"num-examples": n_samples})})
    return Message(content=content, reply_to=msg)


app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    return train_on(msg, _CACHE)


class ScheduledFedAvg(FedAvg):
    """FedAvg told its clients: round r trains :func:`peers_job.schedule` ``(N, r, seed)``."""

    def __init__(self, n_clients: int, seed: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.n_clients, self.seed = n_clients, seed

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        while len(nodes := sorted(grid.get_node_ids())) < self.n_clients:
            time.sleep(0.1)
        messages = []
        for c in job.schedule(self.n_clients, server_round, self.seed):
            cfg = ConfigRecord({**config, "server-round": server_round, "clients": self.n_clients, "seed": self.seed,
                                "client": int(c), "job": job.jobs_before(self.n_clients, c, server_round, self.seed)})
            record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: cfg})
            messages.append(Message(content=record, message_type=MessageType.TRAIN, dst_node_id=nodes[c]))
        return messages


def server_app(n_clients: int, rounds: int, seed: int, eval_every: int) -> ServerApp:
    """The driver's ServerApp: ``rounds`` rounds of :class:`ScheduledFedAvg`; a round line
    per round, scored every ``eval_every`` rounds and at the last (``nan`` otherwise)."""
    server = ServerApp()
    x_test, y_test = job.load_test(seed)
    model = job.new_lenet(seed)

    def evaluate(rnd: int, arrays: ArrayRecord):
        if rnd > 0:
            acc = float("nan")
            if rnd % eval_every == 0 or rnd == rounds:
                model.load_state_dict(arrays.to_torch_state_dict())
                acc = job.score_model(model, x_test, y_test)
            print(f"round {rnd} accuracy {acc:.4f}", flush=True)
        return MetricRecord({})

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = ScheduledFedAvg(n_clients, seed, fraction_evaluate=0.0)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=rounds,
                       evaluate_fn=evaluate)

    return server
