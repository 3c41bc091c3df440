"""benchmarks/peers_appfl.py without APPFL: the job both frameworks are given, and its checks.

APPFL itself (its own venv) is exercised by running the benchmark; here only what can be
checked without it: that the two configurations carry the same job, that APPFL's FedBuff
coefficient as configured is fdahpc's rule, and the one-line messages.
"""

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import peers_appfl as pa  # noqa: E402
from fdahpc.semiasync.rules import FedBuff  # noqa: E402


def _flag(cmd, name):
    return cmd[cmd.index(name) + 1]


@pytest.mark.parametrize("clients,buffer,server_lr", [(20, 5, 1.0), (100, 10, 0.5), (3, 3, 2.0)])
def test_appfls_fedbuff_coefficient_as_configured_is_fdahpcs_rule(clients, buffer, server_lr):
    job = pa.FedBuffJob(clients=clients, buffer=buffer, server_lr=server_lr)
    cfg = pa.appfl_server_config(job, "logs")
    staleness = np.arange(buffer) * 3  # a buffer of K updates, staleness 0, 3, 6, ...
    want = FedBuff(server_lr).weights([SimpleNamespace(staleness=t) for t in staleness], None, clients)
    got = [pa.appfl_update_weight(cfg, int(t)) for t in staleness]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # and by hand, FedBuff's η_s/K · 1/√(1+τ)
    assert got[1] == pytest.approx(server_lr / buffer / 2.0)


def test_both_sides_get_the_same_job():
    job = pa.FedBuffJob(clients=12, buffer=4, rounds=7, ranks=3, local_steps=9, server_lr=0.5, seed=3)
    cmd = pa.fdahpc_command(job, "py", "out.h5", eval_every=7)
    assert cmd[:4] == ["mpiexec", "-n", "3", "py"]
    for flag, value in {"--strategy": "fedbuff", "--mode": "semiasync", "--clients": "12", "--buffer": "4",
                        "--rounds": "7", "--tau": "9", "--server-lr": "0.5", "--speed-ratio": "1", "--seed": "3",
                        "--lr": str(pa.LR), "--batch-size": str(pa.BATCH), "--partition": pa.ALPHA,
                        "--model": "lenet5", "--dataset": "fashion-mnist", "--eval-every": "7"}.items():
        assert _flag(cmd, flag) == value, flag
    cfg = pa.appfl_server_config(job, "logs")
    train, server = cfg["client_configs"]["train_configs"], cfg["server_configs"]
    assert (train["mode"], train["num_local_steps"], train["optim"], train["optim_args"]["lr"],
            train["train_batch_size"], train["send_gradient"]) == ("step", 9, "SGD", pa.LR, pa.BATCH, True)
    assert not train["do_validation"] and not train["do_pre_validation"]
    assert (server["scheduler"], server["aggregator"], server["num_clients"]) == ("AsyncScheduler", "FedBuffAggregator", 12)
    assert server["aggregator_kwargs"]["K"] == 4
    assert server["num_global_epochs"] == 7 * 4  # AsyncScheduler counts client updates
    assert cfg["client_configs"]["model_configs"]["model_kwargs"] == {"seed": 3}
    clients = pa.appfl_client_configs(job, "logs")
    assert [c["client_id"] for c in clients] == [f"Client{i}" for i in range(12)]
    assert [c["data_configs"]["dataset_kwargs"]["client_id"] for c in clients] == list(range(12))
    assert {c["data_configs"]["dataset_kwargs"]["num_clients"] for c in clients} == {12}
    assert pa.appfl_ranks(job, "batched") == 3 and pa.appfl_ranks(job, "per-client") == 13


def test_appfl_nogc_turns_optimize_memory_off_wherever_appfl_reads_it():
    job = pa.FedBuffJob()
    plain, nogc = pa.appfl_server_config(job, "l"), pa.appfl_server_config(job, "l", pa.NOGC)
    s = nogc["server_configs"]
    for section in (s, s["scheduler_kwargs"], s["aggregator_kwargs"], nogc["client_configs"]["train_configs"]):
        assert section["optimize_memory"] is False
    assert "optimize_memory" not in str(plain)  # APPFL's default (on) stays untouched
    assert all(c["optimize_memory"] is False for c in pa.appfl_client_configs(job, "l", pa.NOGC))
    assert all("optimize_memory" not in c for c in pa.appfl_client_configs(job, "l"))


@pytest.mark.parametrize("flags,needle", [(["--buffer", "30"], "--buffer 30 > --clients 20"),
                                          (["--rounds", "1"], "--rounds 1"),
                                          (["--ranks", "1"], "--ranks 1"),
                                          (["--only", "flower"], "--only 'flower'")])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, flags, needle):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, os.path.join(BENCH, "peers_appfl.py"), *flags, "--out-dir", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr
    assert not out.exists()


