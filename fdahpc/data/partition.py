"""Partitioners: which training samples each of K workers holds.

Every rank calls `partition` with the same labels, world size, spec and seed, gets the
same list of K disjoint index arrays, and keeps its own; no communication is needed.

Spec syntax (``--partition``):

- ``iid``            shuffle, cut into K equal shards.
- ``sorted:X``       FDA's Non-IID X %: X % of the data sorted by label and cut into K
                     contiguous chunks, the rest split IID; one chunk of each per worker.
- ``label:Y``        all samples of label Y first, the rest shuffled, then cut into K
                     equal chunks, so label Y lands on as few workers as possible.
- ``dirichlet:ALPHA`` per class, worker shares ~ Dirichlet(ALPHA); small ALPHA = skewed.
- ``classes:C``      each worker holds exactly C classes (FedAdp's non-IID(C) nodes).
- ``roles``          a text's samples by speaking role (the callback's "labels" are role
                     ids): every role wholly on one worker, as LEAF splits Shakespeare.
                     With more roles than workers, the roles (largest first, ties in a
                     seeded order) go one by one to the worker holding the fewest samples.
- ``mix:N1*SPEC1+N2*SPEC2+...``  worker groups: the first N1 ranks follow SPEC1, the next
                     N2 follow SPEC2, ...; the counts must sum to K, e.g. FedAdp's
                     "5 IID + 5 non-IID(2)" is ``mix:5*iid+5*classes:2``.

A plain spec is the one-group case of a mix, so both run through one mechanism: the data
is shuffled and cut into K equal shards, each group pools the shards of its ranks (so a
group's share is proportional to its worker count), then partitions its pool by its rule.
A ``classes:C`` group of K_g workers with K_g·C below the number of labels leaves the
other labels' samples of its pool out: in ``mix:5*iid+5*classes:1`` on ten labels the
five one-class workers hold half as many samples as the IID ones and the run trains on
75 % of the set, while an epoch (``steps_per_epoch``) still counts the whole training
set divided by K. Every worker takes the same number of steps either way.
Returned arrays are sorted ascending, so readers touch files front to back; the training
order is the trainer's per-epoch shuffle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..specs import at_least
from ..streams import PARTITION_GROUP, SHARDS, stream

__all__ = ["PARTITION_KINDS", "PartitionSpec", "parse_partition", "partition"]

PARTITION_KINDS = ("iid", "sorted", "label", "dirichlet", "classes", "roles", "mix")  # mix combines the others
_USAGE = ("use iid, sorted:X, label:Y, dirichlet:ALPHA, classes:C, roles (text datasets) or "
          "mix:N*SPEC+N*SPEC, e.g. mix:5*iid+5*classes:2")


@dataclass(frozen=True)
class PartitionSpec:
    """One rule for one group of workers; ``workers`` is None for a plain (all-K) spec."""

    kind: str
    arg: float | int | None = None
    workers: int | None = None


# ---------------------------------------------------------------------------- parsing
def parse_partition(spec: str, world_size: int | None = None) -> tuple[PartitionSpec, ...]:
    """Validate ``spec`` without touching data, so the CLI fails before loading anything.

    With ``world_size`` given, also checks that a mix's worker counts sum to it.
    Checks that need the labels (C vs the number of classes, Y present) happen in
    `partition`.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"partition {spec!r}: empty or not a string; {_USAGE}")
    text = "".join(spec.split())
    if text.startswith("mix:"):
        groups = tuple(_parse_group(part, spec) for part in text[4:].split("+"))
    else:
        groups = (_parse_rule(text, spec),)
    if world_size is not None:
        _check_world_size(world_size)
        _check_counts(groups, world_size, spec)
    return groups


def _parse_group(part: str, spec: str) -> PartitionSpec:
    count, star, rule = part.partition("*")
    if not star:
        raise ValueError(f"partition {spec!r}: mix part {part!r} must be N*SPEC, "
                         "e.g. mix:5*iid+5*classes:2")
    workers = _int_arg(count, spec, "the worker count N of a mix part", 1, "mix:5*iid+5*classes:2")
    parsed = _parse_rule(rule, spec)
    return PartitionSpec(parsed.kind, parsed.arg, workers)


