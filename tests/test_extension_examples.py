"""The extension points, used for real: a sync trigger that reads the loss, a buffer rule
with its own option and a third mode with its own flag, each defined here, in
docs/extending.md or in examples/ and registered with one line, nothing in the package
edited. An extension's own options become flags and TOML keys (``--plateau-steps``,
``--freshest-k``, ``--gossip-every``).

- ``loss-plateau``: synchronize once the workers' mean training loss has not reached a new
  low for ``plateau_steps`` steps; driven through :class:`fdahpc.ModelAverager` on one and
  two MPI ranks whose losses differ, against the sync steps worked out by hand, and by the
  training loop (``--trigger loss-plateau``), against a replay of the losses it recorded.
- ``freshest`` (docs/extending.md, "Adding a buffer rule"): the mean of the least-stale
  buffered models; built through the registry, aggregating a written-down buffer against a
  hand computation, then a semi-async run on two MPI ranks with ``--freshest-k 2``.
- ``gossip`` (examples/gossip_mode.py): a mode in which each rank averages with its right
  neighbour every ``--gossip-every`` steps; on two ranks it ends on FedAvg's model.
"""

import json
import math
import os
import re
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from fdahpc.strategies import TRIGGERS, Trigger, trigger

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------- a trigger that reads the loss

@dataclass(frozen=True)
class PlateauOptions:
    """How many steps without a new low of the mean loss end a round."""

    plateau_steps: int = 5

    def __post_init__(self) -> None:
        if isinstance(self.plateau_steps, bool) or not isinstance(self.plateau_steps, int) or self.plateau_steps < 1:
            raise ValueError(f"--plateau-steps {self.plateau_steps!r}: must be an integer >= 1, e.g. 5")


class LossPlateauTrigger(Trigger):
    """Synchronize when the ranks' mean training loss has not gone below its lowest value of
    the round for ``plateau_steps`` steps; the round starts afresh after each average."""

    Options = PlateauOptions
    needs_loss = True
    round_based = False  # it reads every worker's loss: client sampling is refused
    state_bytes = 4  # one float32 reduced per step
    _state = ("best", "since")

    def __init__(self, comm, patience: int) -> None:
        self.comm, self.patience = comm, patience
        self.best, self.since = math.inf, 0

    @classmethod
    def build(cls, ctx, options: PlateauOptions) -> "LossPlateauTrigger":
        return cls(ctx.comm, options.plateau_steps)

    def should_sync(self, step, w, anchor, loss=None) -> bool:
        mean = float(self.comm.allreduce_mean_(np.array([loss], dtype=np.float32), "monitor")[0])
        self.record("plateau", loss=mean)
        if mean < self.best:
            self.best, self.since = mean, 0
            return False
        self.since += 1
        if self.since < self.patience:
            return False
        self.best, self.since = math.inf, 0
        return True


def register() -> None:
    trigger("loss-plateau")(LossPlateauTrigger)  # the one registry line


@pytest.fixture
def plateau():
    register()
    yield
    TRIGGERS.pop("loss-plateau", None)


# The ranks' mean loss over 10 steps, and each rank's deviation from it (rank 0 adds it,
# rank 1 subtracts it): alone, rank 0 would decide otherwise. With plateau_steps 2, by hand:
# 4 3 (low) 3.5 3.25 -> sync at 4; 2 (low) 2.5 2.5 -> sync at 7; 1 (low) 1 1 -> sync at 10.
MEAN_LOSS = [4.0, 3.0, 3.5, 3.25, 2.0, 2.5, 2.5, 1.0, 1.0, 1.0]
DEVIATION = [0.0, 1.0, -1.0, 1.0, 0.0, -1.0, 1.0, 0.0, 0.5, -0.5]
SYNCS_BY_HAND = [4, 7, 10]


def drive(comm) -> dict:
    """Real SGD steps of a small model on every rank, the scripted losses handed to the averager."""
    from fdahpc import ModelAverager

    torch.manual_seed(comm.rank)  # different models: the average is visible
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    avg = ModelAverager(model, comm, "fedavg", trigger="loss-plateau", plateau_steps=2)
    x, y = torch.randn(8, 3, generator=torch.Generator().manual_seed(comm.rank)), torch.ones(8, 1)
    sign = 1.0 if comm.rank == 0 else -1.0
    syncs = []
    for step, (mean, dev) in enumerate(zip(MEAN_LOSS, DEVIATION), start=1):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if avg.step(loss=mean + sign * dev if comm.world_size > 1 else mean):
            syncs.append(step)
    return {"syncs": syncs, "model": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist(),
            "comm_bytes": avg.comm_bytes, "dim": avg.flat.dim}


