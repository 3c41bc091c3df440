"""Tests of fdahpc.data: partitioners (closed-form properties) and readers (tiny files)."""

import gzip
import math
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from fdahpc.cli import parse_args
from fdahpc.data import (DATASETS, FASHION_MNIST_DIR, Dataset, load_dataset,
                         parse_partition, partition)
from fdahpc.data.partition import PartitionSpec
from fdahpc.data.readers import read_cifar_batch, read_idx

# 1 000 labels, 100 per class, in shuffled order.
LABELS = np.random.default_rng(123).permutation(np.arange(1000) % 10)
COVERING = ["iid", "sorted:0", "sorted:30", "sorted:100", "label:4", "dirichlet:0.3",
            "classes:1", "classes:3", "mix:4*iid+6*classes:2", "mix:3*sorted:50+7*label:1"]


# ---------------------------------------------------------------------------- partition
@pytest.mark.parametrize("spec", COVERING)
def test_partition_is_disjoint_cover_of_nonempty_int64_shards(spec):
    parts = partition(LABELS, 10, spec, seed=0)
    assert len(parts) == 10
    assert all(p.dtype == np.int64 and len(p) > 0 and np.all(np.diff(p) > 0) for p in parts)
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == len(joined) == len(LABELS)


@pytest.mark.parametrize("spec", ["iid", "sorted:30", "sorted:100", "label:4"])
@pytest.mark.parametrize("k", [3, 7])
def test_balanced_specs_differ_by_at_most_one(spec, k):
    sizes = [len(p) for p in partition(LABELS, k, spec, seed=5)]
    assert sum(sizes) == len(LABELS) and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("spec", COVERING + ["dirichlet:0.01"])
