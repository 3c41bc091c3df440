"""The FedQS reproduction's shared pieces: the gradient-norm clip of every local step, the
sample-weighted semi-async FedAvg/FedSGD, the M-step and WKAFL rules end to end, and the
flags that select them."""

import math

import h5py
import numpy as np
import pytest
import torch

from conftest import run_python
from fdahpc.cli import parse_args
from fdahpc.worker import BatchStream, local_steps

TINY = ["--dataset", "mnist5k", "--model", "lenet5", "--batch-size", "16", "--log-every", "1000"]
SEMI = ["--mode", "semiasync", "--clients", "6", "--buffer", "2", "--rounds", "10", "--tau", "3", "--speed-ratio", "4",
        "--partition", "dirichlet:0.5"]


def _tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2, 2)).astype(np.float32) * 50  # large inputs: large gradients
    y = rng.integers(0, 3, size=40)
    return model, x, y


def test_clip_scales_each_step_to_the_norm():
    model, x, y = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w0 = [p.detach().clone() for p in model.parameters()]
    seen = []

    def step():
        seen.append(math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters())))
        opt.step()

    local_steps(model, BatchStream(x, y, 8, 0, 0), 3, step, opt.zero_grad, clip_grad_norm=0.5)
    assert all(n == pytest.approx(0.5, rel=1e-5) for n in seen)  # the raw norms are far above 0.5
    # By hand for one step: w1 = w0 - lr * g * 0.5 / ||g||.
    model2, _, _ = _tiny()
    xb, yb = BatchStream(x, y, 8, 0, 0).next()
    loss = torch.nn.functional.cross_entropy(model2(xb), yb)
    grads = torch.autograd.grad(loss, list(model2.parameters()))
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    assert norm > 5
    model3, _, _ = _tiny()
    opt3 = torch.optim.SGD(model3.parameters(), lr=0.1)
    local_steps(model3, BatchStream(x, y, 8, 0, 0), 1, opt3.step, opt3.zero_grad, clip_grad_norm=0.5)
    for p, p0, g in zip(model3.parameters(), w0, grads):
        torch.testing.assert_close(p.detach(), p0 - 0.1 * g * (0.5 / (norm + 1e-6)), rtol=1e-5, atol=1e-6)


def test_clip_off_and_above_the_norm_change_nothing():
    runs = []
    for clip in ("absent", None, 1e9):
        model, x, y = _tiny()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        kw = {} if clip == "absent" else {"clip_grad_norm": clip}
        local_steps(model, BatchStream(x, y, 8, 0, 0), 4, opt.step, opt.zero_grad, **kw)
        runs.append(torch.cat([p.detach().ravel() for p in model.parameters()]))
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


@pytest.mark.parametrize("argv,message", [
    (["--clip-grad-norm", "-1", "--mode", "semiasync"], "--clip-grad-norm -1.0: must be a positive finite"),
    (["--clip-grad-norm", "0"], "--clip-grad-norm 0.0: must be a positive finite"),
    (["--mode", "semiasync", "--fedqs-val-fraction", "0.1"], "--fedqs-val-fraction: removed"),
    (["--mode", "semiasync", "--strategy", "mstep", "--weighting", "samples"], "--weighting: --strategy mstep does not read it (read by --strategy fedavg, fedsgd)"),
    (["--mode", "semiasync", "--fedqs-feedback", "exact"], "--fedqs-feedback 'exact': unknown"),
    (["--mode", "semiasync", "--fedqs-variant", "code"], "--fedqs-variant 'code'"),
    (["--mode", "semiasync", "--fedqs-authors-momentum"], "--fedqs-authors-momentum True: is the authors' variant's"),
])
def test_flag_errors_name_the_flag(argv, message):
    with pytest.raises(ValueError, match=None) as err:
        parse_args(argv)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_removed_flag_in_a_toml_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('mode = "semiasync"\n[fedqs]\nfedqs-val-fraction = 0.1\n')
    with pytest.raises(ValueError, match="--fedqs-val-fraction: removed"):
        parse_args(["--config", str(path)])