def test_a_loss_trigger_registered_in_one_line_runs_in_model_averager(plateau):
    from fdahpc import ModelAverager
    from fdahpc.comm import LocalCommunicator
    from fdahpc.strategies import strategy_options

    out = drive(LocalCommunicator())
    assert out["syncs"] == SYNCS_BY_HAND
    assert out["comm_bytes"] == 2 * 4 * out["dim"] * 3 + 4 * 10  # models up and down at 3 syncs, 4 bytes a step
    avg = ModelAverager(torch.nn.Linear(2, 1), LocalCommunicator(), "fedavg", trigger="loss-plateau")
    with pytest.raises(ValueError, match=r"^loss: the loss-plateau trigger reads the training loss"):
        avg.step()
    with pytest.raises(ValueError, match=r"^--plateau-steps 0: must be an integer >= 1"):
        ModelAverager(torch.nn.Linear(2, 1), LocalCommunicator(), "fedavg", trigger="loss-plateau", plateau_steps=0)
    with pytest.raises(ValueError, match=r"^--clients-per-round: client sampling needs round-based syncing"):
        strategy_options("fedavg", "loss-plateau", {"clients_per_round": 1})
    # The command line: Θ is not read by a trigger that is not Θ-driven, sampling not by one that reads losses.
    from fdahpc.config import TrainConfig
    from fdahpc.run import resolve

    with pytest.raises(ValueError, match=r"^--theta: --strategy fedavg --trigger loss-plateau does not read it"):
        resolve(TrainConfig(strategy="fedavg", trigger="loss-plateau", theta="auto"))
    with pytest.raises(ValueError, match=r"^--clients-per-round: "):
        resolve(TrainConfig(strategy="fedavg", trigger="loss-plateau", clients_per_round=1))
    # The periodic trigger ignores the loss it is given.
    periodic = ModelAverager(torch.nn.Linear(2, 1), LocalCommunicator(), "fedavg", tau=2)
    assert [periodic.step(loss=float(s)) for s in range(4)] == [False, True, False, True]


def test_an_extension_option_is_a_flag_and_a_toml_key(plateau, tmp_path):
    """The trigger's own option becomes ``--plateau-steps`` and a TOML key with no field in
    TrainConfig; it is checked by its class, recorded with the run's options, and refused,
    naming its reader, in a run that does not read it."""
    from fdahpc.cli import parse_args

    plan = parse_args(["--strategy", "fedavg", "--trigger", "loss-plateau", "--plateau-steps", "3"])
    assert plan.options.trigger_options.plateau_steps == 3 and "plateau_steps" in plan.cfg.given
    assert json.loads(plan.cfg.to_json())["plateau_steps"] == 3
    toml = tmp_path / "p.toml"
    toml.write_text('strategy = "fedavg"\ntrigger = "loss-plateau"\nplateau-steps = 4\n')
    assert parse_args(["--config", str(toml)]).options.trigger_options.plateau_steps == 4
    with pytest.raises(ValueError, match=r"^--plateau-steps 0: must be an integer >= 1"):
        parse_args(["--strategy", "fedavg", "--trigger", "loss-plateau", "--plateau-steps", "0"])
    with pytest.raises(ValueError, match=r"^--plateau-steps: --strategy fedavg does not read it \(read by --trigger loss-plateau\)"):
        parse_args(["--strategy", "fedavg", "--plateau-steps", "3"])


def _replay(losses, patience):
    """The sync steps the plateau rule gives for a series of mean losses, by the definition."""
    syncs, start = [], 0
    for step in range(1, len(losses) + 1):
        round_ = losses[start:step]
        lows = [i for i, x in enumerate(round_) if x < min(round_[:i], default=math.inf)]
        if len(round_) - 1 - lows[-1] >= patience:
            syncs.append(step)
            start = step
    return syncs