def _parse_rule(text: str, spec: str) -> PartitionSpec:
    kind, colon, arg = text.partition(":")
    if kind == "iid":
        if colon:
            raise ValueError(f"partition {spec!r}: iid takes no argument, write just iid")
        return PartitionSpec("iid")
    if kind == "sorted":
        x = _float_arg(arg, spec, "X", "sorted:50")
        if not 0.0 <= x <= 100.0:
            raise ValueError(f"partition {spec!r}: X must be a percentage in [0, 100], e.g. sorted:50")
        return PartitionSpec("sorted", x)
    if kind == "label":
        return PartitionSpec("label", _int_arg(arg, spec, "Y (a label)", 0, "label:0"))
    if kind == "dirichlet":
        alpha = _float_arg(arg, spec, "ALPHA", "dirichlet:0.5")
        if alpha <= 0.0:
            raise ValueError(f"partition {spec!r}: ALPHA must be > 0, e.g. dirichlet:0.5")
        return PartitionSpec("dirichlet", alpha)
    if kind == "classes":
        return PartitionSpec("classes", _int_arg(arg, spec, "C", 1, "classes:2"))
    if kind == "roles":
        if colon:
            raise ValueError(f"partition {spec!r}: roles takes no argument, write just roles")
        return PartitionSpec("roles")
    if kind == "mix":
        raise ValueError(f"partition {spec!r}: a mix lists groups N*SPEC joined by + and does "
                         "not nest, e.g. mix:5*iid+5*classes:2")
    raise ValueError(f"partition {spec!r}: unknown kind {kind!r}; {_USAGE}")


def _int_arg(text: str, spec: str, name: str, low: int, example: str) -> int:
    value = at_least(text, int, low)
    if value is None:
        raise ValueError(f"partition {spec!r}: {name} must be an integer >= {low}, e.g. {example}")
    return value


def _float_arg(text: str, spec: str, name: str, example: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"partition {spec!r}: {name} must be a number, e.g. {example}")
    return value


