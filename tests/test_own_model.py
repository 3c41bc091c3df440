"""A user's own model and dataset (``--model module.path:function``, ``--dataset
module.path:function``) with no change to the package: the call convention and every
setup error in this process, then real ``mpiexec -n 2`` jobs in both modes, every sync
strategy and every semi-async rule, every partitioner, a resume, the error lines on two
ranks and the command docs/own-model.md gives."""

import json
import os
import re
import shutil
import sys

import h5py
import numpy as np
import pytest
import torch

from conftest import REPO, run_python, train_inprocess
from fdahpc.config import TrainConfig
from fdahpc.run import resolve
from fdahpc.data import load_dataset, partition
from fdahpc.models import build_own_model
from fdahpc.semiasync.rules import SEMIASYNC_RULES
from fdahpc.strategies import STRATEGIES
from fdahpc.user import call, is_ref

#: The user's module the tests write out beside its data file: an MLP with BatchNorm (so
#: the models' buffers travel too) over 5 classes of 12-feature points.
MYTASK = '''
import os
import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


def data():
    f = np.load(os.path.join(HERE, "mytask.npz"))
    return f["x_train"], f["y_train"], torch.from_numpy(f["x_test"]), torch.from_numpy(f["y_test"])


def data_in(data_dir):
    f = np.load(os.path.join(data_dir, "mytask.npz"))
    return f["x_train"], f["y_train"], f["x_test"], f["y_test"]


def net(input_shape, num_classes):
    (features,) = input_shape
    return nn.Sequential(nn.Linear(features, 24), nn.BatchNorm1d(24), nn.ReLU(), nn.Linear(24, num_classes))


def net_kwargs(**options):
    return nn.Linear(options["input_shape"][0], options["num_classes"])


class Net(nn.Module):
    def __init__(self, num_classes, hidden=16):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.LazyLinear(hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.body(x)


def flat(input_shape, num_classes):  # any sample shape: e.g. MNIST's (1, 28, 28)
    size = int(np.prod(input_shape))
    return nn.Sequential(nn.Flatten(), nn.Linear(size, 32), nn.ReLU(), nn.Linear(32, num_classes))


class Codes(nn.Module):  # integer samples: a text's character windows
    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.embed, self.out = nn.Embedding(num_classes, 8), nn.Linear(8 * input_shape[0], num_classes)

    def forward(self, x):
        return self.out(self.embed(x).flatten(1))


def fixed():  # no parameters at all: a network for 12 features and 5 classes
    return nn.Linear(12, 5)


# What the error tests call.
NOT_A_FUNCTION = 3


def needs_width(width):
    return nn.Linear(12, width)


def net_raises():
    raise RuntimeError("no GPU here")


def net_not_module():
    return "a network"


def net_wrong_out(input_shape):
    return nn.Linear(input_shape[0], 3)


def net_wrong_in():
    return nn.Linear(7, 5)


def net_float64():
    return nn.Linear(12, 5).double()


def _base():
    return data()


def data_three():
    return data()[:3]


def data_dict():
    return dict(zip(("x_train", "y_train", "x_test", "y_test"), data()))


def data_list_items():
    x, y, xt, yt = data()
    return x.tolist(), y, xt, yt


def data_lengths():
    x, y, xt, yt = data()
    return x, y[:-1], xt, yt


def data_shapes():
    x, y, xt, yt = data()
    return x, y, xt[:, :5], yt


def data_float_labels():
    x, y, xt, yt = data()
    return x, y.astype(np.float32), xt, yt


def data_negative():
    x, y, xt, yt = data()
    return x, y - 1, xt, yt


def data_flat():
    x, y, xt, yt = data()
    return x[:, 0], y, xt[:, 0], yt


def data_raises():
    raise FileNotFoundError("mytask.npz moved")
'''

N_TRAIN, N_TEST, FEATURES, CLASSES = 400, 100, 12, 5