def test_the_training_loop_hands_the_loss_to_the_trigger(plateau, tmp_path):
    """``python -m fdahpc.train --trigger loss-plateau``'s loop, in process: the trigger sees each
    step's real training loss and synchronizes where the recorded losses say it should."""
    import h5py

    from fdahpc.comm import LocalCommunicator
    from fdahpc.config import TrainConfig
    from fdahpc.run import build, resolve, run as train

    cfg = TrainConfig(strategy="fedavg", trigger="loss-plateau", dataset="mnist5k", max_steps=40, batch_size=16,
                      lr=0.05, log_every=10**6, out=str(tmp_path / "p.h5"))
    res = train(build(resolve(cfg), LocalCommunicator()))
    with h5py.File(tmp_path / "p.h5") as f:
        steps, losses, syncs = f["plateau/step"][:], f["plateau/loss"][:], f["sync/step"][:].tolist()
    assert _replay(MEAN_LOSS, 2) == SYNCS_BY_HAND  # the replay agrees with the hand computation
    assert steps.tolist() == list(range(1, 41)) and np.isfinite(losses).all() and len(set(losses.tolist())) > 30
    # ... and the run's closing sync at step 40 (the held model) when the last plateau came earlier
    replayed = _replay(losses.tolist(), PlateauOptions.plateau_steps)
    assert syncs == replayed + ([40] if replayed[-1] != 40 else []) and res["syncs"] == len(syncs) > 1
    assert res["final_sync"] == int(replayed[-1] != 40)


SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
import test_extension_examples as ext
from fdahpc.comm import make_communicator

ext.register()
comm = make_communicator("mpi")
with open(f"{{sys.argv[1]}}/rank{{comm.rank}}.json", "w") as fh:  # one file a rank: stdout lines interleave
    json.dump(ext.drive(comm), fh)
