"""The server (rank 0): a buffer of client updates, consumed in virtual-time order.

The loop: take the next finished job from the clock → wait for that client's update
(stashing any other update that arrives first) → buffer it → when K updates are in,
aggregate with the rule, score the new global model, record the round, and send the new
version to the clients just aggregated (one message per host, sent without blocking).
Clients not aggregated keep training on the stale models they have.

With ``--aggregate hosts`` only the headers travel to the server: it fills the buffer from
them, takes the rule's coefficients (:meth:`.rules.BufferRule.combination`), tells every
host its members' coefficients (``COMBINE``), and one exact sum-reduction of the hosts'
fixed-point partial sums (:mod:`.exact`) gives the new model, which one broadcast sends
back; the model is the one the server would have computed, bit for bit.

Because updates are consumed in the clock's order and each job's result depends only
on its start version and its client, the sequence of global models is a function of the
seed alone; hosts still compute in parallel, ahead of the server where they can.

Checkpoints (``--checkpoint-dir``), at the end of a round: the server sends ``CHECKPOINT``
to every host and stashes the updates that follow until each host answered ``READY``.
Every active client's pending result is then in the stash and every client on the hosts
idle, so server and hosts together hold a consistent state, which all ranks write with
the collective :func:`fdahpc.checkpoint.save`. Taking a checkpoint changes no result:
updates are still consumed in the clock's order, only received earlier. With a
checkpoint folder the last round also sends the new model to its clients (the clock has
already scheduled their next jobs), so a run resumed with more ``--rounds`` continues
exactly like a longer run; that send is counted in the last round's bytes.

With ``--clock ticks`` (:mod:`.ticks`, the FedQS authors' simulator) the clock steps tick
by tick instead: each client starting a job gets the current model once its previous
result is in; an aggregation first receives every started job's result, keeps each
client's latest (the stash is never popped: a carried entry or a repeat reads it again),
refreshes the angles from them and reads the K entries the clock names. The new version
goes to the next tick's starters before the server scores it (``_send_ahead``: the hosts
train while it evaluates, as on the event clock); the tick then runs in the next round,
which counts those bytes. At a checkpoint every started job's result is in and no host
holds a job: the clock's schedule (:meth:`.ticks.TickClock.state_dict`), the stash (each
client's latest result and flag, which carried entries and repeats read later) and who was
sent ahead are the tick path's whole state. The last round sends nothing ahead, so its
bytes are the same with or without ``--checkpoint-dir``; a run stopped by its target or a
signal counts what it sent ahead in ``comm_bytes``.

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

from ..comm import ANY, Communicator, Outbox
from ..control import Diverged
from ..decide import reached, round_plan
from ..evaluate import score
from ..metrics import convergence_metrics
from .clock import VirtualClock
from .ticks import TickClock
from .fedqs import CLIENT_TYPES, speeds
from .exact import to_float
from .protocol import UP_LEN, Down, DownMessage, Tag, Up, UpKind, pack_down, peak_rss_bytes
from .rules import BufferRule, Update
from .store import ModelStore, capacity

__all__ = ["Server", "convergence_metrics"]

log = logging.getLogger("fdahpc")


@dataclass
class _Incoming:
    header: np.ndarray
    payload: torch.Tensor


@dataclass
class Server:
    comm: Communicator
    model: torch.nn.Module
    flat: object  # FlatParams(model, buffers=True): flat.state is the global model
    rule: BufferRule
    clock: VirtualClock | TickClock
    host_of: np.ndarray  # client -> rank hosting it
    x_test: torch.Tensor
    y_test: torch.Tensor
    buffer_size: int
    rounds: int
    eval_every: int = 1
    target_accuracy: float | None = None
    target_loss: float | None = None
    log_every: int = 10
    model_cache_gb: float | None = None  # see store.py: the stash beyond it waits on disk
    host_sums: bool = False  # --aggregate hosts: payloads stay on the hosts, which add their members' terms
    spill_dir: str | None = None
    counts: np.ndarray = field(init=False)
    similarity: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.host_of)
        self.counts = np.zeros(n, dtype=np.int64)  # n(i): times client i was aggregated
        self.similarity = np.full(n, np.nan)  # latest s_i each client reported
        self.version = 0
        # Updates that arrived before their turn: headers here, payloads in the store.
        self.stash: dict[int, np.ndarray] = {}
        self.stash_models = ModelStore(capacity(self.model_cache_gb, self.flat.state.numel()), self.spill_dir,
                                       lambda: {c: h[Up.DONE_AT] for c, h in self.stash.items()},
                                       tag="server-")
        self.outbox = Outbox(self.comm)
        # Per rank: jobs, steps, peak RSS, the most models held at once (a host's versions in
        # memory; the server's stashed updates).
        self.host_totals = np.zeros((self.comm.world_size, 4), dtype=np.int64)
        # FedQS: Mod①'s reference, sent with each model over the parameters (the rule says what it is).
        self.last_step = self.rule.reference(self.flat.w) if self.rule.needs_client_state else None
        self.fresh = True  # False once a checkpoint was loaded: the first models went out long ago
        # --clock ticks (ticks.py): the clock says who starts and which results an aggregation
        # reads; the server keeps every client's latest result (the stash, never popped)
        # and knows which clients have a job whose result has not arrived yet.
        self.ticks = isinstance(self.clock, TickClock)
        self.outstanding = np.zeros(n, dtype=bool)
        self._received = 0  # bytes of results received and not yet counted in a round (tick clock)
        # Tick clock: the next tick's starters, sent their model before the server scored the
        # version (_send_ahead), and those bytes; the next round counts them (saved in checkpoints).
        self.ahead: list[int] = []
        self._ahead_bytes = 0
        # What the loop accumulates (saved in checkpoints): accuracy per round, bytes of the
        # rounds, the result so far, the virtual time, wall seconds of earlier segments.
        self.accuracy: list[float] = []
        self.sent = 0
        self.now = 0
        self.wall_before = 0.0
        self.result = dict(final_accuracy=float("nan"), final_loss=float("nan"), rounds_to_target=-1,
                           virtual_time_to_target=-1)
        self._started = time.perf_counter()
        self.run_file = None

    # Messages -------------------------------------------------------------------
    def _receive_one(self) -> tuple[int, np.ndarray, torch.Tensor | None]:
        """The next up message: (source, header, payload); no payload for BYE and READY,
        nor for any update with ``--aggregate hosts``."""
        header = np.empty(UP_LEN)
        st = self.comm.probe(ANY, Tag.UP_HEADER)  # waits without spinning a core
        self.comm.recv_(header, st.source, Tag.UP_HEADER)
        if UpKind(int(header[Up.KIND])) != UpKind.UPDATE or self.host_sums:
            return st.source, header, None
        payload = torch.from_numpy(np.empty(self.flat.state.numel(), dtype=np.float32))
        self.comm.recv_(payload, st.source, Tag.UP_PAYLOAD)
        return st.source, header, payload

    def _take(self, client: int) -> _Incoming:
        """Client's update, from the stash or from the wire (stashing others meanwhile)."""
        while client not in self.stash:
            source, header, payload = self._receive_one()
            if UpKind(int(header[Up.KIND])) != UpKind.UPDATE:
                raise RuntimeError(f"rank {source} sent {UpKind(int(header[Up.KIND])).name} while the server still waits for client {client}")
            self._keep(header, payload)
        return _Incoming(self.stash.pop(client), None if self.host_sums else self.stash_models.pop(client))

    def _keep(self, header: np.ndarray, payload: torch.Tensor) -> None:
        sender = int(header[Up.CLIENT])
        self.outstanding[sender] = False
        self._received += header.nbytes + (0 if payload is None else payload.numel() * 4)
        if self.clock.active[sender]:  # updates of clients that left are dropped here
            self.stash[sender] = header
            if payload is not None:
                self.stash_models.put(sender, payload)

    def _send_model(self, clients: list[int], done_at: dict[int, int], now: int) -> int:
        """The current global model to each host of ``clients``, without blocking; returns bytes sent."""
        f, f_bar = speeds(self.counts, self.clock.active)
        s_bar = self.rule.angle_mean(self.similarity[~np.isnan(self.similarity) & self.clock.active])
        # The outbox keeps it alive until every send of it completes. FedQS clients also get Mod①'s
        # reference (see __post_init__).
        snapshot = self.flat.state.clone() if self.last_step is None else torch.cat([self.flat.state, self.last_step])
        sent = 0
        hosts = range(1, self.comm.world_size) if self.host_sums else sorted({int(self.host_of[c]) for c in clients})
        for host in hosts:
            mine = [c for c in clients if self.host_of[c] == host]
            header = pack_down(DownMessage(Down.MODEL, self.version, now, f_bar, s_bar, tuple(mine),
                                           tuple(float(f[c]) for c in mine), tuple(float(done_at[c]) for c in mine)))
            self.outbox.post(header, host, Tag.DOWN_HEADER, "control")
            sent += header.nbytes
            if not self.host_sums:
                self.outbox.post(snapshot, host, Tag.DOWN_PAYLOAD, "model")
                sent += snapshot.numel() * 4
        if self.host_sums:  # one broadcast, joined by every host when it reads its header
            self.comm.bcast_(snapshot, "model")
            sent += snapshot.numel() * 4
        return sent

    def _tell_hosts(self, kind: Down, clients_of: dict[int, list[int]]) -> None:
        for host, clients in clients_of.items():
            header = pack_down(DownMessage(kind, self.version, clients=tuple(clients)))
            self.outbox.post(header, host, Tag.DOWN_HEADER, "control")

    def _stop(self, kind: Down = Down.STOP) -> None:
        """STOP (or DIVERGED) every host, then drain what they still send until each says BYE."""
        hosts = sorted(set(range(1, self.comm.world_size)))
        self._tell_hosts(kind, {h: [] for h in hosts})
        waiting = set(hosts)
        self.host_totals[0, 2:] = peak_rss_bytes(), self.stash_models.peak
        while waiting:
            source, header, payload = self._receive_one()
            if UpKind(int(header[Up.KIND])) == UpKind.BYE:
                waiting.discard(source)
                self.host_totals[source] = header[[Up.JOBS, Up.STEPS, Up.PEAK_RSS, Up.HELD_PEAK]]
        self.outbox.drain()

    def _quiesce(self) -> None:
        """CHECKPOINT every host and stash their updates until each answered READY."""
        hosts = list(range(1, self.comm.world_size))
        self._tell_hosts(Down.CHECKPOINT, {h: [] for h in hosts})
        waiting = set(hosts)
        while waiting:
            source, header, payload = self._receive_one()
            kind = UpKind(int(header[Up.KIND]))
            if kind == UpKind.READY:
                waiting.discard(source)
            elif kind == UpKind.UPDATE:
                self._keep(header, payload)
            else:
                raise RuntimeError(f"rank {source} said goodbye during the checkpoint of round {self.version}")
        self.outbox.drain()

    # Checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything the server needs to continue bit for bit (taken after :meth:`_quiesce`)."""
        if self.outstanding.any():  # the tick clock settles every job before it aggregates
            raise RuntimeError(f"server: state_dict with results outstanding (clients "
                               f"{np.flatnonzero(self.outstanding)[:5].tolist()})")
        clients = list(self.stash)
        return {
            "state": self.flat.state.clone(), "version": self.version, "counts": self.counts.copy(),
            "similarity": self.similarity.copy(), "last_step": None if self.last_step is None else self.last_step.clone(),
            "rule": self.rule.state_dict(), "clock": self.clock.state_dict(),
            "stash": {"clients": clients, "headers": [self.stash[c].copy() for c in clients],
                      "payloads": [None if self.host_sums else self.stash_models[c] for c in clients]},
            "progress": {"accuracy": list(self.accuracy), "sent": self.sent, "now": self.now,
                         "wall_seconds": self.elapsed(), "result": dict(self.result)},
            # tick clock: the next tick's starters whose model went out (their results are in
            # the stash now), and the bytes the next round counts for them
            "ahead": {"clients": list(self.ahead), "bytes": self._pending_bytes()},
        }

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self.flat.state.copy_(state["state"])
        self.version = int(state["version"])
        self.counts, self.similarity = state["counts"].copy(), state["similarity"].copy()
        if self.last_step is not None:
            self.last_step.copy_(state["last_step"])
        self.rule.load_state_dict(state["rule"])
        self.clock.load_state_dict(state["clock"])
        stash = state["stash"]
        for c, h, p in zip(stash["clients"], stash["headers"], stash["payloads"]):
            self.stash[int(c)] = np.asarray(h, dtype=np.float64)
            if p is not None:
                self.stash_models.put(int(c), p)
        progress = state["progress"]
        self.accuracy, self.sent, self.now = list(progress["accuracy"]), int(progress["sent"]), int(progress["now"])
        self.wall_before, self.result = float(progress["wall_seconds"]), dict(progress["result"])
        ahead = state.get("ahead", {"clients": [], "bytes": 0})
        self.ahead, self._ahead_bytes, self._received = [int(c) for c in ahead["clients"]], int(ahead["bytes"]), 0
        self.fresh = False

    def _pending_bytes(self) -> int:
        """Tick clock: bytes sent and received that no round counted yet (the jobs sent ahead)."""
        return self._ahead_bytes + self._received if self.ticks else 0

    def elapsed(self) -> float:
        """Wall seconds of the run, earlier segments of a resumed run included."""
        return self.wall_before + time.perf_counter() - self._started

    # The loop -----------------------------------------------------------------------
    def _next_update(self, version: int, types: np.ndarray) -> tuple[int, Update, np.ndarray]:
        """The next finished job in virtual-time order: (its time, the update, its header)."""
        event = self.clock.pop()
        if event is None:
            raise RuntimeError("no client left to wait for; lower the dropout fraction")
        now, client = event
        msg = self._take(client)
        h = msg.header
        if not math.isfinite(h[Up.LOSS]) or not math.isfinite(h[Up.ABSMAX]):
            self._diverged(f"NaN or Inf in client {client}'s update from rank {int(self.host_of[client])} "
                           f"at round {version + 1}")
        if h[Up.TYPE] >= 0:
            types[int(h[Up.TYPE])] += 1
        if math.isfinite(h[Up.SIMILARITY]) and self.rule.keeps_angle(h[Up.TYPE]):  # NaN: none yet
            self.similarity[client] = h[Up.SIMILARITY]
        update = Update(client=client, version=int(h[Up.VERSION]), staleness=version - int(h[Up.VERSION]),
                        n_samples=int(h[Up.N_SAMPLES]), payload=msg.payload, similarity=float(h[Up.SIMILARITY]),
                        feedback=bool(h[Up.FEEDBACK]), G=float(h[Up.G]), absmax=float(h[Up.ABSMAX]))
        return now, update, h

    def _settle(self, client: int | None = None) -> None:
        """Tick clock: receive until ``client``'s latest job (None: every started job) has
        its result in the stash. A host holds one pending job per client, so a client's
        next job is sent only once its last result is in."""
        while self.outstanding[client] if client is not None else self.outstanding.any():
            source, header, payload = self._receive_one()
            if UpKind(int(header[Up.KIND])) != UpKind.UPDATE:
                raise RuntimeError(f"rank {source} sent {UpKind(int(header[Up.KIND])).name} while the server still "
                                   f"waits for a result")
            self._keep(header, payload)

    def _tick_round(self, types: np.ndarray) -> tuple[int, list[Update], list[np.ndarray], list, int]:
        """Tick clock: run ticks, sending each started job its model, until one ends in an
        aggregation; returns (the tick, the buffer as read, its headers, the clock's reads,
        the bytes sent and received meanwhile)."""
        sent, ahead, self.ahead, self._ahead_bytes = self._ahead_bytes, self.ahead, [], 0
        while True:
            starts, reads = self.clock.step()
            if ahead:  # this tick's starters got their model in the last round (_send_ahead)
                if starts != ahead:
                    raise RuntimeError(f"tick {self.clock.tick}: clients {starts[:5]} start where {ahead[:5]} "
                                       "were sent their model ahead of it")
                starts, ahead = [], []
            if starts:
                for c in starts:
                    self._settle(c)
                sent += self._start_jobs(starts, self.clock.tick)
            if reads is not None:
                break
        # Every started job's result is in: the angles and flags are the ones of each
        # client's latest job, whatever the hosts' timing (so the run is the seed's alone).
        self._settle()
        for c, h in self.stash.items():
            if math.isfinite(h[Up.SIMILARITY]) and self.rule.keeps_angle(h[Up.TYPE]):
                self.similarity[c] = h[Up.SIMILARITY]
        buffer, headers = [], []
        for rd in reads:
            h = self.stash[rd.client]
            if int(h[Up.VERSION]) != rd.version:
                raise RuntimeError(f"client {rd.client}: result of version {int(h[Up.VERSION])} where the tick clock "
                                   f"expects {rd.version}")
            if not math.isfinite(h[Up.LOSS]) or not math.isfinite(h[Up.ABSMAX]):
                self._diverged(f"NaN or Inf in client {rd.client}'s update from rank {int(self.host_of[rd.client])} "
                               f"at round {self.version + 1}")
            if h[Up.TYPE] >= 0:
                types[int(h[Up.TYPE])] += 1
            buffer.append(Update(client=rd.client, version=rd.version, staleness=rd.staleness,
                                 n_samples=int(h[Up.N_SAMPLES]), payload=self.stash_models[rd.client],
                                 similarity=float(h[Up.SIMILARITY]), feedback=bool(h[Up.FEEDBACK]), G=float(h[Up.G]),
                                 absmax=float(h[Up.ABSMAX])))
            headers.append(h)
        received, self._received = self._received, 0
        return self.clock.tick, buffer, headers, reads, sent + received

    def _send_ahead(self) -> None:
        """Tick clock: the new version to the clients that start at the next tick (every
        client whose counter is 0, :meth:`.TickClock.next_starts`) now, before the server
        scores it, so that the hosts train while the server evaluates, as on the event clock.
        The models and headers are the ones the tick itself would send (the same state: no
        result is read in between), so the run is the same; the bytes count in the next
        round, the tick's own."""
        self.ahead = self.clock.next_starts()
        if self.ahead:
            self._ahead_bytes = self._start_jobs(self.ahead, self.clock.tick + 1)

    def _start_jobs(self, clients: list[int], tick: int) -> int:
        """Tick clock: the current version to ``clients`` for their jobs of tick ``tick``
        (1-based); returns the bytes sent."""
        # the tick each job's entry will be queued at: the order a host computes its jobs in
        done = {c: tick - 1 + int(self.clock.r[c]) for c in clients}
        sent = self._send_model(clients, done, tick)
        self.outstanding[clients] = True
        return sent

    def _aggregate(self, buffer: list[Update]) -> np.ndarray:
        """A new global version from the buffer; returns the rule's weights."""
        buffer[:] = self.rule.at_aggregation(buffer, np.where(self.clock.active, self.similarity, np.nan))
        before = self.flat.w.clone() if self.last_step is not None else None
        with torch.no_grad():
            if self.host_sums:
                weights = self._sum_on_hosts(buffer)
            else:
                weights = self.rule.aggregate_(self.flat.state, buffer, self.counts, len(self.host_of),
                                               params=self.flat.dim)
        if before is not None:
            self.rule.advance_reference(self.last_step, before, self.flat.w)
        np.add.at(self.counts, [u.client for u in buffer], 1)
        self.version += 1
        return weights

    def _sum_on_hosts(self, buffer: list[Update]) -> np.ndarray:
        """``--aggregate hosts``: the rule's coefficients from the headers to every host,
        which adds its members' terms; one exact sum-reduction gives the new model, equal
        bit for bit to the server's own sum (:mod:`.exact`)."""
        d, old = self.flat.dim, self.flat.state.numpy()
        c = self.rule.combination(buffer, self.counts, len(self.host_of), d)
        acc, bits = c.start(old, d, [u.absmax for u in buffer])
        for host in range(1, self.comm.world_size):
            mine = [k for k, u in enumerate(buffer) if self.host_of[u.client] == host]
            header = pack_down(DownMessage(Down.COMBINE, self.version + 1, bits, clients=tuple(buffer[k].client for k in mine),
                                           speeds=tuple(float(c.params[k]) for k in mine),
                                           done_at=tuple(float(c.stats[k]) for k in mine)))
            self.outbox.post(header, host, Tag.DOWN_HEADER, "control")
        self.comm.reduce_sum_(acc, "model")
        self.flat.state.copy_(torch.from_numpy(to_float(acc, bits)))
        return c.weights

    def _dropout(self) -> None:
        """Apply the scenarios of this round; tell the hosts of the clients that left."""
        left = self.clock.on_round(self.version)
        if not left:
            return
        by_host: dict[int, list[int]] = {}
        for c in left:
            by_host.setdefault(int(self.host_of[c]), []).append(c)
            if self.stash.pop(c, None) is not None:
                self.stash_models.discard(c)
        self._tell_hosts(Down.DROP, by_host)
        log.info("round %d: %d clients left, %d remain", self.version, len(left), int(self.clock.active.sum()))

    def _padded(self, values, fill, dtype) -> np.ndarray:
        row = np.full(self.buffer_size, fill, dtype=dtype)
        row[: len(values)] = values
        return row

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
            self.stash_models.close()

    def _run(self, run_file, stop, save, checkpoint_every) -> dict:
        self.run_file = run_file
        self._started = time.perf_counter()
        if self.fresh and not self.ticks:  # on the tick clock the first tick starts everyone
            first = self.clock.starters(None, 0)
            self.sent += self._send_model(first, {c: self.clock.start(c, 0) for c in first}, 0)
        buffer: list[Update] = []
        types = np.zeros(len(CLIENT_TYPES), dtype=np.int64)
        headers: list[np.ndarray] = []
        result, stopped_by, folder = self.result, None, None
        while self.version < self.rounds:
            if self.ticks:
                now, buffer, headers, reads, tick_bytes = self._tick_round(types)
            else:
                now, update, header = self._next_update(self.version, types)
                buffer.append(update)
                headers.append(header)
                if len(buffer) < self.buffer_size and self.clock.in_flight > 0:
                    continue
            weights = self._aggregate(buffer)
            if not bool(torch.isfinite(self.flat.state).all()):
                self._diverged(f"NaN or Inf in the global model at round {self.version}")
            self.now = now
            last = self.version == self.rounds
            self._dropout()
            ids = [u.client for u in buffer]
            if self.ticks:  # the round's sends and every result received; the next tick's starts go out now
                round_bytes = tick_bytes
                if not last:
                    self._send_ahead()
            else:
                again = self.clock.starters(ids, self.version)
                next_done = {c: self.clock.start(c, now) for c in again}
                # K headers, and the K payloads or (--aggregate hosts) the one reduced int64 vector.
                received = sum(h.nbytes for h in headers) + (8 * self.flat.state.numel() if self.host_sums
                                                             else sum(u.payload.numel() * 4 for u in buffer))
                # The last round sends too when the run can be continued from its checkpoint.
                round_bytes = received + (self._send_model(again, next_done, now) if not last or save is not None else 0)
            self.sent += round_bytes
            # Scored after the new version went out: the hosts train while the server evaluates.
            acc, loss = float("nan"), float("nan")
            due = round_plan(self.version, rounds=self.rounds, eval_every=self.eval_every,
                             checkpoint_every=checkpoint_every, checkpointing=save is not None)
            if due.evaluate:
                s = score(self.model, self.x_test, self.y_test)
                acc, loss = s.accuracy, s.loss
                result.update(final_accuracy=acc, final_loss=loss)
            self.accuracy.append(acc)
            staleness = np.array([u.staleness for u in buffer])
            for name, value in (("round/version", self.version), ("round/virtual_time", now),
                                ("round/wall_seconds", self.elapsed()), ("round/accuracy", acc),
                                ("round/loss", loss), ("round/staleness_mean", float(staleness.mean())),
                                ("round/staleness_max", int(staleness.max())), ("round/types", types.copy()),
                                ("round/clients", self._padded(ids, -1, np.int64)),
                                ("round/weights", self._padded(weights, np.nan, np.float64)),
                                # Per update, padded like round/clients: what the rule read.
                                ("round/update_staleness", self._padded(staleness, -1, np.int64)),
                                ("round/n_samples", self._padded([u.n_samples for u in buffer], -1, np.int64)),
                                ("round/feedback", self._padded([int(u.feedback) for u in buffer], -1, np.int64)),
                                ("round/G", self._padded([u.G for u in buffer], np.nan, np.float64)),
                                ("round/lr_mean", float(np.mean([h[Up.LR] for h in headers]))),
                                ("round/momentum_mean", float(np.mean([h[Up.MOMENTUM] for h in headers]))),
                                ("round/bytes", round_bytes)):
                run_file.append(name, value)
            if self.ticks:  # per update: the start stamp's staleness, and whether the job was aggregated before
                run_file.append("round/stamp_staleness", self._padded([r.stamp_staleness for r in reads], -1, np.int64))
                run_file.append("round/repeat", self._padded([int(r.repeat) for r in reads], -1, np.int64))
            if self.version % self.log_every == 0 or last:
                run_file.flush()
                log.info("round %d  virtual time %d  accuracy %.4f  staleness mean %.1f max %d",
                         self.version, now, acc, staleness.mean(), staleness.max())
            buffer, headers, types = [], [], np.zeros_like(types)
            met = reached(self.target_accuracy, self.target_loss, acc, loss)  # both when both are given
            if met:
                result.update(rounds_to_target=self.version, virtual_time_to_target=now)
            if stop is not None and stop.requested:
                stopped_by = stop.signal_name
            if save is not None and (due.checkpoint or met or stopped_by):
                self._quiesce()
                folder = save(self.version)
            if met or stopped_by:
                break
        self._stop()
        result.update(convergence_metrics(np.array(self.accuracy)), rounds_done=self.version, virtual_time=self.now,
                      comm_bytes=self.sent + self._pending_bytes(), wall_seconds=self.elapsed(),
                      stopped_at=self.version if stopped_by else -1,
                      jobs_per_rank=self.host_totals[:, 0], local_steps_per_rank=self.host_totals[:, 1],
                      peak_rss_per_rank=self.host_totals[:, 2], peak_rss_total=int(self.host_totals[:, 2].sum()),
                      models_held_peak_per_rank=self.host_totals[:, 3])
        if self.ticks:
            never, overwritten = self.clock.never_aggregated()
            result.update(jobs_never_aggregated=never, jobs_overwritten=overwritten)
        return dict(result, stopped_by=stopped_by, checkpoint=folder)