def write_task(folder):
    """``mytask.py`` and its data ``mytask.npz`` (separable Gaussian clouds) in ``folder``."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(7)
    centres = rng.normal(0, 1.5, size=(CLASSES, FEATURES))
    arrays = {}
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        y = rng.integers(0, CLASSES, size=n)
        arrays[f"x_{split}"] = (centres[y] + rng.normal(size=(n, FEATURES))).astype(np.float32)
        arrays[f"y_{split}"] = y.astype(np.int64)
    np.savez(os.path.join(folder, "mytask.npz"), **arrays)
    with open(os.path.join(folder, "mytask.py"), "w") as fh:
        fh.write(MYTASK)
    with open(os.path.join(folder, "mytask_broken.py"), "w") as fh:
        fh.write("import numpy\nraise RuntimeError('half-written module')\n")
    return arrays


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("task")
    return folder, write_task(folder)


@pytest.fixture
def in_task(task, monkeypatch):
    """This process started in the task's folder (as a job would be), sys.path restored after."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    monkeypatch.chdir(task[0])
    return task


# ------------------------------------------------------------------------------ in this process
@pytest.mark.parametrize("text,ok", [("mytask:net", True), ("a.b.c:f_1", True), ("_m:_f", True),
                                     ("synthetic:1000", False), ("mytask", False), ("mytask.net", False),
                                     ("mytask:", False), (":net", False), ("my-task:net", False),
                                     ("mytask:net:x", False), ("1mod:net", False), (None, False)])
def test_reference_syntax(text, ok):
    assert is_ref(text) is ok


def test_the_dataset_is_what_the_function_returns_with_the_rows_asked_for(in_task):
    _, arrays = in_task
    whole = load_dataset("mytask:data")
    assert whole.own and whole.name == "mytask:data" and whole.num_classes == CLASSES and whole.vocab == ""
    for key in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(whole, key), arrays[key]), key
    assert whole.x_train.dtype == np.float32 and whole.y_test.dtype == np.int64
    rows = np.array([5, 1, 399])
    part = load_dataset("mytask:data", train_indices=lambda y: rows, test_indices=lambda y: y[:0])
    assert np.array_equal(part.x_train, arrays["x_train"][rows])
    assert np.array_equal(part.y_train, arrays["y_train"][rows])
    assert part.x_test.shape == (0, FEATURES) and part.num_classes == CLASSES  # classes from the whole set
    via_dir = load_dataset("mytask:data_in", data_dir=str(in_task[0]))
    assert np.array_equal(via_dir.x_test, arrays["x_test"])


@pytest.mark.parametrize("spec", ["iid", "sorted:50", "label:2", "dirichlet:0.5", "classes:2", "mix:2*iid+2*classes:1"])
def test_every_partitioner_sees_the_own_labels(in_task, spec):
    """Each rank keeps exactly the rows the partitioner gives it from the function's labels."""
    _, arrays = in_task
    parts = partition(arrays["y_train"], 4, spec, 3)
    kept = [load_dataset("mytask:data", train_indices=lambda y, r=r: partition(y, 4, spec, 3)[r]) for r in range(4)]
    for r in range(4):
        assert np.array_equal(kept[r].y_train, arrays["y_train"][parts[r]])
        assert np.array_equal(kept[r].x_train, arrays["x_train"][parts[r]])
    if spec == "classes:2":
        assert all(len(np.unique(k.y_train)) == 2 for k in kept)


@pytest.mark.parametrize("ref,params", [("mytask:net", 12 * 24 + 24 + 24 * 2 + 24 * 5 + 5),
                                        ("mytask:net_kwargs", 12 * 5 + 5), ("mytask:Net", 12 * 16 + 16 + 16 * 5 + 5),
                                        ("mytask:fixed", 12 * 5 + 5)])
def test_call_convention_passes_the_named_keywords(in_task, ref, params):
    torch.manual_seed(0)
    model = build_own_model(ref, (FEATURES,), torch.float32, CLASSES)
    assert sum(p.numel() for p in model.parameters()) == params and model.training
    torch.manual_seed(0)
    again = build_own_model(ref, (FEATURES,), torch.float32, CLASSES)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_the_output_check_leaves_batchnorm_statistics_alone(in_task):
    model = build_own_model("mytask:net", (FEATURES,), torch.float32, CLASSES)
    bn = model[1]
    assert int(bn.num_batches_tracked) == 0 and torch.equal(bn.running_mean, torch.zeros(24))