@pytest.mark.slow
def test_new_rules_and_sample_weights_end_to_end(tmp_path):
    files = {}
    for name, flags in (("mstep", ["--strategy", "mstep"]), ("wkafl", ["--strategy", "wkafl", "--clip-grad-norm", "20"]),
                        ("avg-samples", ["--strategy", "fedavg", "--weighting", "samples"])):
        out = str(tmp_path / f"{name}.h5")
        res = run_python(["-m", "fdahpc.train", *TINY, *SEMI, *flags, "--out", out], ranks=2, timeout=120)
        assert res.returncode == 0, res.stderr[-3000:]
        files[name] = h5py.File(out)
    for name, f in files.items():
        assert f.attrs["rounds_done"] == 10 and 0 < f.attrs["convergence_accuracy"] <= 1
    f = files["avg-samples"]
    n, w = f["round/n_samples"][:], f["round/weights"][:]
    np.testing.assert_allclose(w, n / n.sum(axis=1, keepdims=True), rtol=1e-14)
    f = files["mstep"]
    tau = f["round/update_staleness"][:]
    np.testing.assert_allclose(f["round/weights"][:], 0.6 / np.sqrt(1 + tau) / 2, rtol=1e-14)
    w = files["wkafl"]["round/weights"][:]
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(w >= 0)


def test_regime_benchmark_runs_every_method_in_the_papers_setting(monkeypatch):
    import os

    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
    import fedqs_regime
    import semiasync

    args = semiasync.parse(fedqs_regime.semiasync_argv(fedqs_regime.parse([]), "dirichlet:0.1"))
    assert (args.clients, args.buffer, args.speed_ratio, args.local_epochs, args.batch_size, args.lr) == \
        (100, 10, 50, 2.0, 50, 0.1)
    assert args.reuse and args.partition == "dirichlet:0.1" and args.csv.endswith("fedqs_regime_dirichlet0.1.csv")
    for method in args.methods.split(","):
        flags = semiasync.flags_for(args, method, 0)
        assert flags[-2:] == ["--clip-grad-norm", "20"]  # every method clipped alike
        parse_args(flags)  # each method's flags are a valid configuration
    assert {"mstep", "wkafl", "fedavg:weighting=samples", "fedqs-sgd:fedqs-variant=authors"} <= set(args.methods.split(","))
    for ablation in fedqs_regime.ABLATIONS:
        parse_args(semiasync.flags_for(args, ablation, 0))  # each ablation too
    # under the authors' simulator (issue 43): its own CSV, the flags on every run
    ticks = semiasync.parse(fedqs_regime.semiasync_argv(fedqs_regime.parse(["--clock", "ticks", "--drop-last"]),
                                                        "dirichlet:0.1"))
    assert ticks.csv.endswith("fedqs_regime_ticks_droplast_dirichlet0.1.csv") and "ticks_droplast" in ticks.out_dir
    flags = semiasync.flags_for(ticks, "fedqs-avg:fedqs-variant=authors", 0)
    assert flags[-5:] == ["--clip-grad-norm", "20", "--clock", "ticks", "--drop-last"]
    cfg = parse_args(flags).cfg
    assert cfg.clock == "ticks" and cfg.drop_last
    # the text task: Shakespeare by role with the paper's LSTM, at the reduced size; images keep every sample
    text = semiasync.parse(fedqs_regime.semiasync_argv(fedqs_regime.parse(["--clock", "ticks", "--drop-last"]), "roles"))
    assert (text.dataset, text.model) == ("shakespeare", "lstm") and text.csv.endswith("fedqs_regime_ticks_droplast_roles.csv")
    t = fedqs_regime.TEXT
    cfg = parse_args(semiasync.flags_for(text, "fedqs-sgd:fedqs-variant=authors", 0)).cfg
    assert (cfg.context, cfg.train_samples, cfg.eval_samples, cfg.clients, cfg.buffer, cfg.lr) == \
        (t["context"], t["train_samples"], t["eval_samples"], t["clients"], t["buffer"], t["lr"])
    assert (cfg.fedqs_a, cfg.fedqs_lr_min, cfg.fedqs_lr_max) == (0.02, 0.01, 2.0)  # FedQS's lr scale moves with --lr
    plain = parse_args(semiasync.flags_for(text, "fedsgd", 0)).cfg  # a rule without FedQS's options gets none
    assert plain.lr == t["lr"] and "fedqs_lr_max" not in plain.given
    assert "samples" not in ticks.extra
    mine = semiasync.parse(fedqs_regime.semiasync_argv(fedqs_regime.parse(["--train-samples", "900", "--model", "lenet5"]),
                                                       "dirichlet:0.5"))
    assert "--train-samples 900" in mine.extra and "--eval-samples" not in mine.extra and mine.model == "lenet5"
    # the decomposition's convergence accuracy needs every aggregation scored: it sets --eval-every 1
    assert fedqs_regime.parse(["--decompose", "200"]).eval_every == 1
    with pytest.raises(SystemExit):
        fedqs_regime.parse(["--decompose", "200", "--eval-every", "2"])