"""


@pytest.mark.slow
def test_the_loss_trigger_decides_alike_on_two_ranks_from_the_mean_loss(tmp_path):
    from conftest import run_python

    script = tmp_path / "plateau.py"
    script.write_text(SCRIPT.format(here=HERE))
    proc = run_python([str(script), str(tmp_path)], ranks=2, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["syncs"] == SYNCS_BY_HAND
        assert r["comm_bytes"] == 2 * (2 * 4 * r["dim"] * 3 + 4 * 10)
    assert ranks[0]["model"] == ranks[1]["model"]  # step 10 averaged the two models


# ------------------------------------------------------------ a buffer rule with its own option

def _docs_rule_block() -> str:
    from conftest import REPO

    text = open(f"{REPO}/docs/extending.md").read()
    return re.search(r"# Adding a buffer rule.*?```python\n(.*?)```", text, re.S).group(1)


@pytest.fixture
def freshest():
    from fdahpc.semiasync.rules import BUFFER_RULES

    exec(compile(_docs_rule_block(), "docs/extending.md", "exec"), {})
    yield BUFFER_RULES["freshest"]
    BUFFER_RULES.pop("freshest", None)


def test_the_docs_buffer_rule_aggregates_a_buffer_as_by_hand(freshest):
    from fdahpc.config import TrainConfig
    from fdahpc.run import mode_of, resolve
    from fdahpc.semiasync.rules import Update, build_buffer_rule

    models = [[1.0, 2.0], [3.0, 4.0], [5.0, 7.0], [7.0, 8.0]]
    staleness = [2, 0, 1, 0]
    buffer = [Update(client=c, version=5 - s, staleness=s, n_samples=10, payload=torch.tensor(m, dtype=torch.float64))
              for c, (m, s) in enumerate(zip(models, staleness))]
    counts = np.zeros(4, dtype=int)
    for k, by_hand, weights in ((1, [5.0, 6.0], [0, 0.5, 0, 0.5]),  # the two fresh ones (tied at staleness 0)
                                (2, [5.0, 6.0], [0, 0.5, 0, 0.5]),
                                (3, [5.0, 19.0 / 3.0], [0, 1 / 3, 1 / 3, 1 / 3]),
                                (4, [4.0, 21.0 / 4.0], [0.25] * 4)):
        w = torch.zeros(2, dtype=torch.float64)
        rule = build_buffer_rule("freshest", {"freshest_k": k})
        p = rule.aggregate_(w, buffer, counts, 4)
        np.testing.assert_allclose(p, weights, rtol=0, atol=1e-15)
        np.testing.assert_allclose(w.numpy(), by_hand, rtol=1e-15, atol=0)
    assert build_buffer_rule("freshest", {}).k == 1
    with pytest.raises(ValueError, match=r"^--freshest-k 0: must be an integer >= 1"):
        build_buffer_rule("freshest", {"freshest_k": 0})
    # The mode derives what it reads from the registry, and refuses another rule's option.
    mode = mode_of("semiasync")
    assert "freshest" in mode.strategies() and mode.RULE_OPTIONS["freshest"] == {"freshest_k"}
    assert "--strategy freshest" in mode.readers("freshest_k")
    plan = resolve(TrainConfig(mode="semiasync", strategy="freshest", clients=4, buffer=2))
    reads = mode.reads(plan.cfg, plan.options)
    assert "freshest_k" in reads and "server_lr" not in reads
    with pytest.raises(ValueError, match=r"^--server-lr: .*freshest.*fedbuff, mstep, wkafl"):
        resolve(TrainConfig(mode="semiasync", strategy="freshest", server_lr=0.5))


RUN_RULE = """
import sys
sys.path.insert(0, {here!r})
import test_extension_examples as ext
exec(compile(ext._docs_rule_block(), "docs/extending.md", "exec"), {{}})
from fdahpc.train import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_the_docs_buffer_rule_runs_a_semiasync_job(tmp_path):
    import h5py
    from conftest import run_python

    script = tmp_path / "freshest.py"
    script.write_text(RUN_RULE.format(here=HERE))
    out = tmp_path / "f.h5"
    proc = run_python([str(script), "--mode", "semiasync", "--strategy", "freshest", "--dataset", "mnist5k",
                       "--model", "lenet5", "--batch-size", "16", "--clients", "6", "--buffer", "3", "--rounds", "5",
                       "--tau", "2", "--speed-ratio", "10", "--log-every", "1000", "--freshest-k", "2",
                       "--out", str(out)], ranks=2, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with h5py.File(out) as f:
        assert f.attrs["rounds_done"] == 5 and np.isfinite(f["final/model"][:]).all()
        assert json.loads(f.attrs["config"])["freshest_k"] == 2  # its own flag, recorded with the others
        weights = f["round/weights"][:]
        staleness = f["round/update_staleness"][:]
    # Each round's weights: 1/m on the m least-stale uploads (k = 2 plus ties), 0 elsewhere.
    assert weights.shape == staleness.shape == (5, 3) and (staleness >= 0).all()
    for p, tau in zip(weights, staleness):
        fresh = tau <= np.sort(tau)[1]
        np.testing.assert_allclose(p, fresh / fresh.sum(), rtol=0, atol=1e-15)
    assert (staleness.min(axis=1) < staleness.max(axis=1)).any()  # some round left a staler upload out


# ------------------------------------------------------------- a third mode

RUN_MODE = """
import sys
sys.path.insert(0, {examples!r})
import fdahpc.run
fdahpc.run.MODES["gossip"] = "gossip_mode"  # the one registry line
from fdahpc.train import main
sys.exit(main(sys.argv[1:]))
"""

COMMON_FLAGS = ["--dataset", "mnist5k", "--model", "lenet5", "--batch-size", "16", "--optimizer", "sgd", "--lr", "0.05",
                "--max-steps", "20", "--log-every", "1000"]


@pytest.mark.slow
def test_a_third_mode_from_its_own_file_matches_fedavg_on_two_ranks(tmp_path):
    """``examples/gossip_mode.py`` (its own file) and one registry line make ``--mode gossip``,
    with its own flag ``--gossip-every``, run by the skeleton like the built-in modes. With
    two ranks averaging with the right neighbour is averaging with the other rank: the run
    ends on FedAvg's model with ``--tau`` equal to ``--gossip-every``."""
    import h5py
    from conftest import REPO, run_python

    script = tmp_path / "gossip.py"
    script.write_text(RUN_MODE.format(examples=os.path.join(REPO, "examples")))
    gossip, fedavg = tmp_path / "g.h5", tmp_path / "a.h5"
    proc = run_python([str(script), "--mode", "gossip", "--gossip-every", "5", *COMMON_FLAGS, "--out", str(gossip)],
                      ranks=2, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_python(["-m", "fdahpc.train", "--strategy", "fedavg", "--tau", "5", *COMMON_FLAGS,
                       "--out", str(fedavg)], ranks=2, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with h5py.File(gossip) as g, h5py.File(fedavg) as a:
        assert (g.attrs["mode"], g.attrs["status"], g.attrs["gossips"]) == ("gossip", "finished", 4)
        assert json.loads(g.attrs["config"])["gossip_every"] == 5
        assert g["gossip/step"][:].tolist() == a["sync/step"][:].tolist() == [5, 10, 15, 20]
        np.testing.assert_allclose(g["final/model"][:], a["final/model"][:], rtol=0, atol=1e-6)
    # The mode's own flag is refused elsewhere, naming who reads it.
    proc = run_python([str(script), "--strategy", "fedavg", "--gossip-every", "5", "--out", str(tmp_path / "x.h5")],
                      ranks=1, timeout=120)
    assert proc.returncode == 2 and "--gossip-every: only used with --mode gossip" in proc.stderr
    assert not (tmp_path / "x.h5").exists()
