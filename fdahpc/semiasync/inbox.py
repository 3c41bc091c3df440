"""What the hosts send the server: updates, kept until the round that reads them, and the
answers to CHECKPOINT (``READY``) and STOP (``BYE``).

An update that arrives before its turn waits here: its header in :attr:`Inbox.stash`, its
payload where the updates are summed (:mod:`.sums`; with ``--aggregate hosts`` on its
host). The event clock takes each update out when its turn comes; the tick clock reads
each client's latest result, maybe again, and never takes it out (:mod:`.rounds`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm import ANY, Communicator
from .protocol import UP_LEN, Tag, Up, UpKind

__all__ = ["Inbox"]


class Inbox:
    """Messages from the hosts. ``sums``: where payloads go (:mod:`.sums`); ``clock.active``:
    who is still present (updates of clients that left are dropped)."""

    def __init__(self, comm: Communicator, sums, clock, num_clients: int) -> None:
        self.comm, self.sums, self.clock = comm, sums, clock
        self.stash: dict[int, np.ndarray] = {}  # client -> header of its kept update
        self.outstanding = np.zeros(num_clients, dtype=bool)  # a job whose result has not arrived (tick clock)
        self.received = 0  # bytes of results received and not yet counted in a round (tick clock)

    def receive(self) -> tuple[int, np.ndarray, torch.Tensor | None]:
        """The next up message: (source, header, payload); no payload for BYE and READY, nor
        where the hosts sum the updates."""
        header = np.empty(UP_LEN)
        st = self.comm.probe(ANY, Tag.UP_HEADER)  # waits without spinning a core
        self.comm.recv_(header, st.source, Tag.UP_HEADER)
        if UpKind(int(header[Up.KIND])) != UpKind.UPDATE:
            return st.source, header, None
        return st.source, header, self.sums.receive(st.source)

    def keep(self, header: np.ndarray, payload: torch.Tensor | None) -> None:
        sender = int(header[Up.CLIENT])
        self.outstanding[sender] = False
        self.received += header.nbytes + (0 if payload is None else payload.numel() * 4)
        if self.clock.active[sender]:  # updates of clients that left are dropped here
            self.stash[sender] = header
            self.sums.keep(sender, payload, header[Up.DONE_AT])

    def _keep_next(self, awaited: str) -> None:
        """Receive one update and keep it; anything else is an error while ``awaited`` is due."""
        source, header, payload = self.receive()
        kind = UpKind(int(header[Up.KIND]))
        if kind != UpKind.UPDATE:
            raise RuntimeError(f"rank {source} sent {kind.name} while the server still waits for {awaited}")
        self.keep(header, payload)

    def take(self, client: int) -> tuple[np.ndarray, torch.Tensor | None]:
        """Client's update (header, payload), from the stash or from the wire (stashing others
        meanwhile), no longer kept."""
        while client not in self.stash:
            self._keep_next(f"client {client}")
        return self.stash.pop(client), self.sums.take(client)

    def latest(self, client: int) -> tuple[np.ndarray, torch.Tensor | None]:
        """Client's latest result, kept on."""
        return self.stash[client], self.sums.read(client)

    def settle(self, client: int | None = None) -> None:
        """Receive until ``client``'s latest job (None: every started job) has its result in
        the stash. A host holds one pending job per client, so a client's next job is sent
        only once its last result is in."""
        while self.outstanding[client] if client is not None else self.outstanding.any():
            self._keep_next("a result")

    def until_ready(self, hosts: list[int], version: int) -> None:
        """Keep the updates that arrive until each of ``hosts`` answered READY."""
        waiting = set(hosts)
        while waiting:
            source, header, payload = self.receive()
            kind = UpKind(int(header[Up.KIND]))
            if kind == UpKind.READY:
                waiting.discard(source)
            elif kind == UpKind.UPDATE:
                self.keep(header, payload)
            else:
                raise RuntimeError(f"rank {source} said goodbye during the checkpoint of round {version}")

    def until_bye(self, hosts: list[int], totals: np.ndarray) -> None:
        """Drain what ``hosts`` still send until each said BYE; its totals go to ``totals[rank]``."""
        waiting = set(hosts)
        while waiting:
            source, header, payload = self.receive()
            if UpKind(int(header[Up.KIND])) == UpKind.BYE:
                waiting.discard(source)
                totals[source] = header[[Up.JOBS, Up.STEPS, Up.PEAK_RSS, Up.HELD_PEAK]]

    def drop(self, clients: list[int]) -> None:
        """Forget the kept updates of clients that left."""
        for c in clients:
            if self.stash.pop(c, None) is not None:
                self.sums.discard(c)

    def state_dict(self) -> dict:
        if self.outstanding.any():  # the tick clock settles every job before it aggregates
            raise RuntimeError(f"server: state_dict with results outstanding (clients "
                               f"{np.flatnonzero(self.outstanding)[:5].tolist()})")
        clients = list(self.stash)
        return {"clients": clients, "headers": [self.stash[c].copy() for c in clients],
                "payloads": self.sums.saved(clients)}

    def load_state_dict(self, state: dict) -> None:
        for c, h, p in zip(state["clients"], state["headers"], state["payloads"]):
            self.stash[int(c)] = np.asarray(h, dtype=np.float64)
            self.sums.load(int(c), p, self.stash[int(c)][Up.DONE_AT])
        self.received = 0
