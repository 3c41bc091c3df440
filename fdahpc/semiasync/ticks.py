"""``--clock ticks``: the FedQS authors' simulator, beside the event clock of :mod:`.clock`.

The FedQS paper's published numbers come from a simulator in the authors' code (as read
in GitHub bkjod/FedQS_, ``utils/afl_avg_our.py`` and its siblings) whose semantics differ
from fdahpc's event clock (:class:`.clock.VirtualClock`). This module is that simulator's
schedule, written from its description; nothing here communicates or trains.

One *tick* visits the clients in index order. Client i has a counter, 0 at the start, and
``r_i`` from the same seeded speed table as the event clock (``U{1..ratio}``):

- counter 0: the client trains *at once* on the newest global model (its result
  overwrites the client's previous one, which is lost if nobody read it yet) and the
  counter becomes 1;
- counter ``r_i``: the client queues an *entry* naming itself and the global version its
  job started from (its "start stamp"); the counter goes back to 0, so it trains again at
  the next tick: a job lasts ``r_i + 1`` ticks;
- otherwise the counter grows by one.

At the end of the tick, if at least K entries are queued, the first K are aggregated
once (a new global version) and the rest carried to later ticks. An entry does not hold
a result: it names a client, and aggregating it reads that client's *latest* result and
its feedback flag as they are at that moment. Consequences the run file records per
aggregated entry (:class:`Read`):

- ``staleness``: the real one, of the result actually read (current version minus the
  version the *read* job started from); a carried entry whose client has restarted reads
  a fresher result than its stamp says (``stamp_staleness``, the one the authors log);
- ``repeat``: the read job was aggregated before (the same result counted twice);
- jobs whose result is overwritten before any entry reads it are never aggregated
  (:meth:`TickClock.never_aggregated`).

The FedQS flags are set when a job starts and reset after every aggregation (the rule's
``reset_flags``), so a read result carries its flag only when no aggregation happened since
its job started: its real staleness is 0. Which clients start when, and which job each
aggregation reads, is a function of the speed table and K alone, so a run on this clock is
as independent of the number of ranks as on the event clock.

Not expressible here (refused with one line by the mode): ``--scenario`` (the simulator has
no churn or speed changes), ``--clients-per-round`` and ``--aggregate hosts`` (a carried
entry reads a result the server must hold).

Checkpoints: :meth:`TickClock.state_dict` is the whole schedule between two ticks (counters,
jobs and their start versions, the queue with its stamps, what was read), so a run resumed
at an aggregation continues the same ticks; the results an entry will read are the
server's stash, saved with the server (:mod:`.server`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .clock import SPEEDS, stream_rng

__all__ = ["CLOCKS", "Read", "TickClock", "tick_statistics"]

CLOCKS = ("events", "ticks")


@dataclass(frozen=True)
class Read:
    """One aggregated entry: whose result was read, and which job produced it."""

    client: int
    queued_job: int  # the job whose end queued the entry (0-based per client)
    read_job: int  # the client's latest job at aggregation: the result actually read
    stamp: int  # global version the queued job started from (the authors' start stamp)
    version: int  # global version the read job started from
    staleness: int  # aggregation's version - version (real staleness)
    stamp_staleness: int  # aggregation's version - stamp
    repeat: bool  # read_job was aggregated before (in an earlier entry, this round included)


class TickClock:
    """The authors' tick schedule. :meth:`step` runs one tick and says who starts a job
    (on the current version) and, when the tick ends in an aggregation, which K entries
    it reads; the version then grows by one.

    ``speeds``: an explicit ``r`` per client (tests); by default the event clock's seeded
    table, so both clocks see the same clients' speeds.
    """

    def __init__(self, num_clients: int, speed_ratio: int, seed: int, buffer_size: int,
                 speeds: np.ndarray | None = None) -> None:
        if num_clients < 1 or speed_ratio < 1:
            raise ValueError(f"clock: need num_clients >= 1 and speed_ratio >= 1, got {num_clients}, {speed_ratio}")
        if not 1 <= buffer_size <= num_clients:
            raise ValueError(f"--buffer {buffer_size}: must be in [1, --clients {num_clients}]")
        self.num_clients, self.ratio, self.seed, self.K = num_clients, int(speed_ratio), seed, buffer_size
        self.r = (stream_rng(seed, SPEEDS).integers(1, self.ratio + 1, num_clients) if speeds is None
                  else np.asarray(speeds, dtype=np.int64).copy())
        if self.r.shape != (num_clients,) or np.any(self.r < 1):
            raise ValueError(f"speeds: expected {num_clients} integers >= 1")
        self.active = np.ones(num_clients, dtype=bool)  # no churn on this clock; read by the server
        self.counter = np.zeros(num_clients, dtype=np.int64)
        self.jobs = np.zeros(num_clients, dtype=np.int64)  # jobs started per client
        self.started_at = np.full(num_clients, -1, dtype=np.int64)  # version the latest job started from
        self.job_version: list[list[int]] = [[] for _ in range(num_clients)]  # per client, per job
        self.last_read = np.full(num_clients, -1, dtype=np.int64)  # latest job aggregated per client
        self.read_jobs: set[tuple[int, int]] = set()
        self.queue: list[tuple[int, int, int]] = []  # (client, job, stamp), in queueing order
        self.tick = 0  # ticks completed
        self.version = 0

    def next_starts(self) -> list[int]:
        """The clients that start a job at the next tick (counter 0), in index order: the
        starts :meth:`step` will return."""
        return np.flatnonzero(self.counter == 0).tolist()

    def step(self) -> tuple[list[int], list[Read] | None]:
        """One tick: ``(clients that start a job on version self.version, in index order;
        the K entries aggregated at its end, or None)``."""
        starts = []
        for i in range(self.num_clients):
            if self.counter[i] == 0:
                starts.append(i)
                self.started_at[i] = self.version
                self.job_version[i].append(self.version)
                self.jobs[i] += 1
                self.counter[i] = 1
            elif self.counter[i] == self.r[i]:
                job = int(self.jobs[i]) - 1
                self.queue.append((i, job, self.job_version[i][job]))
                self.counter[i] = 0
            else:
                self.counter[i] += 1
        self.tick += 1
        if len(self.queue) < self.K:
            return starts, None
        taken, self.queue = self.queue[: self.K], self.queue[self.K :]
        reads = []
        for client, job, stamp in taken:
            latest = int(self.jobs[client]) - 1
            version = self.job_version[client][latest]
            reads.append(Read(client, job, latest, stamp, version, self.version - version, self.version - stamp,
                              repeat=bool(self.last_read[client] >= latest)))
            self.last_read[client] = latest
            self.read_jobs.add((client, latest))
        self.version += 1
        return starts, reads

    def on_round(self, rnd: int) -> list[int]:
        """No scenario fires on this clock (the server's hook)."""
        return []

    def state_dict(self) -> dict:
        """The schedule between two ticks, in plain values (:mod:`fdahpc.checkpoint`)."""
        return {"r": self.r.copy(), "counter": self.counter.copy(), "jobs": self.jobs.copy(),
                "started_at": self.started_at.copy(), "job_version": [list(v) for v in self.job_version],
                "last_read": self.last_read.copy(),
                "read_jobs": np.array(sorted(self.read_jobs), dtype=np.int64).reshape(-1, 2),
                "queue": [list(entry) for entry in self.queue], "tick": self.tick, "version": self.version}

    def load_state_dict(self, state: dict) -> None:
        r = np.asarray(state["r"], dtype=np.int64)
        if r.shape != (self.num_clients,):
            raise ValueError(f"checkpoint: a tick clock of {len(r)} clients, this run has {self.num_clients}; "
                             "resume with the same --clients")
        self.r, self.counter, self.jobs = r.copy(), state["counter"].copy(), state["jobs"].copy()
        self.started_at, self.last_read = state["started_at"].copy(), state["last_read"].copy()
        self.job_version = [[int(v) for v in versions] for versions in state["job_version"]]
        self.read_jobs = {(int(c), int(j)) for c, j in state["read_jobs"]}
        self.queue = [(int(c), int(j), int(stamp)) for c, j, stamp in state["queue"]]
        self.tick, self.version = int(state["tick"]), int(state["version"])

    def never_aggregated(self) -> tuple[int, int]:
        """``(jobs overwritten without being read, jobs overwritten)``: every job but each
        client's latest, which may still be read."""
        done = int(np.maximum(self.jobs - 1, 0).sum())
        read = sum(1 for c, j in self.read_jobs if j < self.jobs[c] - 1)
        return done - read, done


def tick_statistics(num_clients: int = 100, buffer_size: int = 10, speed_ratio: int = 50, rounds: int = 400,
                    seed: int = 0) -> dict[str, float]:
    """The schedule's figures over ``rounds`` aggregations (no training): mean real and
    start-stamp staleness of what is aggregated, the share of real staleness 0, of
    repeats, and of jobs never aggregated."""
    clock = TickClock(num_clients, speed_ratio, seed, buffer_size)
    reads: list[Read] = []
    while clock.version < rounds:
        reads += clock.step()[1] or []
    never, done = clock.never_aggregated()
    real = np.array([r.staleness for r in reads])
    return dict(staleness_mean=float(real.mean()), staleness_zero=float(np.mean(real == 0)),
                stamp_staleness_mean=float(np.mean([r.stamp_staleness for r in reads])),
                repeats=float(np.mean([r.repeat for r in reads])), never_aggregated=never / max(done, 1),
                ticks=clock.tick, jobs=int(clock.jobs.sum()))