def _check_world_size(world_size: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ValueError(f"world_size {world_size!r}: must be an integer >= 1 (the number of workers)")


def _check_counts(groups: tuple[PartitionSpec, ...], world_size: int, spec: str) -> None:
    if groups[0].workers is None:
        return
    total = sum(g.workers for g in groups)
    if total != world_size:
        half = world_size // 2
        example = f"mix:{world_size - half}*iid+{half}*classes:2" if half else "iid"
        raise ValueError(f"partition {spec!r}: worker counts sum to {total} but world_size is "
                         f"{world_size}; make them sum to {world_size}, e.g. {example}")


# ---------------------------------------------------------------------------- partitioning
def partition(labels: np.ndarray, world_size: int, spec: str, seed: int) -> list[np.ndarray]:
    """Split sample indices ``0..len(labels)-1`` among ``world_size`` workers.

    Returns one sorted int64 array per rank, pairwise disjoint, each non-empty; the same
    arguments give the same result on every rank. iid, sorted and label cover every
    sample; see the rule functions for dirichlet and classes.
    """
    groups = parse_partition(spec, world_size)
    labels = _check_labels(labels, spec)
    n = len(labels)
    if n < world_size:
        raise ValueError(f"partition {spec!r}: {n} samples cannot give each of {world_size} "
                         "workers one; use fewer workers or more data")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed {seed!r}: must be an integer >= 0, e.g. 0")
    shards = np.array_split(stream(seed, SHARDS).permutation(n), world_size)
    out: list[np.ndarray] = []
    first = 0
    for number, group in enumerate(groups, start=1):
        count = group.workers or world_size
        pool = np.concatenate(shards[first:first + count])
        first += count
        rng = stream(seed, PARTITION_GROUP, number)
        local = _RULES[group.kind](labels[pool], count, group.arg, rng, spec)
        out.extend(np.sort(pool[idx]).astype(np.int64) for idx in local)
    return out


def _check_labels(labels: np.ndarray, spec: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"partition {spec!r}: labels must be a 1-D integer array, "
                         f"got shape {labels.shape} dtype {labels.dtype}")
    return labels


def _iid(y, k, arg, rng, spec):
    return np.array_split(rng.permutation(len(y)), k)


def _sorted(y, k, x, rng, spec):
    perm = rng.permutation(len(y))
    n_sorted = int(round(len(y) * x / 100.0))
    head = perm[:n_sorted]
    head = head[np.argsort(y[head], kind="stable")]
    sorted_chunks = np.array_split(head, k)
    # array_split puts the larger chunks first; reversing the IID chunks pairs them with
    # the smaller sorted chunks, so worker totals differ by at most one.
    iid_chunks = np.array_split(perm[n_sorted:], k)[::-1]
    return [np.concatenate(pair) for pair in zip(sorted_chunks, iid_chunks)]


def _label(y, k, target, rng, spec):
    if not np.any(y == target):
        present = np.unique(y)
        raise ValueError(f"partition {spec!r}: label {target} does not occur in the data "
                         f"(labels {present.min()}..{present.max()}), e.g. label:{present[0]}")
    perm = rng.permutation(len(y))
    is_target = y[perm] == target
    return np.array_split(np.concatenate([perm[is_target], perm[~is_target]]), k)


def _dirichlet(y, k, alpha, rng, spec):
    """Per class, cut the shuffled samples at the cumulative Dirichlet(ALPHA) shares.

    Small ALPHA can leave a worker with nothing. Instead of redrawing until no worker is
    empty (which may take forever for tiny ALPHA), each empty worker takes one random
    sample from the currently largest worker; this moves at most K-1 samples and always
    terminates because there are at least K samples.
    """
    owner = np.empty(len(y), dtype=np.int64)
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        shares = rng.dirichlet(np.full(k, alpha))
        cuts = np.round(np.cumsum(shares)[:-1] * len(members)).astype(np.int64)
        sizes = np.diff(np.concatenate([[0], cuts, [len(members)]]))
        owner[members] = np.repeat(np.arange(k), sizes)
    sizes = np.bincount(owner, minlength=k)
    for worker in np.flatnonzero(sizes == 0):
        donor = int(np.argmax(sizes))
        owner[rng.choice(np.flatnonzero(owner == donor))] = worker
        sizes[donor] -= 1
        sizes[worker] += 1
    return [np.flatnonzero(owner == w) for w in range(k)]


def _classes(y, k, c, rng, spec):
    """Worker w holds classes ``order[(w*C + i) % L]``, i < C, of a seeded class order.

    Consecutive slots of a cyclic order are distinct (C <= L), and when K*C >= L every
    class is used by floor or ceil(K*C/L) workers, which split its samples evenly. When
    K*C < L (e.g. 5 workers of classes:1 on 10 classes) the unused classes' samples are
    left out, as in FedAdp where such nodes simply hold one class.
    """
    classes = np.unique(y)
    n_classes = len(classes)
    if c > n_classes:
        raise ValueError(f"partition {spec!r}: C={c} exceeds the {n_classes} classes in the "
                         f"data; use C <= {n_classes}, e.g. classes:{min(2, n_classes)}")
    order = classes[rng.permutation(n_classes)]
    held = [order[(w * c + np.arange(c)) % n_classes] for w in range(k)]
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for label in classes:
        holders = [w for w in range(k) if label in held[w]]
        members = rng.permutation(np.flatnonzero(y == label))
        if len(members) < len(holders):
            raise ValueError(f"partition {spec!r}: class {label} has {len(members)} samples for "
                             f"{len(holders)} workers; use a smaller C or fewer workers")
        for w, chunk in zip(holders, np.array_split(members, max(len(holders), 1))):
            parts[w].append(chunk)
    return [np.concatenate(p) for p in parts]


def _roles(y, k, arg, rng, spec):
    """Whole roles per worker, balanced greedily: largest role first (a seeded order among
    equal sizes), each to the worker with the fewest samples so far (lowest index on a tie).
    With K equal to the number of roles every worker holds exactly one, LEAF's clients."""
    roles, sizes = np.unique(y, return_counts=True)
    if len(roles) < k:
        raise ValueError(f"partition {spec!r}: {len(roles)} roles with samples for {k} workers/clients; use at most "
                         f"{len(roles)} (or --partition iid)")
    order = rng.permutation(len(roles))
    order = order[np.argsort(-sizes[order], kind="stable")]
    load = np.zeros(k, dtype=np.int64)
    owner = np.empty(len(roles), dtype=np.int64)
    for r in order:
        w = int(np.argmin(load))
        owner[r] = w
        load[w] += sizes[r]
    worker = owner[np.searchsorted(roles, y)]
    return [np.flatnonzero(worker == w) for w in range(k)]


_RULES = {"iid": _iid, "sorted": _sorted, "label": _label,
          "dirichlet": _dirichlet, "classes": _classes, "roles": _roles}
