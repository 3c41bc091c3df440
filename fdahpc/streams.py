"""Every random stream of a run, one generator per purpose, all derived from the run seed.

``stream(seed, PURPOSE, *index)`` seeds NumPy's generator with
``SeedSequence(seed, spawn_key=(PURPOSE, *index))``: two purposes (or two indices of one
purpose) never share numbers, whatever the seed. Torch generators (model
initialization, batch order, LinearFDA's first ξ) and the sketch hashes take the seed
directly and are listed here only so that the whole picture is in one place.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PARTICIPATION", "PARTITION_GROUP", "SEMIASYNC", "SHARDS", "SYNTHETIC", "stream"]

SHARDS = 1  # the split of the training set into one shard per worker
PARTITION_GROUP = 2  # index: the group of a mix: partition (iid, sorted, label ... inside it)
PARTICIPATION = 3  # index: the round whose clients are sampled (--clients-per-round)
SYNTHETIC = 4  # the synthetic dataset's prototypes and noise
SEMIASYNC = 0x5A  # index: the semi-asynchronous mode's own streams (speeds, scenarios, clients)


def stream(seed: int, purpose: int, *index: int) -> np.random.Generator:
    """The generator of one purpose (and index) of run ``seed``."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(purpose, *map(int, index))))
