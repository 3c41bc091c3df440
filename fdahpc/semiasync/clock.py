"""Virtual time: how long each client's local job takes, and the order jobs finish in.

Client i needs ``r_i`` time units per local job, ``r_i`` a seeded integer drawn uniformly
from ``[1, speed_ratio]`` (the FedQS paper's "1:50"). The server consumes updates in
order of virtual completion time, ties broken by client id, so a run is a function of its
seed alone, however the operating system schedules the ranks that compute the jobs.

Dynamic scenarios (FedQS §5.3), given as ``--scenario`` (several joined by commas):
- ``shift@R:RATIO``: at round R the speed ratio becomes 1:RATIO. Every client's r_i is
  rescaled linearly from [1, old] to [1, RATIO], so fast clients stay fast (redrawn when
  the old ratio was 1:1, where there is no order to keep).
- ``fluctuate:A``: after each of its updates a client's r_i moves by a random integer in
  [-A, A], kept in [1, ratio].
- ``dropout@R:FRACTION``: at round R that fraction of the remaining clients leaves for good.
Jobs already running when a scenario fires finish at the time they were given.

Who starts a job after an aggregation (:meth:`VirtualClock.starters`): the clients just
aggregated (semi-asynchronous FL: every client is always working), or, with
``--clients-per-round C`` (cross-device FedAvg as McMahan et al. run it), C clients drawn
for the next round from the ones present, seeded by (seed, round); the round then waits
for all C, so its virtual time is its slowest client's.

Nothing here communicates: the server owns the clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import streams
from ..specs import at_least

__all__ = ["Scenario", "VirtualClock", "parse_scenarios", "stream_rng"]

SCENARIO_KINDS = ("shift", "fluctuate", "dropout")
_EXAMPLE = "e.g. --scenario shift@200:100, fluctuate:10 or dropout@100:0.5"


def stream_rng(seed: int, stream: int) -> np.random.Generator:
    """An independent generator per purpose of the semi-asynchronous mode (see
    :mod:`fdahpc.streams`)."""
    return streams.stream(seed, streams.SEMIASYNC, stream)


# Stream numbers, one per purpose (all semi-asynchronous randomness derives from them).
SPEEDS, FLUCTUATION, DROPOUT, SHIFT, SAMPLING = 1, 2, 3, 4, 5
#: Client c's FedQS label-test samples are picked in an order drawn from stream VALIDATION + c.
VALIDATION = 100


@dataclass(frozen=True)
class Scenario:
    kind: str
    round: int  # the aggregation round it fires at (0 for fluctuate: always on)
    value: float  # new ratio, fluctuation amplitude, or dropout fraction


def _number(text: str, spec: str, kind, low, what: str):
    value = at_least(text, kind, low)
    if value is None:
        raise ValueError(f"--scenario {spec!r}: {what} must be a {kind.__name__} >= {low}; {_EXAMPLE}")
    return value


def parse_scenarios(spec: str | None) -> tuple[Scenario, ...]:
    """``"shift@200:100,dropout@100:0.5"`` → scenarios; ValueError naming the fix otherwise."""
    if not spec:
        return ()
    out = []
    for part in (p.strip() for p in spec.split(",")):
        kind, _, rest = part.partition("@") if "@" in part else part.partition(":")
        if kind not in SCENARIO_KINDS:
            raise ValueError(f"--scenario {part!r}: unknown kind {kind!r}; choose {', '.join(SCENARIO_KINDS)}; {_EXAMPLE}")
        if kind == "fluctuate":
            if "@" in part:
                raise ValueError(f"--scenario {part!r}: fluctuate takes no round; {_EXAMPLE}")
            out.append(Scenario(kind, 0, _number(rest, part, int, 0, "the amplitude")))
            continue
        at, colon, value = rest.partition(":")
        if "@" not in part or not colon:
            raise ValueError(f"--scenario {part!r}: write {kind}@ROUND:VALUE; {_EXAMPLE}")
        rnd = _number(at, part, int, 1, "the round")
        if kind == "shift":
            out.append(Scenario(kind, rnd, _number(value, part, int, 1, "the new ratio")))
        else:
            frac = _number(value, part, float, 0.0, "the fraction")
            if frac >= 1:
                raise ValueError(f"--scenario {part!r}: the fraction must be below 1 (some clients must stay); {_EXAMPLE}")
            out.append(Scenario(kind, rnd, frac))
    if len({s.kind for s in out}) != len(out):
        raise ValueError(f"--scenario {spec!r}: give each kind at most once; {_EXAMPLE}")
    return tuple(out)


class VirtualClock:
    """Job durations, completion events and client churn, all seeded.

    ``start(i, now)`` schedules client i's next job; ``pop()`` returns the next finished
    job ``(time, client)`` of a client still present; ``on_round(t)`` applies the
    scenarios that fire after aggregation round t and returns the clients that left.
    """

    def __init__(self, num_clients: int, speed_ratio: int, seed: int, scenarios: tuple[Scenario, ...] = (),
                 per_round: int | None = None) -> None:
        if num_clients < 1 or speed_ratio < 1:
            raise ValueError(f"clock: need num_clients >= 1 and speed_ratio >= 1, got {num_clients}, {speed_ratio}")
        if per_round is not None and not 1 <= per_round <= num_clients:
            raise ValueError(f"--clients-per-round {per_round}: must be in [1, --clients {num_clients}]")
        self.num_clients, self.ratio, self.seed, self.per_round = num_clients, int(speed_ratio), seed, per_round
        self.r = stream_rng(seed, SPEEDS).integers(1, self.ratio + 1, num_clients)
        self.active = np.ones(num_clients, dtype=bool)
        self.scenarios = {s.kind: s for s in scenarios}
        self._fluct = stream_rng(seed, FLUCTUATION)
        self._heap: list[tuple[int, int]] = []
        self._jobs = np.zeros(num_clients, dtype=np.int64)  # jobs started per client
        self.in_flight = 0  # jobs started and not yet popped, of clients still present

    def starters(self, aggregated: list[int] | None, rnd: int) -> list[int]:
        """Who starts a job once round ``rnd`` has been aggregated (``aggregated``: its
        clients; None at the start, round 0): the aggregated clients still present, or
        everyone at the start; with ``per_round``, the sample of round ``rnd + 1``."""
        present = np.flatnonzero(self.active)
        if self.per_round is not None:
            rng = streams.stream(self.seed, streams.SEMIASYNC, SAMPLING, rnd + 1)
            return np.sort(rng.choice(present, min(self.per_round, len(present)), replace=False)).tolist()
        if aggregated is None:
            return present.tolist()
        return [c for c in aggregated if self.active[c]]

    def start(self, client: int, now: int) -> int:
        """Schedule client's next job from ``now``; returns its completion time."""
        fl = self.scenarios.get("fluctuate")
        if fl is not None and self._jobs[client] > 0:
            step = int(self._fluct.integers(-fl.value, fl.value + 1))
            self.r[client] = min(max(self.r[client] + step, 1), self.ratio)
        self._jobs[client] += 1
        done = now + int(self.r[client])
        heapq.heappush(self._heap, (done, client))
        self.in_flight += 1
        return done

    def pop(self) -> tuple[int, int] | None:
        """The next job to finish, of a client still present (None when none is left)."""
        while self._heap:
            t, client = heapq.heappop(self._heap)
            if self.active[client]:
                self.in_flight -= 1
                return t, client
        return None

    def on_round(self, rnd: int) -> list[int]:
        """Apply the scenarios that fire once round ``rnd`` has been aggregated."""
        shift = self.scenarios.get("shift")
        if shift is not None and shift.round == rnd:
            new = int(shift.value)
            if self.ratio > 1:
                self.r = 1 + np.rint((self.r - 1) * (new - 1) / (self.ratio - 1)).astype(np.int64)
            else:
                self.r = stream_rng(self.seed, SHIFT).integers(1, new + 1, self.num_clients)
            self.ratio = new
        drop = self.scenarios.get("dropout")
        if drop is None or drop.round != rnd:
            return []
        present = np.flatnonzero(self.active)
        leaving = np.sort(stream_rng(self.seed, DROPOUT).choice(present, int(round(drop.value * len(present))), replace=False))
        gone = set(leaving.tolist())
        self.in_flight -= sum(1 for _, c in self._heap if c in gone and self.active[c])
        self.active[leaving] = False
        return leaving.tolist()

    def state_dict(self) -> dict[str, Any]:
        return {"r": self.r.copy(), "ratio": self.ratio, "active": self.active.copy(), "heap": list(self._heap),
                "jobs": self._jobs.copy(), "fluct": self._fluct.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.r, self.ratio, self.active = state["r"].copy(), state["ratio"], state["active"].copy()
        self._heap, self._jobs = list(state["heap"]), state["jobs"].copy()
        self._fluct.bit_generator.state = state["fluct"]
        self.in_flight = sum(int(self.active[c]) for _, c in self._heap)
