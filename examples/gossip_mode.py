"""A third mode in one file: gossip averaging (``--mode gossip``), an example of extending
fdahpc with a mode of your own.

Every rank trains its own replica of the model on its share of the data; every
``--gossip-every`` local steps each rank replaces its model by the mean of its own and its
right neighbour's (rank r + 1, cyclically), with no global average. With two ranks this is
FedAvg with ``--tau`` equal to ``--gossip-every``, which ``tests/test_extension_examples.py``
checks. Registered with one line before the command line is read::

    fdahpc.run.MODES["gossip"] = "gossip_mode"

The mode reuses the run skeleton (setup, run file, checkpoint, exit codes) and the
building blocks of the synchronous mode: the partition, the model, local steps, the
evaluator of the averaged model. For brevity a rank gathers every model and keeps its
neighbour's: a real gossip step would send to one peer only.
"""

from __future__ import annotations

import dataclasses

import torch

from fdahpc.data import partition
from fdahpc.evaluate import Evaluator, plain_mean
from fdahpc.options import options_from
from fdahpc.params import FlatParams
from fdahpc.run import Job, Mode, Outcome, Plan, load_data, new_model
from fdahpc.worker import BatchStream, local_steps, make_optimizer


@dataclasses.dataclass(frozen=True)
class GossipOptions:
    """The mode's own option, which becomes the flag ``--gossip-every``."""

    gossip_every: int = 10

    def __post_init__(self):
        if not (isinstance(self.gossip_every, int) and self.gossip_every >= 1):
            raise ValueError(f"--gossip-every {self.gossip_every}: must be an integer >= 1, e.g. --gossip-every 10")


class GossipMode(Mode):
    name = "gossip"
    noun = "a gossip rule"
    Options = GossipOptions  # its fields (gossip_every) are flags only this mode reads
    options = ("max_steps",)  # a built-in option it reads that the semi-async mode does not

    def strategies(self):
        return ("neighbour",)

    def defaults(self, cfg):
        return {"strategy": "neighbour"}

    def check(self, cfg):
        super().check(cfg)
        if cfg.max_steps is None:
            raise ValueError("--mode gossip: needs --max-steps N, the run's length; add it")
        return options_from(GossipOptions, cfg)  # the flag's value or the default, checked

    def layout(self, config, world_size):
        return dict(x="eval/step", accuracy="eval/accuracy", loss="eval/loss",
                    panels=[["eval/step", "local steps", 1]], events="gossip/step", bytes=["eval/comm_bytes", "cumulative"],
                    workers="?" if world_size is None else str(world_size),
                    label=f"gossip every {config.get('gossip_every')}", convergence=False)

    def build(self, plan: Plan, comm) -> "GossipJob":
        cfg = plan.cfg
        data = load_data(cfg, lambda labels: partition(labels, comm.world_size, cfg.partition, cfg.seed)[comm.rank])
        model = new_model(cfg, data)
        flat = FlatParams(model)
        optimizer = make_optimizer(cfg.optimizer or "sgd", cfg.lr or 0.05, model.parameters(), cfg.weight_decay)
        evaluator = Evaluator(comm, new_model(cfg, data), data.x_test, data.y_test)
        batches = BatchStream(data.x_train, data.y_train, cfg.batch_size, cfg.seed, comm.rank)
        return GossipJob(cfg, comm, model, flat, optimizer, evaluator, batches, plan.options.gossip_every)


MODE = GossipMode()


@dataclasses.dataclass
class GossipJob(Job):
    cfg: object
    comm: object
    model: torch.nn.Module
    flat: FlatParams
    optimizer: torch.optim.Optimizer
    evaluator: Evaluator
    batches: BatchStream
    every: int
    step: int = 0

    @property
    def position(self):
        return self.step

    def fresh(self):
        self.comm.bcast_(self.flat.w, "control")  # one initial model everywhere

    def state_dict(self):
        return {"w": self.flat.w.clone(), "optimizer": self.optimizer.state_dict(), "batches": self.batches.state_dict(),
                "step": self.step}

    def load_state_dict(self, state):
        self.flat.w.copy_(state["w"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.batches.load_state_dict(state["batches"])
        self.step = state["step"]

    def final_model(self):
        return self.flat.w.numpy()

    def gossip(self):
        """Mean with the right neighbour's model."""
        models = self.comm.allgather(self.flat.w.numpy(), "model")
        right = models[(self.comm.rank + 1) % self.comm.world_size]
        self.flat.w.copy_(torch.from_numpy((models[self.comm.rank] + right) / 2))

    def loop(self, session) -> Outcome:
        run, cfg = session.run_file, self.cfg
        gossips = 0
        self.model.train()
        while self.step < cfg.max_steps:
            self.step += 1
            local_steps(self.model, self.batches, 1, self.optimizer.step, self.optimizer.zero_grad)
            if self.step % self.every == 0:
                self.gossip()
                gossips += 1
                run.append("gossip/step", self.step)
        accuracy, loss = self.evaluator.evaluate(self.model, plain_mean(self.comm, self.flat.w))
        for name, value in (("eval/step", self.step), ("eval/accuracy", accuracy), ("eval/loss", loss),
                            ("eval/comm_bytes", self.comm.bytes_sent["model"])):
            run.append(name, value)
        return Outcome(dict(steps=self.step, gossips=gossips, final_accuracy=accuracy, final_loss=loss), self.step)