def test_missing_appfl_is_one_line_naming_the_install(tmp_path):
    try:
        import appfl  # noqa: F401
        pytest.skip("APPFL imports here")
    except Exception:
        pass
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, os.path.join(BENCH, "peers_appfl.py"), "--only", "appfl,appfl-nogc",
                          "--out-dir", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert "APPFL does not import" in line and 'pip install -e ".[peers-appfl]"' in line
    assert not out.exists()


def test_print_config_shows_both_sides_and_the_mapping(tmp_path):
    res = subprocess.run([sys.executable, os.path.join(BENCH, "peers_appfl.py"), "--print-config", "--clients", "8",
                          "--buffer", "2", "--out-dir", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300, check=True)
    assert "--strategy fedbuff" in res.stdout and '"aggregator": "FedBuffAggregator"' in res.stdout
    assert "APPFL alpha 4 * (1/N)" in res.stdout  # η_s N / K = 1 · 8 / 2
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- with APPFL (its venv)
def _appfl_server(tmp_path, job):
    pytest.importorskip("appfl", exc_type=ImportError)
    from omegaconf import OmegaConf

    import peers_appfl_app

    return peers_appfl_app, OmegaConf.create(pa.appfl_server_config(job, str(tmp_path / "logs")))


def test_appfls_server_built_from_the_configuration_starts_from_fdahpcs_model_and_steps_by_its_rule(tmp_path):
    import torch

    job = pa.FedBuffJob(clients=8, buffer=3, server_lr=0.7, seed=5)
    app, cfg = _appfl_server(tmp_path, job)
    from appfl.agent import ServerAgent

    agent = ServerAgent(server_agent_config=cfg)
    ref = pa.job.new_lenet(5)
    names = [n for n, _ in ref.named_parameters()]
    w = {n: p.detach().clone() for n, p in ref.named_parameters()}
    assert all(torch.equal(agent.model.state_dict()[n], w[n]) for n in names)  # the same initial model
    gen = torch.Generator().manual_seed(0)

    def deltas(k):
        return [{n: torch.randn(w[n].shape, generator=gen) * 0.01 for n in names} for _ in range(k)]

    # flush 1: clients 0..2, all from version 0. APPFL hands a client the model of the moment,
    # so only client 2, whose update completed the buffer, got version 1; flush 2: client 2
    # (staleness 0), client 0 (handed version 0) and client 5 (never seen: version 0)
    for clients, taus in (([0, 1, 2], [0, 0, 0]), ([2, 0, 5], [0, 1, 1])):
        ds = deltas(3)
        coeff = FedBuff(0.7).weights([SimpleNamespace(staleness=t) for t in taus], None, 8)
        want = {n: w[n] + sum(c * d[n] for c, d in zip(coeff, ds)) for n in names}
        for c, d in zip(clients, ds):  # send_gradient: the client sends start - local = -Δ
            agent.global_update(f"Client{c}", {n: -d[n] for n in names})
        got = agent.model.state_dict()
        for n in names:
            torch.testing.assert_close(got[n], want[n], rtol=1e-5, atol=1e-6)
        w = want


def test_appfl_files_give_fdahpcs_clients_and_model(tmp_path):
    import torch

    app, _ = _appfl_server(tmp_path, pa.FedBuffJob())
    x, y, parts = pa.job.load_train(6, 2)
    train, val = app.client_data(num_clients=6, client_id=4, seed=2)
    assert val is None and len(train) == len(parts[4])
    assert torch.equal(train.tensors[1], y[torch.from_numpy(np.asarray(parts[4]))])
    ref = pa.job.new_lenet(2).state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in app.lenet5(seed=2).state_dict().items())
    assert app.accuracy(np.array([0, 1, 2]), np.eye(3)[[0, 2, 2]]) == pytest.approx(2 / 3)


def test_the_table_has_a_row_per_run_kind_and_ratios_against_fdahpc(capsys):
    job = pa.FedBuffJob(rounds=3)
    args = SimpleNamespace(scoring="every,end", appfl_layout="batched", repeats=2)

    def run(per_round, final):
        return dict(per_round=per_round, to_first=10.0, peak_gb=1.0, peak_pss_gb=0.5, accuracy=[0.2, 0.3, final],
                    staleness=[0.0, 1.0, 2.0], foreign_cpu=0.1)

    results = {("fdahpc", t): [run(1.0, 0.5), run(2.0, 0.5)] for t in ("every", "end")}
    results |= {("appfl", t): [run(3.0, 0.4), run(2.0, 0.4)] for t in ("every", "end")}
    pa.print_results(args, job, ["fdahpc", "appfl"], results)
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    appfl_every = next(r for r in rows if r[:3] == ["appfl", "every", "aggregation"])
    assert appfl_every[3:5] == ["2.500", "2.00"]  # median s/aggregation 2.5; median of the ratios 3/1, 2/2 = 2
    assert sum(r[:1] in (["fdahpc"], ["appfl"]) and "end" in r for r in rows) == 2
    assert "fdahpc     accuracy per aggregation (repeat 0, scoring every aggregation): 0.200 0.300 0.500" in out