def test_partition_is_deterministic_in_seed(spec):
    a, b, c = (partition(LABELS, 10, spec, seed=s) for s in (7, 7, 8))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    if spec != "sorted:100":  # 10 equal classes on 10 workers: worker k gets class k, any seed
        assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_label_y_lands_on_at_most_ceil_n_y_over_shard_workers():
    for k in (3, 8, 10):
        parts = partition(LABELS, k, "label:4", seed=1)
        holders = sum(np.any(LABELS[p] == 4) for p in parts)
        assert holders <= math.ceil(100 / (len(LABELS) // k))


def test_classes_gives_each_worker_exactly_c_labels_and_uses_every_class():
    for k, c in ((10, 2), (7, 3), (4, 10), (3, 4)):
        parts = partition(LABELS, k, f"classes:{c}", seed=2)
        assert [len(np.unique(LABELS[p])) for p in parts] == [c] * k
        holders = np.bincount(np.concatenate([np.unique(LABELS[p]) for p in parts]), minlength=10)
        assert set(holders) <= {k * c // 10, -(-k * c // 10)}  # floor or ceil of K*C/L


def test_classes_with_fewer_slots_than_classes_gives_whole_classes():
    # 5 workers x 1 class < 10 classes: 5 distinct classes, each held whole by one worker.
    parts = partition(LABELS, 5, "classes:1", seed=6)
    held = [np.unique(LABELS[p]) for p in parts]
    assert all(len(h) == 1 for h in held) and len(np.unique(np.concatenate(held))) == 5
    assert [len(p) for p in parts] == [100] * 5


def test_sorted_100_gives_contiguous_label_runs():
    parts = partition(LABELS, 7, "sorted:100", seed=3)
    for left, right in zip(parts, parts[1:]):
        assert LABELS[left].max() <= LABELS[right].min()
    # 10 equal classes on 10 workers: worker k holds label k and nothing else.
    assert [set(LABELS[p]) for p in partition(LABELS, 10, "sorted:100", seed=3)] == [{k} for k in range(10)]


def test_sorted_x_mixes_a_sorted_chunk_with_an_iid_chunk():
    # Binary labels 500/500, K=2, sorted:60: worker 0 gets the 300 lowest of ~300 zeros
    # among the 600 sorted samples plus ~100 zeros of its 200 IID samples, so ~400 zeros
    # (IID alone would give ~250, sorted:100 exactly 500).
    binary = np.arange(1000) % 2
    zeros = [np.sum(binary[partition(binary, 2, f"sorted:{x}", seed=4)[0]] == 0) for x in (0, 60, 100)]
    assert abs(zeros[0] - 250) <= 30 and abs(zeros[1] - 400) <= 30 and zeros[2] == 500


def test_dirichlet_never_leaves_a_worker_empty_and_large_alpha_is_near_iid():
    parts = partition(LABELS, 40, "dirichlet:0.001", seed=0)
    assert min(len(p) for p in parts) >= 1
    assert sum(len(p) for p in parts) == len(LABELS)
    sizes = [len(p) for p in partition(LABELS, 5, "dirichlet:100000", seed=0)]
    assert all(abs(s - 200) <= 10 for s in sizes)


def test_mix_groups_follow_their_own_spec_in_rank_order():
    parts = partition(LABELS, 10, "mix:5*iid+5*classes:2", seed=0)
    distinct = [len(np.unique(LABELS[p])) for p in parts]
    assert distinct[5:] == [2] * 5 and min(distinct[:5]) >= 8
    assert sum(len(p) for p in parts[:5]) == sum(len(p) for p in parts[5:]) == 500


def test_plain_spec_is_the_one_group_mix():
    plain, mixed = partition(LABELS, 6, "dirichlet:0.5", 9), partition(LABELS, 6, "mix:6*dirichlet:0.5", 9)
    assert all(np.array_equal(a, b) for a, b in zip(plain, mixed))


def test_parse_partition_returns_groups():
    assert parse_partition("iid") == (PartitionSpec("iid"),)
    assert parse_partition(" mix:5*iid + 5*classes:2 ", world_size=10) == (
        PartitionSpec("iid", None, 5), PartitionSpec("classes", 2, 5))
    assert parse_partition("sorted:12.5")[0].arg == 12.5


@pytest.mark.parametrize("spec, message", [
    ("bogus", r"unknown kind 'bogus'.*e\.g\. mix:"),
    ("", "empty"),
    ("iid:3", "iid takes no argument"),
    ("sorted", r"X must be a number, e\.g\. sorted:50"),
    ("sorted:101", r"\[0, 100\]"),
    ("label:-1", r"Y \(a label\) must be an integer >= 0"),
    ("dirichlet:-1", r"ALPHA must be > 0, e\.g\. dirichlet:0\.5"),
    ("dirichlet:nan", "ALPHA must be a number"),
    ("classes:0", r"C must be an integer >= 1, e\.g\. classes:2"),
    ("mix:5iid", r"must be N\*SPEC"),
    ("mix:0*iid+10*iid", "worker count N"),
    ("mix:5*mix:2*iid", "does not nest"),
    ("mix:5*iid+4*classes:2", r"sum to 9 but world_size is 10.*e\.g\. mix:5\*iid\+5\*classes:2"),
])
def test_bad_specs_raise_value_error_naming_the_spec(spec, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_partition(spec, world_size=10)
    assert repr(spec) in str(err.value) or spec == ""


def test_bad_arguments_need_labels_or_world_size():
    with pytest.raises(ValueError, match=r"world_size 0: must be an integer >= 1"):
        partition(LABELS, 0, "iid", 0)
    with pytest.raises(ValueError, match=r"C=11 exceeds the 10 classes.*e\.g\. classes:2"):
        partition(LABELS, 4, "classes:11", 0)
    with pytest.raises(ValueError, match="label 12 does not occur"):
        partition(LABELS, 4, "label:12", 0)
    with pytest.raises(ValueError, match="3 samples cannot give each of 4 workers"):
        partition(np.arange(3), 4, "iid", 0)
    with pytest.raises(ValueError, match="1-D integer"):
        partition(np.zeros(10), 2, "iid", 0)


# ---------------------------------------------------------------------------- IDX reader
def _write_idx(path: Path, array: np.ndarray, magic: int | None = None) -> None:
    header = (magic if magic is not None else 0x0800 + array.ndim).to_bytes(4, "big")
    header += b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    if path.suffix == ".gz":
        payload = gzip.compress(payload)
    path.write_bytes(payload)


def _make_mnist(folder: Path, n_train=12, n_test=5, gz=False, dotted=False) -> None:
    """Image i is filled with the value i, label i % 10: content tells which row came back."""
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for split, n in (("train", n_train), ("t10k", n_test)):
        images = np.broadcast_to(np.arange(n)[:, None, None], (n, 28, 28))
        sep = "." if dotted else "-"
        _write_idx(folder / f"{split}-images{sep}idx3-ubyte{suffix}", images)
        _write_idx(folder / f"{split}-labels{sep}idx1-ubyte{suffix}", np.arange(n) % 10)


@pytest.mark.parametrize("name", ["mnist", "mnist5k", "synthetic:100"])
def test_test_indices_keep_test_rows_like_train_indices_keep_training_rows(tmp_path, name):
    _make_mnist(tmp_path, gz=True)
    full = load_dataset(name, str(tmp_path))
    some = load_dataset(name, str(tmp_path), test_indices=lambda y: np.array([4, 0]))
    none = load_dataset(name, str(tmp_path), test_indices=lambda y: y[:0])
    assert np.array_equal(some.x_test, full.x_test[[4, 0]]) and np.array_equal(some.y_test, full.y_test[[4, 0]])
    assert none.x_test.shape == (0, *full.x_test.shape[1:]) and len(none.y_test) == 0
    assert np.array_equal(none.x_train, full.x_train)


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_plain_and_gz_with_row_selection(tmp_path, gz):
    path = tmp_path / ("x.idx" + (".gz" if gz else ""))
    data = np.arange(4 * 2 * 3).reshape(4, 2, 3)
    _write_idx(path, data)
    assert np.array_equal(read_idx(path, 3), data)
    assert np.array_equal(read_idx(path, 3, np.array([3, 1])), data[[3, 1]])
    none = read_idx(path, 3, np.array([], dtype=np.int64))  # the header only
    assert none.shape == (0, 2, 3) and none.dtype == np.uint8


def test_read_idx_rejects_wrong_magic_and_truncation(tmp_path):
    _write_idx(tmp_path / "bad", np.zeros((2, 2, 2)), magic=0x0D03)
    with pytest.raises(ValueError, match="magic 0x00000d03, expected 0x00000803"):
        read_idx(tmp_path / "bad", 3)
    _write_idx(tmp_path / "labels", np.zeros(5))
    with pytest.raises(ValueError, match="expected 0x00000803"):
        read_idx(tmp_path / "labels", 3)
    (tmp_path / "cut").write_bytes((tmp_path / "labels").read_bytes()[:-1])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_idx(tmp_path / "cut", 1)


def test_truncated_or_non_gzip_gz_files_give_one_clear_line(tmp_path):
    from fdahpc.data.readers import read_idx_shape

    _write_idx(tmp_path / "whole.gz", np.zeros((6, 2, 2)))
    (tmp_path / "cut.gz").write_bytes((tmp_path / "whole.gz").read_bytes()[:-9])
    (tmp_path / "plain.gz").write_bytes(b"\x00\x00\x08\x03" + bytes(40))
    for name in ("cut.gz", "plain.gz"):
        with pytest.raises(ValueError, match=f"{name}: not a complete gzip file.*re-download"):
            read_idx(tmp_path / name, 3)
    with pytest.raises(ValueError, match="plain.gz: not a complete gzip file"):
        read_idx_shape(tmp_path / "plain.gz", 3)


def test_a_truncated_gz_dataset_ends_the_job_with_exit_2(tmp_path):
    from conftest import run_python

    _make_mnist(tmp_path / "mnist", gz=True)
    images = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    images.write_bytes(images.read_bytes()[:-20])
    res = run_python(["-m", "fdahpc.train", "--dataset", "mnist", "--data-dir", str(tmp_path / "mnist"),
                      "--out", str(tmp_path / "run.h5")], timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "not a complete gzip file" in res.stderr
    assert not (tmp_path / "run.h5").exists()


@pytest.mark.parametrize("gz, dotted", [(False, False), (True, False), (False, True)])
def test_mnist_loader_normalizes_and_keeps_only_requested_rows(tmp_path, gz, dotted):
    _make_mnist(tmp_path, gz=gz, dotted=dotted)
    seen = []

    def keep(y):
        seen.append(y.copy())
        return np.array([11, 0, 5])

    data = load_dataset("mnist", str(tmp_path), train_indices=keep)
    assert np.array_equal(seen[0], np.arange(12) % 10)  # the callback sees all labels
    assert data.x_train.shape == (3, 1, 28, 28) and data.x_test.shape == (5, 1, 28, 28)
    assert np.array_equal(data.y_train, [1, 0, 5])
    expected = (np.array([11, 0, 5], dtype=np.float32) / 255 - 0.1307) / 0.3081
    assert np.allclose(data.x_train[:, 0, 3, 7], expected, atol=1e-6)
    assert data.x_train.shape[1:] == (1, 28, 28) and data.num_classes == 10


def test_torchvision_layout_and_label_mismatch(tmp_path):
    _make_mnist(tmp_path / "FashionMNIST" / "raw", n_train=6)
    assert len(load_dataset("fashion-mnist", str(tmp_path)).x_train) == 6
    _write_idx(tmp_path / "FashionMNIST" / "raw" / "train-labels-idx1-ubyte", np.arange(5))
    with pytest.raises(ValueError, match="6 images but 5 labels"):
        load_dataset("fashion-mnist", str(tmp_path))


def test_missing_files_and_data_dir_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte\[\.gz\].*--data-dir"):
        load_dataset("mnist", str(tmp_path))
    with pytest.raises(ValueError, match="data_dir None.*--data-dir"):
        load_dataset("mnist")
    with pytest.raises(ValueError, match="data_dir None.*cifar-10-batches-py"):
        load_dataset("cifar10")
    with pytest.raises(FileNotFoundError, match="expected data_batch_1.*--data-dir"):
        load_dataset("cifar10", str(tmp_path))
    with pytest.raises(ValueError, match=r"dataset 'imagenet': unknown.*e\.g\. mnist5k"):
        load_dataset("imagenet")


def test_train_indices_out_of_range_is_rejected(tmp_path):
    _make_mnist(tmp_path)
    with pytest.raises(ValueError, match=r"train_indices.*\[0, 12\)"):
        load_dataset("mnist", str(tmp_path), train_indices=lambda y: np.array([12]))


# ---------------------------------------------------------------------------- CIFAR-10 reader
def _make_cifar(folder: Path, per_batch=4, protocol=2) -> None:
    """Sample i (over all five train batches) is filled with i; labels i % 10."""
    folder.mkdir(parents=True, exist_ok=True)
    for b, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        ids = np.arange(b * per_batch, (b + 1) * per_batch)
        batch = {b"data": np.repeat(ids[:, None], 3072, axis=1).astype(np.uint8),
                 b"labels": [int(i % 10) for i in ids], b"batch_label": b"x"}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=protocol))


@pytest.mark.parametrize("protocol, nested", [(2, False), (pickle.HIGHEST_PROTOCOL, True)])
def test_cifar_loader_gathers_requested_rows_across_batches(tmp_path, protocol, nested):
    _make_cifar(tmp_path / "cifar-10-batches-py" if nested else tmp_path, protocol=protocol)
    rows = np.array([19, 0, 6, 13])
    data = load_dataset("cifar10", str(tmp_path), train_indices=lambda y: rows)
    assert data.x_train.shape == (4, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    assert np.array_equal(data.y_train, rows % 10) and np.array_equal(data.y_test, np.arange(20, 24) % 10)
    mean, std = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2470, 0.2435, 0.2616])
    assert np.allclose(data.x_train[:, :, 5, 5], (rows[:, None] / 255 - mean) / std, atol=1e-5)
    assert len(load_dataset("cifar10", str(tmp_path)).x_train) == 20


def test_cifar_reader_rejects_foreign_pickles(tmp_path):
    (tmp_path / "evil").write_bytes(pickle.dumps(os.system))
    with pytest.raises(ValueError, match=r"not a CIFAR-10 python batch.*(posix|nt)\.system"):
        read_cifar_batch(tmp_path / "evil")
    (tmp_path / "wrong").write_bytes(pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(ValueError, match=r"uint8 \(N, 3072\)"):
        read_cifar_batch(tmp_path / "wrong")


# ---------------------------------------------------------------------------- bundled and synthetic
def test_mnist5k_fixed_stratified_split():
    a = load_dataset("mnist5k", seed=0)
    b = load_dataset("mnist5k", seed=99)
    assert a.x_train.shape == (4000, 1, 28, 28) and a.x_test.shape == (1000, 1, 28, 28)
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int64
    assert np.bincount(a.y_train).tolist() == [400] * 10 and np.bincount(a.y_test).tolist() == [100] * 10
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert len(np.unique(a.y_train[:20])) > 1  # shuffled, not sorted by label like the CSV
    few = load_dataset("mnist5k", train_indices=lambda y: np.array([3, 2]))
    assert np.array_equal(few.x_train, a.x_train[[3, 2]])


def test_synthetic_is_seeded_and_learnable():
    a, b, c = (load_dataset("synthetic", seed=s) for s in (1, 1, 2))
    assert np.array_equal(a.x_train, b.x_train) and not np.array_equal(a.x_train, c.x_train)
    assert a.x_train.shape == (4000, 1, 28, 28) and np.bincount(a.y_train).tolist() == [400] * 10
    # Nearest class mean from the training set classifies the test set well.
    means = np.stack([a.x_train[a.y_train == k].reshape(-1, 784).mean(0) for k in range(10)])
    dist = ((a.x_test.reshape(-1, 1, 784) - means[None]) ** 2).sum(-1)
    assert np.mean(dist.argmin(1) == a.y_test) > 0.9


def test_sized_synthetic_keeps_only_the_selected_rows_of_the_same_images():
    whole = load_dataset("synthetic:20000", seed=3)
    assert whole.x_train.shape == (20000, 1, 28, 28) and whole.x_test.shape == (1000, 1, 28, 28)
    assert np.array_equal(load_dataset("synthetic:4000", seed=3).x_train, load_dataset("synthetic", seed=3).x_train)
    pick = np.array([19999, 5, 8192, 8191, 5])  # across chunks, out of order, repeated
    few = load_dataset("synthetic:20000", seed=3, train_indices=lambda y: pick)
    assert np.array_equal(few.x_train, whole.x_train[pick]) and np.array_equal(few.y_train, whole.y_train[pick])
    assert np.array_equal(few.x_test, whole.x_test)
    none = load_dataset("synthetic:20000", seed=3, train_indices=lambda y: np.zeros(0, np.int64))
    assert none.x_train.shape == (0, 1, 28, 28)


@pytest.mark.parametrize("name, message", [("synthetic:5", "N must be a whole number"), ("synthetic:x", "N must be"),
                                           ("mnist:100", "unknown"), ("synthetic:", "N must be")])
def test_sized_synthetic_names_are_checked(name, message):
    with pytest.raises(ValueError, match=message):
        load_dataset(name)
    with pytest.raises(ValueError, match=f"--dataset '{name}': {message}"):
        parse_args(["--dataset", name])


def test_dataset_rejects_wrong_dtypes():
    x, y = np.zeros((2, 1, 4, 4), np.float32), np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="train split must be float32"):
        Dataset("t", x.astype(np.float64), y, x, y, 10)
    assert "synthetic" in DATASETS and "mnist5k" in DATASETS


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST_DIR), reason="dataset-fashion-mnist not installed")
def test_real_fashion_mnist():
    seen = []
    data = load_dataset("fashion-mnist", train_indices=lambda y: seen.append(len(y)) or np.arange(0, 60000, 60))
    assert seen == [60000] and data.x_train.shape == (1000, 1, 28, 28)
    assert data.x_test.shape == (10000, 1, 28, 28) and np.bincount(data.y_test).tolist() == [1000] * 10
    # The fixed published statistics standardize the real data.
    assert abs(float(data.x_test.mean())) < 0.02 and abs(float(data.x_test.std()) - 1) < 0.02
