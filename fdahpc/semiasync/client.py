"""A client host (ranks 1..R-1): many virtual clients, one model, jobs in virtual-time order.

A host keeps one model and computes its clients' local jobs one after another, each
starting from the global version the server last sent that client. Ready jobs run in
the order the server will consume them (virtual completion time, then client id), so
the job the server waits for is usually the next one computed. A job's result depends
only on its start model and on the client's own state (data, batch order, FedQS learning
rate), never on which host ran it or when, which makes a run independent of the number
of ranks.

Memory: the data of the host's clients (views into one array), one BatchStream per
client, the global versions some client's pending job starts from (for FedQS each with
Mod①'s reference the server sent along; up to ``--model-cache-gb`` of them in memory,
the rest on local disk: :mod:`.store`), and for FedQS one float32 update vector (or its
5 KB sketch) and the row numbers of the label test's samples per client: what Mod① and
Mod② need and nothing more.

Checkpoints: on ``CHECKPOINT`` the host finishes every job it holds a model for, sends the
updates, answers ``READY`` and joins the collective save. Every client is then idle (no
pending job, no model kept), so a client's state is its batch stream, FedQS learning rate
and last update, and its job count (:meth:`Host.state_dict`); the server holds the
pending results in its stash (with ``--aggregate hosts`` the host holds them, and saves them).
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass

import numpy as np
import torch

from .. import faults
from ..comm import Communicator, Outbox
from ..control import Diverged
from ..evaluate import score
from ..lr_schedule import LRSchedule
from ..worker import BatchStream, local_steps, make_job_optimizer
from .fedqs import FedQSParams, heavy_ball_step_, label_accuracies
from .fedqs_clients import FedQSClients
from .protocol import Down, Tag, UpKind, down_header_len, pack_up, peak_rss_bytes, unpack_down
from .combination import add_member
from .store import ModelStore, capacity

__all__ = ["ClientData", "Host"]

log = logging.getLogger("fdahpc")
#: What a client carries from one job to the next (beside its batch stream): saved in checkpoints.
_CLIENT_FIELDS = ("lr", "done_at", "f_i", "f_bar", "s_bar", "jobs")


@dataclass
class ClientData:
    """One client's share: training batches, its local job length, and FedQS's label-test
    samples: rows of the training data itself (:func:`.fedqs.label_probe`), nothing held out."""

    batches: BatchStream
    steps: int  # local steps per job
    probe: np.ndarray | None = None  # FedQS: row numbers into batches.x/batches.y

    @property
    def n_samples(self) -> int:
        return len(self.batches)


@dataclass
class _Client:
    data: ClientData
    lr: float
    start: int | None = None  # global version of the pending job, None while waiting for one
    done_at: float = 0.0
    f_i: float = 0.0
    f_bar: float = 1.0
    s_bar: float = float("nan")
    jobs: int = 0


@dataclass(frozen=True)
class LocalTraining:
    """How a host's clients train a job: the optimizer (not FedQS's, which steps itself),
    its rate and weight decay, the gradient clip, where (``device``: --device cuda, this
    host's GPU; versions, updates and per-client state stay in host memory), the run's seed,
    and ``schedule`` (--lr-schedule; not FedQS's clients, which set their own rate): a job
    trains at lr · factor(t), t the global version it starts from, over --rounds."""

    optimizer: str
    lr: float
    weight_decay: float = 0.0
    clip_grad_norm: float | None = None
    device: torch.device | str = "cpu"
    seed: int = 0
    schedule: LRSchedule | None = None


@dataclass(frozen=True)
class Uploads:
    """What a job sends back, as the rule wants it: the model or the update (``kind``), the
    running statistics' change too (``stats_updates``, the authors' FedQS-SGD), summed here
    (``host_sums``, --aggregate hosts), and FedQS's client parameters (None for other rules)."""

    kind: str
    stats_updates: bool = False
    host_sums: bool = False
    fedqs: FedQSParams | None = None


class _Stateless:
    """The clients of a rule that keeps no state between jobs (every rule but FedQS's):
    :class:`.fedqs_clients.FedQSClients`' methods, doing nothing."""

    held_peak = 0

    def decide(self, i, c, version, reference, label_test):
        return None, float("nan")

    def keep(self, i, c, lr, end, start) -> None:
        pass

    def forget(self, version) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state, clients) -> None:
        pass

    def close(self) -> None:
        pass


