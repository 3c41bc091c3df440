"""The wire format between the server (rank 0) and the client hosts (ranks 1..R-1).

Every message is a float64 *header* (its layout below, the one place it is defined)
followed, for models and updates, by a float32 *payload*: the flat model state vector
(``FlatParams(..., buffers=True).state``; in an update upload the parameters' part holds
their change Δ and the running statistics' part the client's final values). Headers and payloads travel with their own
tags, so a receiver that matched a header from rank h takes h's next payload and can
never pick up another message's. Nothing is pickled.

Down (server → host), header ``[kind, version, now, f_bar, s_bar, count, (client, f_i, done_at)*count]``:
- ``MODEL``: global model ``version`` for the listed clients, with the speed statistics
  FedQS's Mod② needs and the virtual time each client's new job will finish at (the
  host computes its jobs in that order, the order the server consumes them); a payload
  follows: the model, and for FedQS rules then Mod①'s reference over the parameters:
  the pseudo-global gradient ``w^v - w^(v-1)`` (the last global step; paper variant) or
  ``w^(v-1)`` itself (authors' variant). With ``--aggregate hosts`` every host gets a
  ``MODEL`` header for every version (its client list may be empty) and the payload is
  one broadcast to all hosts, which each host joins when it reads the header.
- ``COMBINE`` (``--aggregate hosts``): round ``version``'s aggregation. ``now`` holds the
  fixed-point scale S (:mod:`.exact`); per listed client of this host the two values are
  its coefficients on the parameters and on the running statistics. Every host, listed
  or not, adds its members' terms into an int64 vector and joins one sum-reduction to
  the server; no payload.
- ``DROP``: the listed clients left (dropout scenario); no payload.
- ``STOP``: the run is over; answer with ``BYE``; no payload.
- ``CHECKPOINT``: a checkpoint at round ``version``: finish every job the host holds a
  model for, send those updates, answer ``READY``, then join the collective
  :func:`fdahpc.checkpoint.save`; no payload. MPI keeps messages from one sender with one
  tag in order, so the server has every update of the host once its ``READY`` arrived.
- ``DIVERGED``: as ``STOP``, but the run diverged: after ``BYE`` the host raises
  :class:`fdahpc.control.Diverged` too, so every rank exits with code 3; no payload.

Up (host → server), header of fixed length ``UP_LEN`` indexed by :class:`Up`:
- ``UPDATE``: one finished local job; a payload follows (with ``--aggregate hosts`` it
  stays on the host until a ``COMBINE`` names it).
- ``READY``: answer to ``CHECKPOINT``: every client of the host is idle and its last
  update was sent; no payload.
- ``BYE``: the host has stopped and will send nothing more; carries its totals (JOBS,
  STEPS), its peak resident memory (PEAK_RSS, bytes) and the most global versions it held
  in memory at once (HELD_PEAK).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

__all__ = ["Tag", "Down", "Up", "UP_LEN", "DownMessage", "down_header_len", "pack_down", "unpack_down",
           "pack_up", "peak_rss_bytes", "UpKind"]


class Tag(IntEnum):
    UP_HEADER = 11
    UP_PAYLOAD = 12
    DOWN_HEADER = 21
    DOWN_PAYLOAD = 22


class Down(IntEnum):
    MODEL = 1
    DROP = 2
    STOP = 3
    CHECKPOINT = 4
    DIVERGED = 5
    COMBINE = 6


class UpKind(IntEnum):
    UPDATE = 1
    BYE = 2
    READY = 3


class Up(IntEnum):
    """Field positions of an up header."""

    KIND = 0
    CLIENT = 1
    VERSION = 2  # global version the job started from
    DONE_AT = 3  # virtual completion time (the server's own record; echoed for checks)
    N_SAMPLES = 4
    SIMILARITY = 5  # FedQS s_i (NaN: the client has no update to compare yet)
    FEEDBACK = 6  # 1.0 when the client asks for the feedback weight
    G = 7  # FedQS G_i = s̄ / s_i (capped)
    TYPE = 8  # FedQS client type index, -1 when none
    LOSS = 9  # mean training loss of the job
    LR = 10  # learning rate the job used
    MOMENTUM = 11  # momentum rate the job used
    STEPS = 12  # local steps taken (BYE: in all jobs)
    JOBS = 13  # BYE: jobs computed
    PEAK_RSS = 14  # BYE: the host's peak resident memory in bytes
    HELD_PEAK = 15  # BYE: the most global versions the host held in memory at once
    ABSMAX = 16  # UPDATE: the payload's largest magnitude (NaN or Inf when it holds one)


UP_LEN = len(Up)
_DOWN_FIXED = 6
_PER_CLIENT = 3


def down_header_len(num_clients: int) -> int:
    """Longest down header: every client listed (the receive buffer's size)."""
    return _DOWN_FIXED + _PER_CLIENT * num_clients


@dataclass(frozen=True)
class DownMessage:
    kind: Down
    version: int = 0
    now: float = 0.0
    f_bar: float = 1.0
    s_bar: float = 0.0
    clients: tuple[int, ...] = ()
    speeds: tuple[float, ...] = ()  # f_i of each listed client
    done_at: tuple[float, ...] = ()  # virtual completion time of each listed client's new job


def pack_down(msg: DownMessage) -> np.ndarray:
    head = [float(msg.kind), msg.version, msg.now, msg.f_bar, msg.s_bar, len(msg.clients)]
    n = len(msg.clients)
    rows = zip(msg.clients, msg.speeds or (0.0,) * n, msg.done_at or (0.0,) * n)
    return np.array(head + [v for row in rows for v in row], dtype=np.float64)


def unpack_down(buf: np.ndarray, nbytes: int) -> DownMessage:
    h = buf[: nbytes // 8]
    count = int(h[5])
    if len(h) != down_header_len(count):
        raise RuntimeError(f"malformed down header: {len(h)} fields for {count} clients")
    rows = h[_DOWN_FIXED:].reshape(count, _PER_CLIENT)
    return DownMessage(Down(int(h[0])), int(h[1]), float(h[2]), float(h[3]), float(h[4]),
                       tuple(int(c) for c in rows[:, 0]), tuple(rows[:, 1].tolist()), tuple(rows[:, 2].tolist()))


def peak_rss_bytes() -> int:
    """This process's peak resident memory (Linux reports kilobytes)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def pack_up(kind: UpKind, **fields: float) -> np.ndarray:
    """An up header; unnamed fields are 0 (TYPE defaults to -1)."""
    h = np.zeros(UP_LEN, dtype=np.float64)
    h[Up.KIND] = kind
    h[Up.TYPE] = -1
    for name, value in fields.items():
        h[Up[name.upper()]] = value
    return h
