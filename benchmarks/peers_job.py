"""The one job of ``benchmarks/peers.py``, shared by every framework it runs.

Everything a framework could do differently and that is not the framework's own business
lives here once, so each framework trains the same clients on the same batches and is
scored the same way:

- the schedule: round r's C clients are fdahpc's own sampler
  (:meth:`fdahpc.semiasync.clock.VirtualClock.starters`), which ``--clients-per-round``
  runs on; the bare loop and Flower's strategy are handed the same list;
- a client's local job: ``ceil(n_i / B)`` minibatches of B from the client's
  :class:`fdahpc.worker.BatchStream` (seeded by the run seed and the client id), continued
  from where the client's previous job stopped. The stream is rebuilt from the schedule
  (how many jobs the client ran before), so a process that never saw the client before
  draws exactly the batches fdahpc's host draws;
- the score: :func:`fdahpc.evaluate.score` in batches of 1 000 (fdahpc's server's call);
- the guard against a data cache that does not hold: every load of the training set
  appends a line to the file named by ``$FDAHPC_PEERS_LOADS``; :func:`check_loads` fails
  a run whose loads exceed its worker processes.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

__all__ = ["ALPHA", "BATCH", "LOADS_ENV", "LR", "PER_ROUND", "check_loads", "client_job", "count_loads",
           "jobs_before", "load_test", "load_train", "new_lenet", "schedule", "score_model"]

LR, BATCH, PER_ROUND, ALPHA = 0.05, 32, 10, "dirichlet:0.5"
LOADS_ENV = "FDAHPC_PEERS_LOADS"


def schedule(n_clients: int, rnd: int, seed: int) -> list[int]:
    """Round ``rnd``'s clients (1-based rounds), as ``--clients-per-round`` samples them."""
    from fdahpc.semiasync.clock import VirtualClock

    return VirtualClock(n_clients, 1, seed, per_round=min(PER_ROUND, n_clients)).starters(None, rnd - 1)


def jobs_before(n_clients: int, client: int, rnd: int, seed: int) -> int:
    """How many local jobs ``client`` ran in rounds 1 .. rnd-1."""
    return sum(client in schedule(n_clients, r, seed) for r in range(1, rnd))


def load_train(n_clients: int, seed: int):
    """The normalised FashionMNIST training set as tensors and the N clients' row lists;
    each call is one load, recorded for :func:`check_loads`."""
    from fdahpc.data import load_dataset, partition

    record_load()
    data = load_dataset("fashion-mnist", seed=seed, test_indices=lambda labels: labels[:0])
    return torch.from_numpy(data.x_train), torch.from_numpy(data.y_train), partition(data.y_train, n_clients, ALPHA, seed)


def load_test(seed: int):
    """The 10 000 test images only (the training images are never read)."""
    from fdahpc.data import load_dataset

    data = load_dataset("fashion-mnist", seed=seed, train_indices=lambda labels: labels[:0])
    return torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)


def new_lenet(seed: int):
    """The initial model, as ``fdahpc.run.new_model`` builds it."""
    from fdahpc.models import build_model

    torch.manual_seed(seed)
    return build_model("lenet5", 1, 28, 10)


def client_job(model, x, y, rows: np.ndarray, client: int, job: int, seed: int) -> int:
    """Client ``client``'s ``job``-th local epoch (0-based) on ``model``, in place: SGD on
    the batches fdahpc's host draws for it. Returns the client's sample count."""
    from fdahpc.worker import BatchStream, local_steps

    stream = BatchStream(x[rows].numpy(), y[rows].numpy(), BATCH, seed, client)
    steps = max(1, math.ceil(len(rows) / BATCH))
    _skip(stream, job * steps)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    local_steps(model, stream, steps, opt.step, opt.zero_grad)
    return len(rows)


def _skip(stream, batches: int) -> None:
    """Advance ``stream`` by ``batches`` batches without gathering them: ``next`` draws a
    permutation whenever fewer than B rows are left, so after k batches exactly
    ceil(k·B/n) permutations were drawn and k·B rows consumed."""
    need = batches * stream.batch_size
    while len(stream.order) < need:
        stream.order = torch.cat([stream.order, torch.randperm(len(stream.y), generator=stream.gen)])
    stream.order = stream.order[need:]


def score_model(model, x_test, y_test) -> float:
    from fdahpc.evaluate import score

    return score(model, x_test, y_test).accuracy


# ----------------------------------------------------------------------------- the guard
def record_load() -> None:
    path = os.environ.get(LOADS_ENV)
    if path:
        with open(path, "a") as f:  # one short append per load: whole lines even from many processes
            f.write(f"{os.getpid()}\n")


def count_loads(path: str) -> tuple[int, int]:
    """(loads, distinct processes) recorded in ``path`` (0, 0 when none was)."""
    if not os.path.exists(path):
        return 0, 0
    with open(path) as f:
        pids = [line.strip() for line in f if line.strip()]
    return len(pids), len(set(pids))


def check_loads(path: str, workers: int, who: str) -> int:
    """Raise unless the training set was loaded at least once and at most once per worker
    process; returns the number of loads."""
    loads, procs = count_loads(path)
    if loads == 0:
        raise RuntimeError(f"{who}: no data load recorded in {path}; the guard cannot vouch for the cache")
    if loads > workers:
        raise RuntimeError(f"{who}: {loads} loads of the training set in {procs} processes for {workers} workers: the "
                           "per-worker data cache does not hold (a ClientApp defined in the launching script is shipped "
                           "by value with every message, its cache with it; import it from a module)")
    return loads