class Host:
    """A client host (a rank other than 0): its clients' data and state, their jobs run as the
    server's models arrive (``training``), their results sent back as the rule wants them
    (``uploads``)."""

    def __init__(self, comm: Communicator, model: torch.nn.Module, flat, clients: dict[int, ClientData], *,
                 training: LocalTraining, uploads: Uploads, num_classes: int, num_clients: int,
                 nan_from: int | None = None, model_cache_gb: float | None = None,
                 spill_dir: str | None = None) -> None:
        self.comm, self.model, self.flat = comm, model, flat
        self.training, self.device = training, torch.device(training.device)
        self.uploads, self.stats_updates, self.host_sums = uploads.kind, uploads.stats_updates, uploads.host_sums
        self.fedqs, self.num_classes, self.seed = uploads.fedqs, num_classes, training.seed
        fedqs, host_sums = self.fedqs, self.host_sums
        self.clients = {i: _Client(d, fedqs.eta0 if fedqs else training.lr) for i, d in clients.items()}
        # A version is the model, for FedQS followed by Mod①'s reference over the parameters.
        self.version_len = flat.state.numel() + (flat.dim if fedqs is not None else 0)
        # --aggregate hosts: the host also keeps its clients' finished updates until a COMBINE
        # names them; FedQS keeps each client's last update (parameters only, or its sketch)
        # until its next job. The stores in use share the memory budget.
        shares = 1 + host_sums + (fedqs is not None)
        budget = None if model_cache_gb is None else model_cache_gb / shares
        self.versions = ModelStore(capacity(budget, self.version_len), spill_dir, self._next_use,
                                   tag=f"rank{comm.rank}-versions-")
        self.results = ModelStore(capacity(budget, flat.state.numel()), spill_dir,
                                  lambda: self._done_at(self.results.keys()),
                                  tag=f"rank{comm.rank}-updates-")
        # What a client keeps between jobs (kept): for FedQS its last update, read by Mod① and Mod②.
        self.kept = _Stateless()
        if fedqs is not None:
            # --fedqs-sketch-similarity: one sketcher for the host; a client's last update is kept
            # as its sketch, each version received gets the sketch of its global step.
            sketcher = None
            if fedqs.sketch:
                from ..sketch import AmsSketch  # imports Numba: only this option needs it

                sketcher = AmsSketch(flat.dim, seed=self.seed)
            self.kept = FedQSClients(fedqs, model, flat, sketcher, budget, spill_dir, self._done_at, tag=f"rank{comm.rank}-")
        self.ready: list[tuple[float, int]] = []
        self.header = np.empty(down_header_len(num_clients))
        self.outbox = Outbox(comm)
        self.stopped = self.diverged = False
        self.checkpoint_at: int | None = None  # the round of a CHECKPOINT not yet answered
        self.jobs_done = self.steps_done = 0
        self.nan_from = nan_from  # FDAHPC_FAULT=nan@N:RANK: jobs starting from version >= N turn NaN

    # Messages from the server ---------------------------------------------------
    def _poll(self, block: bool) -> None:
        """Take every message the server has sent; wait for one if ``block``."""
        while not self.stopped:
            st = self.comm.probe(0, Tag.DOWN_HEADER) if block else self.comm.iprobe(0, Tag.DOWN_HEADER)
            if st is None:
                return
            self.comm.recv_(self.header, 0, Tag.DOWN_HEADER)
            msg = unpack_down(self.header, st.nbytes)
            if msg.kind == Down.MODEL:
                # FedQS: the model is followed by Mod①'s reference over the parameters.
                w = torch.from_numpy(np.empty(self.version_len, dtype=np.float32))
                if self.host_sums:
                    self.comm.bcast_(w, "model")  # one broadcast to every host, listed or not
                else:
                    self.comm.recv_(w, 0, Tag.DOWN_PAYLOAD)
                for i, f_i, done_at in zip(msg.clients, msg.speeds, msg.done_at):
                    c = self.clients[i]
                    c.start, c.done_at, c.f_i, c.f_bar, c.s_bar = msg.version, done_at, f_i, msg.f_bar, msg.s_bar
                    heapq.heappush(self.ready, (done_at, i))
                if msg.clients:
                    self.versions.put(msg.version, w)
            elif msg.kind == Down.COMBINE:
                self._combine(msg)
            elif msg.kind == Down.DROP:
                for i in msg.clients:
                    del self.clients[i]
                    self.results.discard(i)
                self._forget_versions()
            elif msg.kind == Down.CHECKPOINT:
                self.checkpoint_at = msg.version
                return  # the server sends nothing more before every host answered
            else:
                self.stopped, self.diverged = True, msg.kind == Down.DIVERGED
            block = False

    def _combine(self, msg) -> None:
        """``--aggregate hosts``: this host's members' terms of the round's exact sum, then
        the sum-reduction to the server (every host joins it, with or without members)."""
        acc = np.zeros(self.flat.state.numel(), dtype=np.int64)
        for i, c_params, c_stats in zip(msg.clients, msg.speeds, msg.done_at):
            add_member(acc, c_params, c_stats, self.results.pop(i).numpy(), self.flat.dim, int(msg.now))
        self.comm.reduce_sum_(acc, "model")

    def _forget_versions(self) -> None:
        used = {c.start for c in self.clients.values() if c.start is not None}
        for v in [v for v in self.versions.keys() if v not in used]:
            self.versions.discard(v)
            self.kept.forget(v)

    def _done_at(self, keys: list[int]) -> dict[int, float]:
        """Client → end of its last job, for the clients ``keys`` of a store: the finished
        updates wait for a COMBINE, the FedQS updates for the next job (which follows the
        last one's end); either way the client that finished first is needed first."""
        return {i: self.clients[i].done_at for i in keys if i in self.clients}

    def _next_use(self) -> dict[int, float]:
        """Version → virtual time of the earliest pending job that starts from it."""
        first: dict[int, float] = {}
        for c in self.clients.values():
            if c.start is not None and c.done_at < first.get(c.start, np.inf):
                first[c.start] = c.done_at
        return first

    # One local job ------------------------------------------------------------
    def _label_test(self, data: ClientData) -> np.ndarray | None:
        """The global model's per-label accuracy on the client's probe samples, as the test reads it."""
        if data.probe is None or len(data.probe) == 0:
            return None
        idx = torch.from_numpy(data.probe)
        x, y = data.batches.x[idx], data.batches.y[idx]
        per_label = score(self.model, x.to(self.device), y.to(self.device), per_label=self.num_classes)[1]
        return label_accuracies(per_label, torch.bincount(y, minlength=self.num_classes).numpy())

    def train(self, c: _Client, lr: float, momentum: float) -> float:
        """One local job of client c on the loaded model: the mode's optimizer, or FedQS's heavy ball."""
        t = self.training
        if self.fedqs is None:
            opt = make_job_optimizer(t.optimizer, lr, self.model.parameters(), t.weight_decay)
            return local_steps(self.model, c.data.batches, c.data.steps, opt.step, opt.zero_grad, t.clip_grad_norm,
                               self.device)
        params = [p for p in self.model.parameters() if p.requires_grad]
        bufs = [torch.zeros_like(p) for p in params]

        def step() -> None:
            with torch.no_grad():
                for p, b in zip(params, bufs):
                    heavy_ball_step_(p.data, p.grad, b, lr, momentum)

        return local_steps(self.model, c.data.batches, c.data.steps, step, lambda: self.model.zero_grad(set_to_none=True),
                           t.clip_grad_norm, self.device)

    def _run_job(self, i: int) -> None:
        c = self.clients[i]
        w_start = self.versions[c.start][: self.flat.state.numel()]
        self.flat.state.copy_(w_start)
        # Any randomness inside the model (dropout) depends on the client and job alone.
        torch.manual_seed(int(np.random.SeedSequence(self.seed, spawn_key=(0x5A, 9, i, c.jobs)).generate_state(1)[0]))
        ref = self.versions[c.start][self.flat.state.numel():]  # FedQS: Mod①'s reference
        decision, s_i = self.kept.decide(i, c, c.start, ref, self._label_test)
        lr = decision.lr if decision else c.lr
        if self.training.schedule is not None:
            lr = lr * self.training.schedule.factor(c.start)
        momentum = decision.momentum if decision else 0.0
        # --drop-last: a client with less than one batch takes no step and uploads its start.
        loss = self.train(c, lr, momentum) / c.data.steps if c.data.steps else 0.0
        if self.nan_from is not None and c.start >= self.nan_from:
            faults.poison(self.model)  # FDAHPC_FAULT=nan@N:RANK
        payload = self.flat.state.to("cpu", copy=True)
        self.kept.keep(i, c, lr, payload, w_start)
        if self.uploads == "update":  # Δ for the parameters; running statistics travel as values (rules.py)
            end = None if self.stats_updates else self.flat.dim  # ... or as changes (authors' FedQS-SGD)
            payload[:end].sub_(w_start[:end])
        header = pack_up(UpKind.UPDATE, client=i, version=c.start, done_at=c.done_at, n_samples=c.data.n_samples,
                         similarity=s_i, feedback=float(bool(decision and decision.feedback)),
                         g=decision.G if decision else 1.0, type=decision.type if decision else -1, loss=loss,
                         lr=lr, momentum=momentum, steps=c.data.steps, absmax=float(payload.abs().max()))
        self.outbox.post(header, 0, Tag.UP_HEADER, "control")
        if self.host_sums:
            self.results.put(i, payload)
        else:
            self.outbox.post(payload, 0, Tag.UP_PAYLOAD, "model")
        c.jobs += 1
        c.start = None
        self.jobs_done += 1
        self.steps_done += c.data.steps
        self._forget_versions()

    def run(self, save=None) -> int:
        """Serve until the server says stop; returns the number of jobs computed.

        ``save(round)``: the collective checkpoint write, joined when the server asks for
        a checkpoint (given whenever ``--checkpoint-dir`` is). Raises
        :class:`fdahpc.control.Diverged` after its goodbye when the server said the run diverged.
        """
        try:
            self._serve(save)
        finally:
            for store in (self.versions, self.results, self.kept):
                store.close()
        if self.versions.spilled:
            log.debug("rank %d: %d versions written to %s and %d read back", self.comm.rank, self.versions.spilled,
                      self.versions.spill_dir, self.versions.loaded)
        bye = pack_up(UpKind.BYE, jobs=self.jobs_done, steps=self.steps_done, peak_rss=peak_rss_bytes(),
                      held_peak=self.versions.peak + self.results.peak + self.kept.held_peak)
        self.comm.send_(bye, 0, Tag.UP_HEADER, "control")
        self.outbox.drain()
        if self.diverged:
            raise Diverged(f"rank {self.comm.rank}: the server reported a divergence")
        return self.jobs_done

    def _serve(self, save) -> None:
        while True:
            self._poll(block=not self.ready and self.checkpoint_at is None)
            if self.stopped:
                return
            if self.ready:
                _, i = heapq.heappop(self.ready)
                if i in self.clients and self.clients[i].start is not None:
                    self._run_job(i)
            elif self.checkpoint_at is not None:  # every job done and sent: quiescent
                self.comm.send_(pack_up(UpKind.READY), 0, Tag.UP_HEADER, "control")
                if save is None:
                    raise RuntimeError("the server asked for a checkpoint but this host has no --checkpoint-dir")
                save(self.checkpoint_at)
                self.checkpoint_at = None

    # Checkpoints ------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The clients' state between jobs (only valid once quiescent, see :meth:`run`)."""
        busy = [i for i, c in self.clients.items() if c.start is not None]
        if busy or self.ready or len(self.versions):
            raise RuntimeError(f"host rank {self.comm.rank}: state_dict with pending jobs (clients {busy[:5]})")
        clients = {i: dict({k: getattr(c, k) for k in _CLIENT_FIELDS}, batches=c.data.batches.state_dict())
                   for i, c in self.clients.items()}
        # --aggregate hosts: the finished updates the server has not combined yet live here.
        results = {i: self.results[i] for i in self.results.keys()}
        return {"clients": clients, "jobs_done": self.jobs_done, "steps_done": self.steps_done, "results": results,
                "fedqs_updates": self.kept.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        saved = state["clients"]
        unknown = sorted(set(saved) - set(self.clients))
        if unknown:
            raise ValueError(f"checkpoint: host rank {self.comm.rank} has no client {unknown[0]}; resume with the same --clients and ranks")
        for i in [i for i in self.clients if i not in saved]:  # left in a dropout scenario
            del self.clients[i]
        for i, values in saved.items():
            c = self.clients[i]
            c.data.batches.load_state_dict(values["batches"])
            for k in _CLIENT_FIELDS:
                setattr(c, k, values[k])
            c.start = None
        self.jobs_done, self.steps_done = int(state["jobs_done"]), int(state["steps_done"])
        for i, payload in state.get("results", {}).items():
            self.results.put(int(i), payload)
        self.kept.load_state_dict(state.get("fedqs_updates", {}), self.clients)
