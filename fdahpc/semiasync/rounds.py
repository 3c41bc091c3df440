"""How a round's buffer fills (``--clock``): the clock behind the server, one interface for both.

- :class:`EventRounds` (``events``, :mod:`.clock`): the server takes the next finished job
  from the clock, waits for that client's update (stashing any other that arrives first)
  and buffers it, until K are in (or no job is left in flight). After the aggregation the
  clients that start again get the new version, in the round's bytes.
- :class:`TickRounds` (``ticks``, :mod:`.ticks`, the FedQS authors' simulator): ticks run
  until one ends in an aggregation; each client starting a job gets the current model once
  its previous result is in. The aggregation first receives every started job's result,
  keeps each client's latest (the stash is never popped: a carried entry or a repeat reads
  it again), refreshes the angles from them and reads the K entries the clock names. The
  new version goes to the next tick's starters before the server scores it (``_send_ahead``:
  the hosts train while it evaluates, as on the event clock); that tick then runs in the
  next round, which counts those bytes. The last round sends nothing ahead, so its bytes
  are the same with or without ``--checkpoint-dir``; a run stopped by its target or a
  signal counts what it sent ahead in ``comm_bytes`` (:meth:`TickRounds.pending_bytes`).

What the server asks (:class:`.server.Server` names neither class): ``begin`` (a fresh
run's first models), ``fill`` (the next round's buffer), ``close`` (the sends after its
aggregation), ``pending_bytes``, ``totals`` (what the run's result adds),
``state_dict``/``load_state_dict`` (the checkpoint's ``clock`` and ``ahead`` entries) and
``active``/``on_round`` (churn). The clocks themselves communicate nothing; these classes
drive the server's messages in their order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .clock import VirtualClock
from .protocol import Up
from .rules import Update
from .ticks import TickClock

__all__ = ["EventRounds", "Round", "TickRounds"]


@dataclass
class Round:
    """One round's buffer as the rule reads it, with the headers it came with."""

    now: int  # virtual time (event clock) or tick (tick clock) of the aggregation
    buffer: list[Update]
    headers: list[np.ndarray]
    bytes: int  # sent and received for it so far
    records: dict[str, list[int]] = field(default_factory=dict)  # more per-update rows of the run file


class _Rounds:
    """What both clocks share: churn and the checkpoint's ``ahead`` entry."""

    clock: VirtualClock | TickClock
    ahead: tuple[int, ...] | list[int] = ()  # clients sent their next model ahead of their round (tick clock)

    @property
    def active(self) -> np.ndarray:
        return self.clock.active

    def on_round(self, rnd: int) -> list[int]:
        """Apply the scenarios that fire once round ``rnd`` has been aggregated: who left."""
        return self.clock.on_round(rnd)

    def pending_bytes(self, inbox) -> int:
        """Bytes sent and received that no round counted yet."""
        return 0

    def totals(self) -> dict:
        return {}

    def state_dict(self, inbox) -> dict:
        # the clients sent their model ahead (their results are in the stash now), and the
        # bytes the next round counts for them
        return {"clock": self.clock.state_dict(),
                "ahead": {"clients": list(self.ahead), "bytes": self.pending_bytes(inbox)}}

    def load_state_dict(self, state: dict) -> None:
        self.clock.load_state_dict(state["clock"])


class EventRounds(_Rounds):
    """``--clock events``: updates in virtual-time order, K to a round."""

    def __init__(self, clock: VirtualClock, buffer_size: int) -> None:
        self.clock, self.buffer_size = clock, buffer_size

    def begin(self, server) -> int:
        """Everyone's first job: the initial model out; returns the bytes sent."""
        first = self.clock.starters(None, 0)
        return server.send_model(first, {c: self.clock.start(c, 0) for c in first}, 0)

    def fill(self, server, types: np.ndarray) -> Round:
        buffer, headers = [], []
        while len(buffer) < self.buffer_size and (not buffer or self.clock.in_flight > 0):
            event = self.clock.pop()
            if event is None:
                raise RuntimeError("no client left to wait for; lower the dropout fraction")
            now, client = event
            header, payload = server.inbox.take(client)
            buffer.append(server.admit(client, header, payload, server.version - int(header[Up.VERSION]), types))
            server.note_angle(client, header)
            headers.append(header)
        # K headers, and the K payloads or (--aggregate hosts) the one reduced int64 vector.
        return Round(now, buffer, headers, sum(h.nbytes for h in headers) + server.sums.received_bytes(buffer))

    def close(self, server, rnd: Round, last: bool, checkpointing: bool) -> int:
        """The new version to the clients that start again; returns the bytes sent. The last
        round sends too when the run can be continued from its checkpoint."""
        again = self.clock.starters([u.client for u in rnd.buffer], server.version)
        next_done = {c: self.clock.start(c, rnd.now) for c in again}
        return server.send_model(again, next_done, rnd.now) if not last or checkpointing else 0