def test_given_values_a_function_does_not_take_are_refused(in_task):
    with pytest.raises(ValueError, match=r"^--data-dir: mytask:data takes no 'data_dir' parameter, so it would be "
                                         r"ignored; add a data_dir parameter to data or drop --data-dir$"):
        call("--dataset", "mytask:data", {"data_dir": "/d", "seed": 0}, given={"data_dir": "--data-dir"})


@pytest.mark.distributed
def test_own_model_on_a_built_in_image_dataset(comm, in_task, tmp_path):
    setup, res = train_inprocess(comm, tmp_path / "m.h5", model="mytask:flat", dataset="mnist5k", strategy="fedavg",
                                 tau=5, max_steps=30)
    assert setup.job.flat.dim == 784 * 32 + 32 + 32 * 10 + 10 and res["final_accuracy"] > 0.5


@pytest.mark.distributed
def test_own_model_on_a_text(comm, in_task, tmp_path):
    from fdahpc.data.shakespeare import load_corpus

    try:
        vocab = len(load_corpus(None).vocab)
    except (FileNotFoundError, ValueError):
        pytest.skip("Shakespeare corpus not fetched (python -m fdahpc.data fetch shakespeare)")
    setup, res = train_inprocess(comm, tmp_path / "t.h5", model="mytask:Codes", dataset="shakespeare", context=12,
                                 strategy="fedavg", tau=5, max_steps=10, eval_samples=200)
    assert setup.job.flat.dim == vocab * 8 + 8 * 12 * vocab + vocab and np.isfinite(res["final_accuracy"])


def test_built_in_datasets_keep_their_meaning():
    assert TrainConfig(dataset="synthetic:1000").dataset == "synthetic:1000"
    with pytest.raises(ValueError, match=r"dataset 'synthetic:abc': N must be a whole number"):
        resolve(TrainConfig(dataset="synthetic:abc"))
    with pytest.raises(ValueError, match=r"--context: only used with --model gpt or lstm"):
        resolve(TrainConfig(model="mytask:net", dataset="mytask:data", context=12))  # a window only on a text


def test_toml_names_them_too(in_task, tmp_path, capsys):
    """The same strings in a TOML file (flat or in the [run] table) run the job."""
    from fdahpc.train import main

    toml = tmp_path / "own.toml"
    toml.write_text('model = "mytask:net"\n[run]\ndataset = "mytask:data"\npartition = "dirichlet:0.5"\n'
                    '[training]\nmax-steps = 6\nbatch-size = 8\n')
    assert main(["--config", str(toml), "--strategy", "fedavg", "--tau", "3", "--out", str(tmp_path / "t.h5")]) == 0
    with h5py.File(tmp_path / "t.h5", "r") as f:
        got = tuple(f.attrs[k] for k in ("model", "dataset", "steps", "syncs"))
    assert got == ("mytask:net", "mytask:data", 6, 2)


def test_a_resolved_name_is_recorded_as_given():
    cfg = resolve(TrainConfig(model="mytask:net", dataset="mytask:data", partition="dirichlet:0.5")).cfg  # nothing imported yet
    assert (cfg.model, cfg.dataset) == ("mytask:net", "mytask:data")
    assert json.loads(cfg.to_json())["model"] == "mytask:net"


