"""The server (rank 0): a buffer of client updates, consumed in the clock's order.

A round: the clock fills the buffer (:mod:`.rounds`: finished jobs in virtual-time order,
or the FedQS authors' ticks), the rule aggregates it where the updates are summed
(:mod:`.sums`: here, or with ``--aggregate hosts`` on the hosts, bit for bit the same
model), the server scores the new global model and records the round, and the new
version goes to the clients that start again (one message per host, sent without
blocking). Clients not aggregated keep training on the stale models they have. Updates
that arrive before their turn wait in the :class:`.inbox.Inbox`. The server names
neither clock nor place: it calls them through one interface each.

Because updates are consumed in the clock's order and each job's result depends only
on its start version and its client, the sequence of global models is a function of the
seed alone; hosts still compute in parallel, ahead of the server where they can.

Checkpoints (``--checkpoint-dir``), at the end of a round: the server sends ``CHECKPOINT``
to every host and stashes the updates that follow until each host answered ``READY``.
Every active client's pending result is then in the stash and every client on the hosts
idle, so server and hosts together hold a consistent state, which all ranks write with
the collective :func:`fdahpc.checkpoint.save`. Taking a checkpoint changes no result:
updates are still consumed in the clock's order, only received earlier. On the event
clock with a checkpoint folder the last round also sends the new model to its clients
(the clock has already scheduled their next jobs), so a run resumed with more
``--rounds`` continues exactly like a longer run; that send is counted in the last
round's bytes. On the tick clock every started job's result is in at a checkpoint and no
host holds a job: the clock's schedule (:meth:`.ticks.TickClock.state_dict`), the stash
(each client's latest result and flag, which carried entries and repeats read later) and
who was sent ahead are the tick path's whole state.

Run file rows per round (beside :mod:`fdahpc.metrics`' list): ``round/update_staleness``,
``round/n_samples``, ``round/feedback`` and ``round/G`` give, per aggregated update in the
order of ``round/clients`` (padded alike), what the rule's weights were computed from; on
the tick clock also ``round/stamp_staleness`` and ``round/repeat`` (:class:`.ticks.Read`).

Divergence: an update whose loss or payload holds a NaN or Inf, or a global model that
does, ends the run on every rank (``DIVERGED`` to the hosts, then
:class:`fdahpc.control.Diverged`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..comm import Communicator, Outbox
from ..control import Diverged
from ..decide import reached, round_plan
from ..evaluate import score
from ..metrics import convergence_metrics
from .fedqs import CLIENT_TYPES, speeds
from .inbox import Inbox
from .protocol import Down, DownMessage, Tag, Up, pack_down, peak_rss_bytes
from .rounds import EventRounds, Round, TickRounds
from .rules import BufferRule, Update
from .sums import OnHosts, OnServer

__all__ = ["Server", "convergence_metrics"]

log = logging.getLogger("fdahpc")


def _padded(values, size: int, fill, dtype) -> np.ndarray:
    """A run-file row of ``size`` entries: ``values``, then ``fill``."""
    row = np.full(size, fill, dtype=dtype)
    row[: len(values)] = values
    return row


@dataclass
class Server:
    comm: Communicator
    model: torch.nn.Module
    flat: object  # FlatParams(model, buffers=True): flat.state is the global model
    rule: BufferRule
    clock: EventRounds | TickRounds  # how a round's buffer fills (rounds.py)
    sums: OnServer | OnHosts  # where the updates are summed (sums.py)
    host_of: np.ndarray  # client -> rank hosting it
    x_test: torch.Tensor
    y_test: torch.Tensor
    buffer_size: int
    rounds: int
    eval_every: int = 1
    target_accuracy: float | None = None
    target_loss: float | None = None
    log_every: int = 10
    counts: np.ndarray = field(init=False)
    similarity: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.host_of)
        self.counts = np.zeros(n, dtype=np.int64)  # n(i): times client i was aggregated
        self.similarity = np.full(n, np.nan)  # latest s_i each client reported
        self.version = 0
        self.inbox = Inbox(self.comm, self.sums, self.clock, n)
        self.outbox = Outbox(self.comm)
        # Per rank: jobs, steps, peak RSS, the most models held at once (a host's versions in
        # memory; the server's stashed updates).
        self.host_totals = np.zeros((self.comm.world_size, 4), dtype=np.int64)
        # FedQS: Mod①'s reference, sent with each model over the parameters (the rule says what it is).
        self.last_step = self.rule.reference(self.flat.w) if self.rule.needs_client_state else None
        self.fresh = True  # False once a checkpoint was loaded: the first models went out long ago
        # What the loop accumulates (saved in checkpoints): accuracy per round, bytes of the
        # rounds, the result so far, the virtual time, wall seconds of earlier segments.
        self.accuracy: list[float] = []
        self.sent, self.now, self.wall_before = 0, 0, 0.0
        self.result = dict(final_accuracy=float("nan"), final_loss=float("nan"), rounds_to_target=-1,
                           virtual_time_to_target=-1)
        self._started = time.perf_counter()
        self.run_file = None

    # Messages -------------------------------------------------------------------
    def send_model(self, clients: list[int], done_at: dict[int, int], now: int) -> int:
        """The current global model to each host of ``clients``, without blocking; returns bytes sent."""
        f, f_bar = speeds(self.counts, self.clock.active)
        s_bar = self.rule.angle_mean(self.similarity[~np.isnan(self.similarity) & self.clock.active])
        # The outbox keeps it alive until every send of it completes. FedQS clients also get Mod①'s
        # reference (see __post_init__).
        snapshot = self.flat.state.clone() if self.last_step is None else torch.cat([self.flat.state, self.last_step])
        headers = {}
        for host in self.sums.hosts(clients):
            mine = [c for c in clients if self.host_of[c] == host]
            headers[host] = pack_down(DownMessage(Down.MODEL, self.version, now, f_bar, s_bar, tuple(mine),
                                                  tuple(float(f[c]) for c in mine), tuple(float(done_at[c]) for c in mine)))
        return self.sums.post_model(self.outbox, headers, snapshot)

    def _tell_hosts(self, kind: Down, clients_of: dict[int, list[int]]) -> None:
        for host, clients in clients_of.items():
            header = pack_down(DownMessage(kind, self.version, clients=tuple(clients)))
            self.outbox.post(header, host, Tag.DOWN_HEADER, "control")

    def _stop(self, kind: Down = Down.STOP) -> None:
        """STOP (or DIVERGED) every host, then drain what they still send until each says BYE."""
        hosts = list(range(1, self.comm.world_size))
        self._tell_hosts(kind, {h: [] for h in hosts})
        self.host_totals[0, 2:] = peak_rss_bytes(), self.sums.peak
        self.inbox.until_bye(hosts, self.host_totals)
        self.outbox.drain()

    def _quiesce(self) -> None:
        """CHECKPOINT every host and stash their updates until each answered READY."""
        hosts = list(range(1, self.comm.world_size))
        self._tell_hosts(Down.CHECKPOINT, {h: [] for h in hosts})
        self.inbox.until_ready(hosts, self.version)
        self.outbox.drain()

    # Checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything the server needs to continue bit for bit (taken after :meth:`_quiesce`)."""
        clock = self.clock.state_dict(self.inbox)  # the schedule, and who was sent their model ahead
        return {
            "state": self.flat.state.clone(), "version": self.version, "counts": self.counts.copy(),
            "similarity": self.similarity.copy(), "last_step": None if self.last_step is None else self.last_step.clone(),
            "rule": self.rule.state_dict(), "clock": clock["clock"], "stash": self.inbox.state_dict(),
            "progress": {"accuracy": list(self.accuracy), "sent": self.sent, "now": self.now,
                         "wall_seconds": self.elapsed(), "result": dict(self.result)},
            "ahead": clock["ahead"],
        }

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self.flat.state.copy_(state["state"])
        self.version = int(state["version"])
        self.counts, self.similarity = state["counts"].copy(), state["similarity"].copy()
        if self.last_step is not None:
            self.last_step.copy_(state["last_step"])
        self.rule.load_state_dict(state["rule"])
        self.clock.load_state_dict(state)
        self.inbox.load_state_dict(state["stash"])
        progress = state["progress"]
        self.accuracy, self.sent, self.now = list(progress["accuracy"]), int(progress["sent"]), int(progress["now"])
        self.wall_before, self.result = float(progress["wall_seconds"]), dict(progress["result"])
        self.fresh = False

    def elapsed(self) -> float:
        """Wall seconds of the run, earlier segments of a resumed run included."""
        return self.wall_before + time.perf_counter() - self._started

    # What the clocks call while they fill a round (rounds.py) --------------------------
    def admit(self, client: int, h: np.ndarray, payload: torch.Tensor | None, staleness: int,
              types: np.ndarray) -> Update:
        """Client's update as the buffer holds it; a NaN or Inf in it ends the run."""
        if not math.isfinite(h[Up.LOSS]) or not math.isfinite(h[Up.ABSMAX]):
            self._diverged(f"NaN or Inf in client {client}'s update from rank {int(self.host_of[client])} "
                           f"at round {self.version + 1}")
        if h[Up.TYPE] >= 0:
            types[int(h[Up.TYPE])] += 1
        return Update(client=client, version=int(h[Up.VERSION]), staleness=staleness, n_samples=int(h[Up.N_SAMPLES]),
                      payload=payload, similarity=float(h[Up.SIMILARITY]), feedback=bool(h[Up.FEEDBACK]),
                      G=float(h[Up.G]), absmax=float(h[Up.ABSMAX]))

    def note_angle(self, client: int, h: np.ndarray) -> None:
        """Client's reported similarity (or angle), where the rule counts it (NaN: none yet)."""
        if math.isfinite(h[Up.SIMILARITY]) and self.rule.keeps_angle(h[Up.TYPE]):
            self.similarity[client] = h[Up.SIMILARITY]

    # The loop -----------------------------------------------------------------------
    def _aggregate(self, buffer: list[Update]) -> np.ndarray:
        """A new global version from the buffer; returns the rule's weights."""
        buffer[:] = self.rule.at_aggregation(buffer, np.where(self.clock.active, self.similarity, np.nan))
        before = self.flat.w.clone() if self.last_step is not None else None
        with torch.no_grad():
            weights = self.sums.sum_(self.rule, self.flat, buffer, self.counts, self.version + 1, self.outbox)
        if before is not None:
            self.rule.advance_reference(self.last_step, before, self.flat.w)
        np.add.at(self.counts, [u.client for u in buffer], 1)
        self.version += 1
        return weights

    def _dropout(self) -> None:
        """Apply the scenarios of this round; tell the hosts of the clients that left."""
        left = self.clock.on_round(self.version)
        if not left:
            return
        by_host: dict[int, list[int]] = {}
        for c in left:
            by_host.setdefault(int(self.host_of[c]), []).append(c)
        self.inbox.drop(left)
        self._tell_hosts(Down.DROP, by_host)
        log.info("round %d: %d clients left, %d remain", self.version, len(left), int(self.clock.active.sum()))

    def _diverged(self, what: str) -> None:
        """End the run on every rank: DIVERGED to the hosts, then raise (run file: the caller)."""
        self._stop(Down.DIVERGED)
        raise Diverged(f"diverged: {what} (strategy {self.rule.name}); run file {self.run_file.path} flushed up to "
                       f"round {self.version}; lower --lr or resume from an earlier checkpoint")

    def run(self, run_file, stop=None, save=None, checkpoint_every: int | None = None) -> dict:
        """Serve ``rounds`` aggregations (or until the target accuracy or a stop signal);
        rows go to ``run_file``.

        ``stop``: a :class:`fdahpc.control.StopRequest`, checked after every round.
        ``save(round) -> folder | None``: the collective checkpoint write (``--checkpoint-dir``),
        called every ``checkpoint_every`` rounds, at the end and on a stop. The result says
        ``stopped_by`` (the signal, or None) and ``checkpoint`` (the last folder written).
        """
        try:
            return self._run(run_file, stop, save, checkpoint_every)
        finally:
            self.sums.close()

    def _run(self, run_file, stop, save, checkpoint_every) -> dict:
        self.run_file = run_file
        self._started = time.perf_counter()
        if self.fresh:
            self.sent += self.clock.begin(self)
        stopped_by, folder = None, None
        while self.version < self.rounds:
            due, met = self._round(run_file, save is not None, checkpoint_every)
            if stop is not None and stop.requested:
                stopped_by = stop.signal_name
            if save is not None and (due.checkpoint or met or stopped_by):
                self._quiesce()
                folder = save(self.version)
            if met or stopped_by:
                break
        self._stop()
        self.result.update(convergence_metrics(np.array(self.accuracy)), rounds_done=self.version, virtual_time=self.now,
                           comm_bytes=self.sent + self.clock.pending_bytes(self.inbox), wall_seconds=self.elapsed(),
                           stopped_at=self.version if stopped_by else -1, jobs_per_rank=self.host_totals[:, 0],
                           local_steps_per_rank=self.host_totals[:, 1], peak_rss_per_rank=self.host_totals[:, 2],
                           peak_rss_total=int(self.host_totals[:, 2].sum()),
                           models_held_peak_per_rank=self.host_totals[:, 3], **self.clock.totals())
        return dict(self.result, stopped_by=stopped_by, checkpoint=folder)

    def _round(self, run_file, checkpointing: bool, checkpoint_every: int | None):
        """One aggregation: fill, aggregate, send, score, record; returns (what is due, target met)."""
        types = np.zeros(len(CLIENT_TYPES), dtype=np.int64)
        rnd = self.clock.fill(self, types)
        weights = self._aggregate(rnd.buffer)
        if not bool(torch.isfinite(self.flat.state).all()):
            self._diverged(f"NaN or Inf in the global model at round {self.version}")
        self.now = rnd.now
        last = self.version == self.rounds
        self._dropout()
        round_bytes = rnd.bytes + self.clock.close(self, rnd, last, checkpointing)
        self.sent += round_bytes
        # Scored after the new version went out: the hosts train while the server evaluates.
        acc, loss = float("nan"), float("nan")
        due = round_plan(self.version, rounds=self.rounds, eval_every=self.eval_every,
                         checkpoint_every=checkpoint_every, checkpointing=checkpointing)
        if due.evaluate:
            s = score(self.model, self.x_test, self.y_test)
            acc, loss = s.accuracy, s.loss
            self.result.update(final_accuracy=acc, final_loss=loss)
        self.accuracy.append(acc)
        self._record(run_file, rnd, types, weights, acc, loss, round_bytes, last)
        met = reached(self.target_accuracy, self.target_loss, acc, loss)  # both when both are given
        if met:
            self.result.update(rounds_to_target=self.version, virtual_time_to_target=rnd.now)
        return due, met

    def _record(self, run_file, rnd: Round, types, weights, acc: float, loss: float, round_bytes: int,
                last: bool) -> None:
        """The round's rows; flushed and logged every ``log_every`` rounds and at the last."""
        buffer, headers, k = rnd.buffer, rnd.headers, self.buffer_size
        staleness = np.array([u.staleness for u in buffer])
        for name, value in (("round/version", self.version), ("round/virtual_time", rnd.now),
                            ("round/wall_seconds", self.elapsed()), ("round/accuracy", acc),
                            ("round/loss", loss), ("round/staleness_mean", float(staleness.mean())),
                            ("round/staleness_max", int(staleness.max())), ("round/types", types.copy()),
                            ("round/clients", _padded([u.client for u in buffer], k, -1, np.int64)),
                            ("round/weights", _padded(weights, k, np.nan, np.float64)),
                            # Per update, padded like round/clients: what the rule read.
                            ("round/update_staleness", _padded(staleness, k, -1, np.int64)),
                            ("round/n_samples", _padded([u.n_samples for u in buffer], k, -1, np.int64)),
                            ("round/feedback", _padded([int(u.feedback) for u in buffer], k, -1, np.int64)),
                            ("round/G", _padded([u.G for u in buffer], k, np.nan, np.float64)),
                            ("round/lr_mean", float(np.mean([h[Up.LR] for h in headers]))),
                            ("round/momentum_mean", float(np.mean([h[Up.MOMENTUM] for h in headers]))),
                            ("round/bytes", round_bytes)):
            run_file.append(name, value)
        for name, values in rnd.records.items():
            run_file.append(name, _padded(values, k, -1, np.int64))
        if self.version % self.log_every == 0 or last:
            run_file.flush()
            log.info("round %d  virtual time %d  accuracy %.4f  staleness mean %.1f max %d",
                     self.version, rnd.now, acc, staleness.mean(), staleness.max())