class TickRounds(_Rounds):
    """``--clock ticks``: the authors' tick schedule."""

    def __init__(self, clock: TickClock) -> None:
        self.clock = clock
        # The next tick's starters, sent their model before the server scored the version
        # (_send_ahead), and those bytes; the next round counts them (saved in checkpoints).
        self.ahead: list[int] = []
        self._ahead_bytes = 0

    def begin(self, server) -> int:
        return 0  # the first tick starts everyone

    def fill(self, server, types: np.ndarray) -> Round:
        """Ticks, sending each started job its model, until one ends in an aggregation."""
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
                    server.inbox.settle(c)
                sent += self._start_jobs(server, starts, self.clock.tick)
            if reads is not None:
                break
        # Every started job's result is in: the angles and flags are the ones of each
        # client's latest job, whatever the hosts' timing (so the run is the seed's alone).
        server.inbox.settle()
        for c, h in server.inbox.stash.items():
            server.note_angle(c, h)
        buffer, headers = [], []
        for rd in reads:
            h, payload = server.inbox.latest(rd.client)
            if int(h[Up.VERSION]) != rd.version:
                raise RuntimeError(f"client {rd.client}: result of version {int(h[Up.VERSION])} where the tick clock "
                                   f"expects {rd.version}")
            buffer.append(server.admit(rd.client, h, payload, rd.staleness, types))
            headers.append(h)
        received, server.inbox.received = server.inbox.received, 0
        # per update: the start stamp's staleness, and whether the job was aggregated before
        records = {"round/stamp_staleness": [r.stamp_staleness for r in reads],
                   "round/repeat": [int(r.repeat) for r in reads]}
        return Round(self.clock.tick, buffer, headers, sent + received, records)

    def close(self, server, rnd: Round, last: bool, checkpointing: bool) -> int:
        """The round's sends and every result received are counted; the next tick's starts go out now."""
        if not last:
            self._send_ahead(server)
        return 0

    def _send_ahead(self, server) -> None:
        """The new version to the clients that start at the next tick (every client whose
        counter is 0, :meth:`.TickClock.next_starts`) now, before the server scores it, so
        that the hosts train while the server evaluates, as on the event clock. The models
        and headers are the ones the tick itself would send (the same state: no result is
        read in between), so the run is the same; the bytes count in the next round, the tick's own."""
        self.ahead = self.clock.next_starts()
        if self.ahead:
            self._ahead_bytes = self._start_jobs(server, self.ahead, self.clock.tick + 1)

    def _start_jobs(self, server, clients: list[int], tick: int) -> int:
        """The current version to ``clients`` for their jobs of tick ``tick`` (1-based);
        returns the bytes sent."""
        # the tick each job's entry will be queued at: the order a host computes its jobs in
        done = {c: tick - 1 + int(self.clock.r[c]) for c in clients}
        sent = server.send_model(clients, done, tick)
        server.inbox.outstanding[clients] = True
        return sent

    def pending_bytes(self, inbox) -> int:
        """The jobs sent ahead, and the results received since the last round."""
        return self._ahead_bytes + inbox.received

    def totals(self) -> dict:
        never, overwritten = self.clock.never_aggregated()
        return dict(jobs_never_aggregated=never, jobs_overwritten=overwritten)

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        ahead = state.get("ahead", {"clients": [], "bytes": 0})
        self.ahead, self._ahead_bytes = [int(c) for c in ahead["clients"]], int(ahead["bytes"])
