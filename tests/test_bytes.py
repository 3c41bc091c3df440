"""One byte total: the measured training traffic of every preset equals the paper's
formula (``naive.paper_comm_bytes``), and every rank really hands the same bytes to the
collectives (what lets one rank's counters stand for all of them).

Runs in this process (1 rank) and under ``mpiexec -n 2 ... --with-mpi``.
"""

import pytest

from naive import paper_comm_bytes
from test_pinned import CASES, _run  # the pinned presets, run the same way

pytestmark = pytest.mark.distributed

D_LENET5 = 61706  # LeNet-5's trainable parameters on 28x28 inputs
SKETCH = 4 + 4 * 5 * 250


def formula(case: str, syncs: int, steps: int, k: int) -> int:
    strategy, extra = CASES[case].get("strategy", case), CASES[case]
    trigger = extra.get("sync") or {"linearfda": "linear", "sketchfda": "sketch"}.get(strategy)
    state = {"linear": 8, "sketch": SKETCH}.get(trigger, 0)
    reductions, round_state = 1, 0
    if strategy == "fedadp":  # two model AllReduces and 3 float64s a node, or one and a sketch
        exact = extra.get("fedadp_angles", "exact") == "exact"
        reductions, round_state = (2, 24) if exact else (1, SKETCH)
    return paper_comm_bytes(syncs=syncs, steps=steps, dim=D_LENET5, workers=k, state_bytes=state,
                            model_reductions=reductions, round_state_bytes=round_state)


@pytest.mark.parametrize("case", CASES)
def test_measured_bytes_equal_the_paper_formula(comm, tmp_path, case):
    before = dict(comm.bytes_sent)
    _, syncs, comm_bytes = _run(comm, tmp_path, case)
    assert comm_bytes == formula(case, len(syncs), 30, comm.world_size)
    mine = [comm.bytes_sent[p] - before[p] for p in ("sync", "monitor")]
    assert all(theirs == mine for theirs in comm.allgather_obj(mine))  # SPMD: K x one rank is the total