#: Each setup error: the flags (beside a valid rest) and the one line's text.
ERRORS = [
    (["--model", "mynet"], r"--model 'mynet': unknown; choose one of lenet5, .* or your own module\.path:function"),
    (["--model", "mytask.net"], r"--model 'mytask\.net': unknown; .*module\.path:function"),
    (["--dataset", "mydata"], r"--dataset 'mydata': unknown; use one of mnist5k, .* or your own module\.path:function"),
    (["--model", "nosuch_mod:net"], r"--model nosuch_mod:net: no module 'nosuch_mod' in .* or on PYTHONPATH; start the "
                                    r"job in the folder that holds nosuch_mod\.py or add that folder to PYTHONPATH"),
    (["--dataset", "nosuch_pkg.sub:data"], r"--dataset nosuch_pkg\.sub:data: no module 'nosuch_pkg\.sub'"),
    (["--model", "mytask_broken:net"], r"--model mytask_broken:net: importing mytask_broken raised RuntimeError: "
                                       r"half-written module; fix the module"),
    (["--model", "mytask:nope"], r"--model mytask:nope: .*mytask\.py has no 'nope'; define nope there"),
    (["--model", "mytask:NOT_A_FUNCTION"], r"--model mytask:NOT_A_FUNCTION: mytask\.NOT_A_FUNCTION is not callable "
                                           r"\(its type: int\); name a function"),
    (["--model", "mytask:needs_width"], r"--model mytask:needs_width: its parameter 'width' has no default and fdahpc "
                                        r"passes only num_classes, input_shape \(by keyword\); give width a default"),
    (["--model", "mytask:net_raises"], r"--model mytask:net_raises: calling net_raises\(\) raised RuntimeError: no GPU "
                                       r"here; fix the function"),
    (["--model", "mytask:net_not_module"], r"--model mytask:net_not_module: returned a str, not a torch\.nn\.Module"),
    (["--model", "mytask:net_wrong_out"], r"--model mytask:net_wrong_out: on a batch of 2 samples of shape \(12,\) "
                                          r"\(float32\) it returned shape \(2, 3\), but the dataset has 5 classes; "
                                          r"return logits of shape \(2, 5\)"),
    (["--model", "mytask:net_wrong_in"], r"--model mytask:net_wrong_in: on a batch of 2 samples of shape \(12,\) "
                                         r"\(float32\) it raised RuntimeError: .*; make it take the dataset's samples"),
    (["--model", "mytask:net_float64"], r"--model mytask:net_float64: weight is torch\.float64; fdahpc communicates "
                                        r"float32"),
    (["--dataset", "mytask:data_raises"], r"--dataset mytask:data_raises: calling data_raises\(\) raised "
                                          r"FileNotFoundError: mytask\.npz moved; fix the function"),
    (["--dataset", "mytask:data_three"], r"--dataset mytask:data_three: returned a tuple of 3; return the tuple "
                                         r"\(x_train, y_train, x_test, y_test\)"),
    (["--dataset", "mytask:data_dict"], r"--dataset mytask:data_dict: returned a dict; return the tuple"),
    (["--dataset", "mytask:data_list_items"], r"--dataset mytask:data_list_items: x_train is a list; return NumPy "
                                              r"arrays or torch tensors"),
    (["--dataset", "mytask:data_lengths"], r"--dataset mytask:data_lengths: 400 samples in x_train but 399 labels in "
                                           r"y_train; return one label per sample"),
    (["--dataset", "mytask:data_shapes"], r"--dataset mytask:data_shapes: test samples have shape \(5,\), training "
                                          r"samples \(12,\); return both splits with the same sample shape"),
    (["--dataset", "mytask:data_float_labels"], r"--dataset mytask:data_float_labels: y_train is float32 \(400,\); "
                                                r"labels must be integer class ids"),
    (["--dataset", "mytask:data_negative"], r"--dataset mytask:data_negative: y_train holds the negative label -1; "
                                            r"labels must be class ids 0\.\.C-1"),
    (["--dataset", "mytask:data_flat"], r"--dataset mytask:data_flat: x_train has shape \(400,\); give one row per "
                                        r"sample"),
    (["--dataset", "mytask:data", "--data-dir", "."], r"--data-dir: mytask:data takes no 'data_dir' parameter"),
    (["--model", "lenet5"], r"--model lenet5: takes square float images \(N, C, H, H\); --dataset mytask:data has "
                            r"float32 samples of shape \(12,\); use your own --model module\.path:function"),
    (["--model", "lstm"], r"--model lstm: a character model; use --dataset shakespeare"),
    (["--partition", "roles"], r"--partition roles: roles are a text's speakers"),
]
VALID = {"--model": "mytask:net", "--dataset": "mytask:data", "--strategy": "fedavg", "--max-steps": "2",
         "--batch-size": "8"}


