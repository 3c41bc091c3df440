"""Communicator collectives with rank-dependent inputs and closed-form results.

Each test runs in one process (local backend) and again under
``mpiexec -n 2 python -m pytest --with-mpi -m "mpi or distributed"`` (MPI backend).
"""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.distributed


def test_allreduce_mean_numpy_and_torch(comm):
    k, r = comm.world_size, comm.rank
    a = np.full(1000, float(r), dtype=np.float32)
    comm.allreduce_mean_(a, "model")
    assert np.allclose(a, sum(range(k)) / k)
    t = torch.arange(7, dtype=torch.float32) + r
    out = comm.allreduce_mean_(t, "model")
    assert out is t
    assert torch.allclose(t, torch.arange(7, dtype=torch.float32) + sum(range(k)) / k)


@pytest.mark.parametrize("extra", [0, 1])
def test_allreduce_mean_of_a_large_buffer_matches_the_naive_mean(comm, extra):
    """Large buffers take the MPI backend's split path (reduce-scatter, 1/K over one slice,
    allgather; the last d mod K values by a small Allreduce): the same mean, bit-identical
    on every rank, the view cache following a tensor that is reused and one that is not."""
    k, r = comm.world_size, comm.rank
    d = (1 << 21) + extra * (k - 1 if k > 1 else 1)  # divisible by K, and not
    rows = [np.random.default_rng(rank).standard_normal(d).astype(np.float32) for rank in range(k)]
    expected = np.mean(np.stack(rows).astype(np.float64), axis=0)
    t = torch.from_numpy(rows[r].copy())
    for _ in range(2):  # the second call reuses the cached view of t
        t.copy_(torch.from_numpy(rows[r]))
        comm.allreduce_mean_(t, "model")
        assert np.allclose(t.numpy(), expected, rtol=0, atol=1e-6)
    assert np.array_equal(comm.allgather(t.numpy()[-5:], "eval")[0], t.numpy()[-5:])
    fresh = np.full(d, float(r), dtype=np.float64)
    comm.allreduce_mean_(fresh, "model")
    assert np.all(fresh == sum(range(k)) / k)


def test_allreduce_sum_float64(comm):
    v = np.array([comm.rank, 1.0, 2.0 ** 40])
    comm.allreduce_sum_(v, "eval")
    k = comm.world_size
    assert v.tolist() == [sum(range(k)), k, k * 2.0 ** 40]


def test_byte_counters_by_purpose(comm):
    before = dict(comm.bytes_sent)
    comm.allreduce_mean_(np.zeros(10, np.float32), "monitor")
    comm.allgather(np.zeros(3, np.float64), "monitor")
    comm.allreduce_sum_(torch.zeros(5, dtype=torch.float32), "eval")
    assert comm.bytes_sent["monitor"] - before["monitor"] == 40 + 24
    assert comm.bytes_sent["eval"] - before["eval"] == 20
    assert comm.bytes_sent["model"] == before["model"]
    with pytest.raises(ValueError, match="purpose"):
        comm.allreduce_sum_(np.zeros(1), "training")


def test_allgather_and_objects(comm):
    got = comm.allgather(np.array([comm.rank, 10 * comm.rank], dtype=np.int64), "control")
    assert got.shape == (comm.world_size, 2)
    assert got[:, 0].tolist() == list(range(comm.world_size))
    assert comm.allgather_obj({"r": comm.rank}) == [{"r": i} for i in range(comm.world_size)]
    assert comm.bcast_obj("root says" if comm.is_root else None) == "root says"


def test_bcast_buffer(comm):
    t = torch.full((4,), float(comm.rank + 1))
    comm.bcast_(t, "control")
    assert torch.equal(t, torch.ones(4))


def test_rejects_non_contiguous(comm):
    if comm.world_size == 1:
        pytest.skip("the local backend never touches the buffer")
    with pytest.raises(ValueError, match="contiguous"):
        comm.allreduce_sum_(np.zeros((4, 4), np.float32)[:, 0], "model")


def _needs_point_to_point(comm):
    if not comm.point_to_point:
        with pytest.raises(NotImplementedError, match="--backend mpi"):
            comm.send_(np.zeros(2), 0, tag=0, purpose="control")
        pytest.skip(f"{type(comm).__name__} has no point-to-point messages (the semiasync mode needs --backend mpi)")


def test_point_to_point_ring_with_probe_and_counts(comm):
    """Each rank sends a rank-stamped float32 buffer to the next rank (itself when alone)
    and receives from the previous one: header sized by probe, payload into a longer buffer."""
    _needs_point_to_point(comm)
    from fdahpc.comm import ANY

    k, r = comm.world_size, comm.rank
    before = dict(comm.bytes_sent)
    payload = np.arange(6, dtype=np.float32) + 100 * r
    req = comm.isend(payload, (r + 1) % k, tag=7, purpose="model")
    comm.send_(np.array([r, 42], dtype=np.float64), (r + 1) % k, tag=8, purpose="control")
    st = comm.probe(source=ANY, tag=8)
    assert (st.source, st.tag, st.nbytes) == ((r - 1) % k, 8, 16)
    header = np.zeros(4)
    assert comm.recv_(header, source=st.source, tag=8).nbytes == 16
    assert header[:2].tolist() == [(r - 1) % k, 42]
    got = torch.zeros(10)
    st = comm.recv_(got, source=ANY, tag=7)
    assert st.nbytes == 24 and st.source == (r - 1) % k
    assert got[:6].tolist() == (np.arange(6) + 100 * ((r - 1) % k)).tolist()
    req.wait()
    assert req.test()
    assert comm.iprobe(tag=7) is None
    assert comm.bytes_sent["model"] - before["model"] == 24
    assert comm.bytes_sent["control"] - before["control"] == 16


def test_local_point_to_point_refuses_what_would_hang():
    from fdahpc.comm import LocalCommunicator

    local = LocalCommunicator()
    with pytest.raises(RuntimeError, match="wait forever"):
        local.recv_(np.zeros(2))
    with pytest.raises(ValueError, match="only rank 0"):
        local.send_(np.zeros(2), 1, tag=0, purpose="model")


def test_outbox_keeps_buffers_until_sent_and_drains(comm):
    from fdahpc.comm import Outbox

    _needs_point_to_point(comm)
    k, r = comm.world_size, comm.rank
    out = Outbox(comm)
    for i in range(3):
        out.post(np.full(4, 10 * r + i, dtype=np.float32), (r + 1) % k, tag=30, purpose="model")  # no reference kept here
    got = np.zeros(4, dtype=np.float32)
    for i in range(3):
        comm.recv_(got, (r - 1) % k, tag=30)
        assert got.tolist() == [10 * ((r - 1) % k) + i] * 4
    out.drain()
