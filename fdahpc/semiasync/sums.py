"""Where a round's updates are summed (``--aggregate``): on the server, or on the hosts.

- :class:`OnServer` (``server``): every update's payload travels to the server, which keeps
  it (in memory up to ``--model-cache-gb``, the rest in ``--spill-dir``: :mod:`.store`) until
  the round that reads it, and sums the buffer with the rule (:meth:`.rules.BufferRule.aggregate_`).
  The new model goes to the hosts of the clients that start, one message each.
- :class:`OnHosts` (``hosts``): only the headers travel; the payloads stay on the hosts. The
  server takes the rule's coefficients from the headers
  (:meth:`.rules.BufferRule.combination`), tells every host its members' coefficients
  (``COMBINE``), and one exact sum-reduction of the hosts' fixed-point partial sums
  (:mod:`.exact`) gives the new model, equal bit for bit to the server's own sum; one
  broadcast sends it back.

The server (:mod:`.server`) calls both through the same methods and names neither.
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm import Communicator, Outbox
from .exact import to_float
from .protocol import Down, DownMessage, Tag, pack_down
from .rules import BufferRule, Update
from .store import ModelStore, capacity

__all__ = ["OnHosts", "OnServer"]


class OnServer:
    """Payloads travel to the server, wait in its store, and are summed there."""

    def __init__(self, comm: Communicator, host_of: np.ndarray, numel: int, model_cache_gb: float | None = None,
                 spill_dir: str | None = None) -> None:
        self.comm, self.host_of, self.numel = comm, host_of, numel
        self.done_at: dict[int, float] = {}  # client -> end of the job whose payload is kept: needed first, kept first
        self.store = ModelStore(capacity(model_cache_gb, numel), spill_dir, lambda: self.done_at, tag="server-")

    @property
    def peak(self) -> int:
        """The most payloads held in memory at once."""
        return self.store.peak

    def receive(self, source: int) -> torch.Tensor:
        payload = torch.from_numpy(np.empty(self.numel, dtype=np.float32))
        self.comm.recv_(payload, source, Tag.UP_PAYLOAD)
        return payload

    def keep(self, client: int, payload: torch.Tensor, done_at: float) -> None:
        self.done_at[client] = done_at
        self.store.put(client, payload)

    def take(self, client: int) -> torch.Tensor:
        del self.done_at[client]
        return self.store.pop(client)

    def read(self, client: int) -> torch.Tensor:
        """The kept payload, kept on (the tick clock may read it again)."""
        return self.store[client]

    def discard(self, client: int) -> None:
        self.done_at.pop(client, None)
        self.store.discard(client)

    def saved(self, clients: list[int]) -> list:
        return [self.store[c] for c in clients]

    def load(self, client: int, payload: torch.Tensor | None, done_at: float) -> None:
        if payload is not None:
            self.keep(client, payload, done_at)

    def received_bytes(self, buffer: list[Update]) -> int:
        """Payload bytes a round's buffer brought."""
        return sum(u.payload.numel() * 4 for u in buffer)

    def hosts(self, clients: list[int]) -> list[int]:
        """The hosts a new model goes to: those of ``clients``."""
        return sorted({int(self.host_of[c]) for c in clients})

    def post_model(self, outbox: Outbox, headers: dict[int, np.ndarray], model: torch.Tensor) -> int:
        """Each host its header and the model, without blocking; returns the bytes sent."""
        sent = 0
        for host, header in headers.items():
            outbox.post(header, host, Tag.DOWN_HEADER, "control")
            outbox.post(model, host, Tag.DOWN_PAYLOAD, "model")
            sent += header.nbytes + model.numel() * 4
        return sent

    def sum_(self, rule: BufferRule, flat, buffer: list[Update], counts: np.ndarray, version: int,
             outbox: Outbox) -> np.ndarray:
        """The new global model in ``flat.state`` from the buffer; returns the rule's weights."""
        return rule.aggregate_(flat.state, buffer, counts, len(self.host_of), params=flat.dim)

    def close(self) -> None:
        self.store.close()


class OnHosts:
    """``--aggregate hosts``: payloads stay on the hosts, which add their members' terms."""

    peak = 0  # the server holds no payload

    def __init__(self, comm: Communicator, host_of: np.ndarray, numel: int) -> None:
        self.comm, self.host_of, self.numel = comm, host_of, numel

    def receive(self, source: int) -> None:
        return None

    def keep(self, client: int, payload: None, done_at: float) -> None:
        pass

    def take(self, client: int) -> None:
        return None

    def read(self, client: int) -> None:
        return None

    def discard(self, client: int) -> None:
        pass

    def saved(self, clients: list[int]) -> list:
        return [None] * len(clients)  # the hosts save them (:meth:`.client.Host.state_dict`)

    def load(self, client: int, payload: None, done_at: float) -> None:
        pass

    def received_bytes(self, buffer: list[Update]) -> int:
        """A round brings one reduced int64 vector, whatever its buffer."""
        return 8 * self.numel

    def hosts(self, clients: list[int]) -> range:
        """Every host: each joins the model's broadcast when it reads its header."""
        return range(1, self.comm.world_size)

    def post_model(self, outbox: Outbox, headers: dict[int, np.ndarray], model: torch.Tensor) -> int:
        """Each host its header, without blocking, then one broadcast of the model; returns the bytes sent."""
        for host, header in headers.items():
            outbox.post(header, host, Tag.DOWN_HEADER, "control")
        self.comm.bcast_(model, "model")
        return sum(h.nbytes for h in headers.values()) + model.numel() * 4

    def sum_(self, rule: BufferRule, flat, buffer: list[Update], counts: np.ndarray, version: int,
             outbox: Outbox) -> np.ndarray:
        """The rule's coefficients from the headers to every host, which adds its members'
        terms; one exact sum-reduction gives the new model in ``flat.state``, equal bit for
        bit to :class:`OnServer`'s (:mod:`.exact`). Returns the rule's weights."""
        d, old = flat.dim, flat.state.numpy()
        c = rule.combination(buffer, counts, len(self.host_of), d)
        acc, bits = c.start(old, d, [u.absmax for u in buffer])
        for host in range(1, self.comm.world_size):
            mine = [k for k, u in enumerate(buffer) if self.host_of[u.client] == host]
            header = pack_down(DownMessage(Down.COMBINE, version, bits, clients=tuple(buffer[k].client for k in mine),
                                           speeds=tuple(float(c.params[k]) for k in mine),
                                           done_at=tuple(float(c.stats[k]) for k in mine)))
            outbox.post(header, host, Tag.DOWN_HEADER, "control")
        self.comm.reduce_sum_(acc, "model")
        flat.state.copy_(torch.from_numpy(to_float(acc, bits)))
        return c.weights

    def close(self) -> None:
        pass