def _argv(out, args):
    rest = [tok for flag, value in VALID.items() if flag not in args for tok in (flag, value)]
    return [*args, *rest, "--out", str(out)]


def _one_line(code, stderr, pattern, out):
    """Exit code 2, one line matching ``pattern``, no run file (setup's writability probe
    may leave the run file's folder, as for every setup error)."""
    assert code == 2, (code, stderr[-2000:])
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert re.fullmatch(r"fdahpc\.train: error: " + pattern + r".*", lines[0]), lines[0]
    assert not os.path.exists(out)


@pytest.mark.parametrize("args,pattern", ERRORS, ids=[" ".join(args) for args, _ in ERRORS])
def test_setup_error_is_one_line_exit_2_nothing_written(in_task, tmp_path, capsys, args, pattern):
    from fdahpc.train import main

    out = tmp_path / "runs" / "x.h5"
    code = main(_argv(out, args))
    _one_line(code, capsys.readouterr().err, pattern, str(out))


# ------------------------------------------------------------------------------ real MPI jobs
def _job(folder, *args, ranks=2, timeout=300):
    """``mpiexec -n ranks python -m fdahpc.train ARGS`` started in ``folder``, where mytask.py is."""
    return run_python(["-m", "fdahpc.train", "--log-every", "1000", *args], ranks=ranks, cwd=str(folder),
                      timeout=timeout)


def _read(path):
    with h5py.File(path, "r") as f:
        return dict(f.attrs), f["final/model"][()]


SYNC = ["--model", "mytask:net", "--dataset", "mytask:data", "--strategy", "fedavg", "--tau", "4", "--batch-size", "16",
        "--partition", "dirichlet:0.5", "--eval-every", "4"]
SEMI = ["--mode", "semiasync", "--strategy", "fedqs-avg", "--model", "mytask:net", "--dataset", "mytask:data",
        "--clients", "6", "--buffer", "3", "--batch-size", "16", "--partition", "classes:2"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "semiasync"])
