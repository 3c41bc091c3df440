"""ModelStore: the models a rank keeps for later, in memory up to a budget, the rest on disk."""

import os

import numpy as np
import pytest
import torch

from fdahpc.semiasync.store import ModelStore


def _store(tmp_path, capacity, next_use):
    return ModelStore(capacity, str(tmp_path / "spill"), lambda: next_use, tag="t-")


def test_the_model_needed_furthest_goes_to_disk_and_comes_back_bit_for_bit(tmp_path):
    rng = np.random.default_rng(0)
    models = {v: torch.from_numpy(rng.normal(size=1000).astype(np.float32)) for v in range(4)}
    originals = {v: m.clone() for v, m in models.items()}
    # Next uses: version 1 is needed last, 3 soonest, 0 by no pending job at all.
    next_use = {1: 90.0, 2: 20.0, 3: 5.0}
    store = _store(tmp_path, 2, next_use)
    store.put(0, models[0])
    store.put(1, models[1])
    store.put(2, models[2])  # full: 0 goes (no pending job needs it), not 1
    assert sorted(store.memory) == [1, 2] and sorted(store.disk) == [0]
    store.put(3, models[3])  # full: 1 goes (needed at 90, after 2 at 20)
    assert sorted(store.memory) == [2, 3] and sorted(store.disk) == [0, 1]
    assert len(store) == 4 and 1 in store and store.peak == 2
    folder = store.folder
    assert sorted(os.listdir(folder)) == ["0.f32", "1.f32"]
    next_use[0] = 1.0
    back = store[1]  # loaded; 2 (needed at 20, after 3 at 5) makes room
    assert torch.equal(back, originals[1]) and sorted(store.memory) == [1, 3] and sorted(store.disk) == [0, 2]
    assert torch.equal(store.pop(0), originals[0]) and 0 not in store
    store.discard(2)
    assert sorted(os.listdir(folder)) == [] and store.spilled == 3 and store.loaded == 2
    store.close()
    assert not os.path.exists(folder)


def test_a_key_put_again_replaces_its_spilled_copy(tmp_path):
    store = _store(tmp_path, 1, {})
    store.put(0, torch.zeros(10))
    store.put(1, torch.ones(10))  # 0 to disk
    store.put(0, torch.full((10,), 2.0))  # a client's newer update: the old file goes
    assert sorted(store.disk) == [1] and sorted(os.listdir(store.folder)) == ["1.f32"] and len(store) == 2
    assert torch.equal(store[0], torch.full((10,), 2.0))
    store.close()


def test_without_a_budget_nothing_is_written(tmp_path):
    store = _store(tmp_path, None, {})
    for v in range(50):
        store.put(v, torch.zeros(10))
    assert store.peak == 50 and store.folder is None and not (tmp_path / "spill").exists()


def test_an_unwritable_spill_dir_is_one_line_naming_the_flag(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = ModelStore(1, str(blocker / "sub"), lambda: {}, tag="t-")
    store.put(0, torch.zeros(3))
    with pytest.raises(OSError, match=r"--spill-dir .*sub: cannot write there .*--model-cache-gb"):
        store.put(1, torch.zeros(3))


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity 0"):
        ModelStore(0, None, lambda: {})
