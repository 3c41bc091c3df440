"""Fixed-seed runs of every preset, pinned: refactors must not change a single bit.

Each case runs in this process (1 rank) and under ``mpiexec -n 2 ... --with-mpi`` (2
ranks, MPI or gloo). The pins are a SHA-256 of the final float32 parameters, the
synchronization steps and the paper-formula byte total. A commit that changes a random
stream or the arithmetic on purpose re-pins here, and says so.
"""

import hashlib

import pytest

from fdahpc.config import TrainConfig
from fdahpc.sync_loop import build, train

pytestmark = pytest.mark.distributed

CASES = {
    "synchronous": {},
    "fedavg": {"tau": 5},
    "fedavg-sampled": {"strategy": "fedavg", "tau": 5, "clients_per_round": 1},
    "linearfda": {"theta": 0.5},
    "sketchfda": {"theta": 0.5},
    "fedavgm": {"tau": 5},
    "fedadam": {"tau": 5},
    "fedadp": {"tau": 5},
    "fedadp-sketch": {"strategy": "fedadp", "tau": 5, "fedadp_angles": "sketch"},
    "fedadam+sketch": {"strategy": "fedadam", "sync": "sketch", "theta": 0.5},
}

# case@world size -> (SHA-256 over every rank's final w, sync steps, comm_bytes)
PINS = {
    'fedadam+sketch@1': ('b90d60cbc87c84c2', [], 150120),
    'fedadam+sketch@2': ('e10960f415020c53', [], 300240),
    'fedadam@1': ('581c2229ff4b21e5', [5, 10, 15, 20, 25, 30], 2961888),
    'fedadam@2': ('bb01db53b76047c7', [5, 10, 15, 20, 25, 30], 5923776),
    'fedadp-sketch@1': ('22c782bbb309b432', [5, 10, 15, 20, 25, 30], 3021936),
    'fedadp-sketch@2': ('31996eba634fb54a', [5, 10, 15, 20, 25, 30], 6043872),
    'fedadp@1': ('22c782bbb309b432', [5, 10, 15, 20, 25, 30], 5924064),
    'fedadp@2': ('582a9b74d0060d37', [5, 10, 15, 20, 25, 30], 11848128),
    'fedavg-sampled@1': ('5b713fc99a64560c', [5, 10, 15, 20, 25, 30], 2961888),
    'fedavg-sampled@2': ('7fe8d6ca12680a49', [5, 10, 15, 20, 25, 30], 5923776),
    'fedavg@1': ('5b713fc99a64560c', [5, 10, 15, 20, 25, 30], 2961888),
    'fedavg@2': ('273e6cf70d3f6627', [5, 10, 15, 20, 25, 30], 5923776),
    'fedavgm@1': ('01e1cee33877cf69', [5, 10, 15, 20, 25, 30], 2961888),
    'fedavgm@2': ('06bf50673c608885', [5, 10, 15, 20, 25, 30], 5923776),
    'linearfda@1': ('5b713fc99a64560c', [6, 15, 28], 1481184),
    'linearfda@2': ('fce8fd01e8ba4b6b', [7, 16, 29], 2962368),
    'sketchfda@1': ('5b713fc99a64560c', [29], 643768),
    'sketchfda@2': ('5cc6071bbdabfb1d', [14], 1287536),
    'synchronous@1': ('5b713fc99a64560c', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30], 14809440),
    'synchronous@2': ('b96c45906141377f', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30], 29618880),
}


@pytest.fixture(autouse=True)
def one_thread():
    """Pins hold for one torch and one Numba thread per rank (fdahpc.train's default,
    --threads 1): other thread counts sum in other orders, a few bits apart."""
    import numba
    import torch

    before = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    yield
    torch.set_num_threads(before[0])
    numba.set_num_threads(before[1])


def _run(comm, tmp_path, case):
    overrides = {"strategy": case, **CASES[case]}
    out = comm.bcast_obj(str(tmp_path / "run.h5"))
    cfg = TrainConfig(dataset="mnist5k", model="lenet5", batch_size=16, log_every=10**6, max_steps=30, eval_every=30,
                      seed=3, out=out, **overrides)
    setup = build(cfg, comm)
    syncs = []
    after_step = setup.strategy.after_step

    def recording():
        synced = after_step()
        if synced:
            syncs.append(setup.strategy.steps)
        return synced

    setup.strategy.after_step = recording
    result = train(setup)
    mine = hashlib.sha256(setup.flat.w.detach().cpu().numpy().tobytes()).hexdigest()
    digest = hashlib.sha256("".join(comm.allgather_obj(mine)).encode()).hexdigest()[:16]  # every rank's model
    return digest, syncs, result["comm_bytes"]


@pytest.mark.parametrize("case", CASES)
def test_preset_is_bit_identical_to_its_pin(comm, tmp_path, case):
    got = _run(comm, tmp_path, case)
    key = f"{case}@{comm.world_size}"
    if key not in PINS:
        pytest.fail(f"no pin for {key}: add {key!r}: {got!r},")
    assert got == PINS[key]