def test_regime_table_compares_an_ablation_with_its_full_method(monkeypatch, tmp_path):
    import os

    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
    import fedqs_regime
    import semiasync

    off = "fedqs-avg:fedqs-variant=authors:fedqs-no-feedback"
    assert fedqs_regime.BASELINE[off] == "fedqs-avg:fedqs-variant=authors"
    rows = {}
    for seed, (avg, qs, ablated) in enumerate([(0.70, 0.72, 0.75), (0.80, 0.81, 0.82)]):
        for method, acc in (("fedavg", avg), ("fedqs-avg:fedqs-variant=authors", qs), (off, ablated)):
            rows[method, seed] = dict({f: 0.0 for f in semiasync.FIELDS}, method=method, seed=seed,
                                      convergence_accuracy=acc, staleness_mean=6.0 + seed)
    semiasync.write_rows(str(tmp_path / "fedqs_regime_dirichlet0.1.csv"), rows, {})
    lines = fedqs_regime.table("dirichlet:0.1", list(fedqs_regime.METHODS) + list(fedqs_regime.ABLATIONS),
                               csv_dir=str(tmp_path))
    by_method = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert set(by_method) == {"fedavg", "fedqs-avg:fedqs-variant=authors", off}
    assert "+2.00 vs fedqs-avg:fedqs-variant=authors (2)" in by_method[off]  # (3 + 1) / 2 points
    assert "+1.50 vs fedavg (2)" in by_method["fedqs-avg:fedqs-variant=authors"]  # (2 + 1) / 2 points
    assert "| 72.00 | 81.00 | 76.50 ± 6.36 |" in by_method["fedqs-avg:fedqs-variant=authors"]
    assert by_method["fedavg"].endswith("| 0 | 0.0 | 6.5 |")  # rounds to 95 %, oscillations, mean staleness


def test_decomposition_reads_each_run_at_the_same_aggregation_count(monkeypatch, tmp_path):
    """--decompose R: a run's convergence accuracy as if it had stopped after R aggregations
    (the mean of evaluations R-19..R), from the grid's longer run where there is one, else from
    the decomposition's own folder; a row lists the seeds both runs have, gain per seed."""
    import os

    import h5py
    import numpy as np

    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
    import fedqs_regime

    def run_file(path, accuracy):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with h5py.File(path, "w") as f:
            f.attrs["wall_seconds"] = 1.0
            f["round/accuracy"] = np.asarray(accuracy, dtype=float)

    R = 30
    grid, own = tmp_path / "ticks_droplast_dirichlet0.1", tmp_path / "decompose30" / "ticks_droplast_dirichlet0.1"
    base = np.linspace(0.5, 0.8, 40)  # the grid's run of 40 aggregations: read up to 30
    run_file(str(grid / "fedavg-seed0.h5"), base)
    run_file(str(own / "fedqs-avg_fedqs-variant-authors_fedqs-no-feedback-seed0.h5"), base[:R] + 0.01)
    run_file(str(own / "fedqs-avg_fedqs-variant-authors-seed0.h5"), base[:R - 1])  # too short: not read
    assert fedqs_regime.accuracy_at(str(grid / "fedavg-seed0.h5"), R) == base[R - 20:R].mean()
    assert np.isnan(fedqs_regime.accuracy_at(str(own / "fedqs-avg_fedqs-variant-authors-seed0.h5"), R))
    args = fedqs_regime.parse(["--out-dir", str(tmp_path), "--seeds", "0,1"])
    lines = fedqs_regime.decompose(args, "dirichlet:0.1", R, run=False, csv_dir=str(tmp_path))
    assert len(lines) == 3 and lines[2].startswith("| feedback weights off | fedqs-avg:fedqs-variant=authors:fedqs-no-")
    assert f"| 1 | {100 * base[10:30].mean():.2f} | {100 * base[10:30].mean() + 1:.2f} | +1.00 |" in lines[2]
    # what it read is kept in its CSV, which stands in for the run files on a machine without them
    kept = fedqs_regime.decompose_csv("dirichlet:0.1", R, str(tmp_path))
    assert kept.endswith("fedqs_decompose30_dirichlet0.1.csv")
    assert fedqs_regime._read_kept(kept) == {("ticks", True, "fedavg", 0): (base[10:30].mean(), ""),
                                             ("ticks", True, "fedqs-avg:fedqs-variant=authors:fedqs-no-feedback", 0):
                                             ((base[:R] + 0.01)[10:30].mean(), "")}  # no provenance in these files
    assert lines[2].endswith("| not recorded |")
    with h5py.File(str(tmp_path / "prov.h5"), "w") as f:  # a run's kernels, from its provenance
        f.attrs["provenance"] = '[{"ranks": [{"torch_cpu_capability": "AVX2"}, {"torch_cpu_capability": "AVX512"}]}]'
    assert fedqs_regime.run_cpu(str(tmp_path / "prov.h5")) == "AVX2+AVX512"
    for path in (grid / "fedavg-seed0.h5", own / "fedqs-avg_fedqs-variant-authors_fedqs-no-feedback-seed0.h5"):
        os.remove(path)
    assert fedqs_regime.decompose(args, "dirichlet:0.1", R, run=False, csv_dir=str(tmp_path)) == lines
    # its rows set the clock, the batches, the methods and the length: given too, they are refused
    for bad in (["--clock", "ticks"], ["--drop-last"], ["--methods", "fedavg"], ["--rounds", "400"]):
        with pytest.raises(SystemExit) as exc:
            fedqs_regime.parse(["--decompose", "200", *bad])
        assert exc.value.code == 2
    with pytest.raises(SystemExit):
        fedqs_regime.parse(["--decompose", "19"])  # shorter than the 20-evaluation window
    # its own runs: in their folder, never in the grid's CSV
    argv = fedqs_regime.semiasync_argv(args, "dirichlet:0.1", out_dir=str(tmp_path / "decompose30"))
    assert "--csv" not in argv and argv[argv.index("--out-dir") + 1] == str(tmp_path / "decompose30" / "dirichlet0.1")


