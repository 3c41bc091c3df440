"""Character-level samples of a text corpus, as index windows into one tensor.

A sample is ``context`` consecutive characters; its targets are the characters one
position later (``targets="sequence"``: every position predicts its next character, what
a causal language model trains on) or only the character after the window
(``targets="last"``: LEAF's Shakespeare task, the LSTM's). Samples never cross a role's
boundary, nor the boundary between a role's training and test text.

Memory: the corpus is one uint8 tensor shared by all samples; a set of samples is a
:class:`TokenWindows` (the start offsets, 8 bytes a sample), and a batch is gathered from
it only when indexed. Training samples start at every character (stride 1, as LEAF);
test samples at every ``context``-th one, so a ``sequence`` evaluation predicts each test
character exactly once.

What the partitioners see: the readers hand the ``train_indices`` callback one integer
per sample, and for a text that is the sample's role (its speaker in its play), so
``--partition roles`` gives each worker whole roles and ``iid`` deals the samples out at
random.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .shakespeare import Corpus

__all__ = ["TARGETS", "TokenWindows", "as_tensor", "windows_of"]

TARGETS = ("sequence", "last")


class TokenWindows:
    """Rows ``codes[s : s + width]`` (as int64) for each start ``s``; indexing with a slice
    gives another view, with an integer array or tensor the gathered ``(n, width)`` batch."""

    dtype = np.int64

    def __init__(self, codes: torch.Tensor, starts: torch.Tensor, width: int) -> None:
        self.codes, self.starts, self.width = codes, starts, width
        self._span = torch.arange(width, device=codes.device)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.starts), self.width)

    @property
    def device(self) -> torch.device:
        return self.codes.device

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return TokenWindows(self.codes, self.starts[key], self.width)
        if isinstance(key, (int, np.integer)):
            return self._gather(torch.tensor([int(key)]))[0]
        return self._gather(torch.as_tensor(np.asarray(key) if not torch.is_tensor(key) else key))

    def _gather(self, idx: torch.Tensor) -> torch.Tensor:
        starts = self.starts[idx.to(self.starts.device)]
        return self.codes[starts[:, None] + self._span].long()

    def all(self) -> torch.Tensor:
        """Every row, gathered (for small sets only)."""
        return self._gather(torch.arange(len(self), device=self.starts.device))

    def to(self, device) -> "TokenWindows":
        return TokenWindows(self.codes.to(device), self.starts.to(device), self.width)


def as_tensor(x) -> torch.Tensor | TokenWindows:
    """A NumPy array as a tensor (no copy); windows stay windows."""
    return x if isinstance(x, TokenWindows) else torch.from_numpy(x)


def _starts(lo: np.ndarray, hi: np.ndarray, context: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts of every window of ``context`` + 1 characters inside [lo_r, hi_r) at the
    given stride, and the role of each."""
    counts = np.maximum(0, (hi - lo - context - 1) // stride + 1)
    counts[hi - lo < context + 1] = 0
    role = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
    first = np.repeat(lo, counts)
    within = np.arange(counts.sum(), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return first + within * stride, role


def windows_of(corpus: Corpus, context: int, targets: str, keep: Callable | None, keep_test: Callable | None,
               name: str, select: Callable):
    """(x_train, y_train, x_test, y_test) of ``corpus``: ``x`` as windows, ``y`` as windows
    one character later (``sequence``) or the int64 next characters (``last``).
    ``keep``/``keep_test`` pick samples from their role ids (``select`` checks the pick)."""
    if targets not in TARGETS:
        raise ValueError(f"targets {targets!r}: choose one of {', '.join(TARGETS)}")
    if not isinstance(context, int) or context < 1:
        raise ValueError(f"--context {context!r}: must be an integer >= 1, e.g. --context 64")
    for which, lo, hi in (("training", corpus.start, corpus.test_start), ("test", corpus.test_start, corpus.end)):
        longest = int((hi - lo).max())
        if context + 1 > longest:  # no sample at all in this split
            raise ValueError(f"--context {context}: longer than the text (the longest role's {which} text has "
                             f"{longest} characters, a sample needs context + 1); use --context {max(1, longest - 1)} "
                             "or less")
    codes = torch.from_numpy(corpus.codes)
    out = []
    for lo, hi, stride, pick in ((corpus.start, corpus.test_start, 1, keep),
                                 (corpus.test_start, corpus.end, context, keep_test)):
        starts, role = _starts(lo, hi, context, stride)
        rows = select(pick, role, name)
        if rows is not None:
            starts = starts[rows]
        del role
        s = torch.from_numpy(starts)
        x = TokenWindows(codes, s, context)
        y = TokenWindows(codes, s + 1, context) if targets == "sequence" else corpus.codes[starts + context].astype(np.int64)
        out += [x, y]
    return tuple(out)