def test_two_ranks_train_resume_bit_for_bit(task, tmp_path, mode):
    """The own model on the own data, non-IID, in each mode on 2 ranks: it learns, the run
    file records the names as given, and a checkpoint resumed to the end equals the
    uninterrupted run."""
    folder, _ = task
    flags, length, half = (SYNC, "--max-steps", "40") if mode == "sync" else (SEMI, "--rounds", "12")
    full, part = (str(int(half) * 2), half)
    straight = _job(folder, *flags, length, full, "--out", str(tmp_path / "straight.h5"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    attrs, model = _read(tmp_path / "straight.h5")
    assert (attrs["model"], attrs["dataset"], attrs["mode"], attrs["status"]) == ("mytask:net", "mytask:data", mode,
                                                                                 "finished")
    assert attrs["final_accuracy"] > 0.6  # 5 classes: chance is 0.2
    ck = str(tmp_path / "ck")
    first = _job(folder, *flags, length, part, "--out", str(tmp_path / "split.h5"), "--checkpoint-dir", ck)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = _job(folder, *flags, length, full, "--checkpoint-dir", ck, "--resume", "auto")
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stderr[-3000:]
    attrs_r, model_r = _read(tmp_path / "split.h5")
    assert attrs_r["status"] == "finished" and np.array_equal(model, model_r)
    assert attrs_r["final_accuracy"] == attrs["final_accuracy"]


#: One job walks every sync strategy and every semi-async rule on the own task, each on
#: another partitioner, in one process per rank (the same build and run as the command line).
WALK = '''
import json, sys
from fdahpc.comm import make_communicator
from fdahpc.config import TrainConfig
from fdahpc.run import build, resolve, run

comm = make_communicator("mpi")
out, cases = sys.argv[1], json.loads(sys.argv[2])
for i, options in enumerate(cases):
    cfg = TrainConfig(model="mytask:net", dataset="mytask:data", batch_size=16, log_every=10**6,
                      out=f"{out}/run{i}.h5", **options)
    run(build(resolve(cfg), comm))
comm.close()
'''
PARTITIONS = ["iid", "sorted:50", "label:1", "dirichlet:0.3", "classes:2"]


def _walk_cases():
    cases = [dict(mode="sync", strategy=s, max_steps=12, partition=PARTITIONS[i % len(PARTITIONS)],
                  **({"tau": 3} if s in ("fedavg", "fedavgm", "fedadam", "fedadp", "diloco") else {}))
             for i, s in enumerate(STRATEGIES)]
    cases.append(dict(mode="sync", strategy="fedavg", tau=3, max_steps=12, partition="mix:1*iid+1*classes:2"))
    cases += [dict(mode="semiasync", strategy=r, clients=6, buffer=3, rounds=4,
                   partition=PARTITIONS[i % len(PARTITIONS)]) for i, r in enumerate(SEMIASYNC_RULES)]
    cases.append(dict(mode="semiasync", strategy="fedqs-sgd", clients=6, buffer=3, rounds=4,
                      partition="mix:3*iid+3*classes:1"))
    return cases


@pytest.mark.slow
def test_every_strategy_and_rule_runs_the_own_task_on_two_ranks(task, tmp_path):
    folder, _ = task
    cases = _walk_cases()
    assert {c["strategy"] for c in cases if c["mode"] == "sync"} == set(STRATEGIES)
    assert {c["strategy"] for c in cases if c["mode"] == "semiasync"} == set(SEMIASYNC_RULES)
    script = tmp_path / "walk.py"
    script.write_text(WALK)
    proc = run_python([str(script), str(tmp_path), json.dumps(cases)], ranks=2, cwd=str(folder), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i, case in enumerate(cases):
        attrs, model = _read(tmp_path / f"run{i}.h5")
        assert attrs["status"] == "finished", case
        names = (attrs["model"], attrs["dataset"], attrs["partition"])
        assert names == ("mytask:net", "mytask:data", case["partition"])
        assert np.isfinite(model).all() and attrs["final_accuracy"] > 0.2, (case, attrs["final_accuracy"])


@pytest.mark.slow
@pytest.mark.parametrize("args,pattern", [ERRORS[0], ERRORS[3], ERRORS[11]],
                         ids=["plain-name", "no-module", "output-size"])
def test_setup_error_on_two_ranks_is_one_line_from_rank_0(task, tmp_path, args, pattern):
    """A name refused by the options' check, a module no rank can import, and a model that
    every rank finds wrong at setup: one line in all, exit code 2, nothing written."""
    out = tmp_path / "runs" / "x.h5"
    proc = _job(task[0], *_argv(out, args), timeout=180)
    _one_line(proc.returncode, proc.stderr, pattern, str(out))


def _documented_command():
    """The semi-async FedQS command of docs/own-model.md, as its reader would copy it."""
    with open(os.path.join(REPO, "docs", "own-model.md")) as fh:
        text = fh.read()
    block = re.search(r"```sh\ncd examples\n(mpiexec [^`]*?--mode semiasync[^`]*?)\n```", text)
    assert block, "docs/own-model.md lost its FedQS command"
    return block.group(1).replace("\\\n", " ").split()


@pytest.mark.slow
def test_the_documented_fedqs_command_runs_as_written(tmp_path):
    cmd = _documented_command()
    assert cmd[:3] == ["mpiexec", "-n", "3"] and cmd[3:6] == ["python", "-m", "fdahpc.train"]
    assert {"--strategy", "fedqs-avg", "--model", "own_task:net", "--dataset", "own_task:data"} <= set(cmd)
    folder = tmp_path / "examples"
    shutil.copytree(os.path.join(REPO, "examples"), folder)  # a copy: the run writes runs/ where it starts
    proc = run_python(cmd[4:] + ["--rounds", "15", "--out", str(tmp_path / "fedqs.h5")], ranks=3, cwd=str(folder),
                      timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    attrs, _ = _read(tmp_path / "fedqs.h5")
    assert attrs["strategy"] == "fedqs-avg" and attrs["model"] == "own_task:net" and attrs["dataset"] == "own_task:data"
    assert attrs["final_accuracy"] > 0.5  # 6 classes: chance is 1/6