def test_regime_rows_written_by_parallel_streams_are_all_kept(monkeypatch, tmp_path):
    """Two invocations on one CSV (the grid's parallel streams): each run's row is added to what
    the file holds at that moment, not to what the invocation read when it started."""
    import os

    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
    import semiasync

    path = str(tmp_path / "grid.csv")

    def row(method, seed, acc):
        return dict({f: 0.0 for f in semiasync.FIELDS}, method=method, seed=seed, convergence_accuracy=acc)

    semiasync.save_row(path, row("fedavg", 0, 0.7), {})
    semiasync.save_row(path, row("fedsgd", 0, 0.8), {})  # the other stream
    semiasync.save_row(path, row("fedavg", 0, 0.75), {"fedavg": 0})  # a rerun replaces its own row only
    rows = semiasync.read_rows(path)
    assert {k: r["convergence_accuracy"] for k, r in rows.items()} == {("fedavg", 0): 0.75, ("fedsgd", 0): 0.8}


def test_summary_puts_every_grid_in_one_table(monkeypatch, tmp_path):
    """--summary: one row per grid CSV (clock, batches and partition read from its name), each
    cell mean ± sd (seeds), a FedQS cell with its difference to FedAvg or FedSGD on shared seeds."""
    import os

    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
    import fedqs_regime
    import semiasync

    def write(name, accuracies):
        rows = {(m, s): dict({f: 0.0 for f in semiasync.FIELDS}, method=m, seed=s, convergence_accuracy=a)
                for (m, s), a in accuracies.items()}
        semiasync.write_rows(str(tmp_path / name), rows, {})

    write("fedqs_regime_dirichlet0.5.csv", {("fedavg", 0): 0.80, ("fedavg", 1): 0.82, ("fedqs-avg", 0): 0.83,
                                            ("fedsgd", 1): 0.70, ("fedqs-sgd:fedqs-variant=authors", 1): 0.65})
    write("fedqs_regime_ticks_droplast_roles.csv", {("fedavg", 2): 0.40})
    write("fedqs_regime_ticks_droplast_dirichlet0.1_slice60.csv", {("fedavg", 0): 0.5})  # not a grid: left out
    lines = fedqs_regime.summary(str(tmp_path))
    assert len(lines) == 4
    events = lines[2].split(" | ")
    assert events[:3] == ["| events", "every", "Dirichlet 0.5"]
    assert events[3] == "81.00 ± 1.41 (2)" and events[4] == "83.00 (+3.00; 1)" and events[5] == "–"
    assert events[7] == "70.00 (1)" and events[9] == "65.00 (-5.00; 1)"
    assert lines[3].startswith("| ticks | drop-last | Shakespeare roles | 40.00 (1) | – |")
