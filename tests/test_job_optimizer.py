"""A semi-asynchronous client's optimizer (:class:`fdahpc.worker.JobSGD`) against the obvious
reference, ``torch.optim.SGD`` itself: the same parameters bit for bit, and no
``torch._dynamo`` import (the reason it exists)."""

import numpy as np
import pytest
import torch

from conftest import run_python
from fdahpc.models import build_model
from fdahpc.worker import BatchStream, JobSGD, local_steps, make_job_optimizer, make_optimizer


def _train(name: str, weight_decay: float, job: bool, steps: int = 7) -> list[torch.Tensor]:
    torch.manual_seed(3)
    model = build_model("lenet5", 1, 28, 10)
    frozen = next(model.parameters())
    frozen.requires_grad_(False)  # a parameter without a gradient: both must leave it alone
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 100)
    batches = BatchStream(x, y, 16, 5, 1)
    make = make_job_optimizer if job else make_optimizer
    opt = make(name, 0.05, model.parameters(), weight_decay)
    local_steps(model, batches, steps, opt.step, opt.zero_grad)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name", ["sgd", "momentum", "nesterov"])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-3])
def test_job_sgd_is_torch_sgd_bit_for_bit(name, weight_decay):
    reference = _train(name, weight_decay, job=False)
    ours = _train(name, weight_decay, job=True)
    start = _train(name, weight_decay, job=True, steps=0)
    assert all(torch.equal(a, b) for a, b in zip(reference, ours))
    assert torch.equal(ours[0], start[0]) and not torch.equal(ours[-1], start[-1])  # frozen kept, the rest trained


def test_other_optimizers_stay_torch_classes():
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert isinstance(make_job_optimizer("sgd", 0.1, params, 0.0), JobSGD)
    assert isinstance(make_job_optimizer("adam", 0.1, params, 0.0), torch.optim.Adam)
    with pytest.raises(ValueError, match="--optimizer 'rmsprop': unknown"):
        make_job_optimizer("rmsprop", 0.1, params, 0.0)


def test_a_job_with_job_sgd_does_not_import_torch_dynamo():
    code = ("import sys, torch\n"
            "from fdahpc.models import build_model\n"
            "from fdahpc.worker import make_job_optimizer\n"
            "m = build_model('lenet5', 1, 28, 10)\n"
            "opt = make_job_optimizer('momentum', 0.1, m.parameters(), 0.0)\n"
            "for _ in range(2):\n"
            "    opt.zero_grad(); m(torch.ones(4, 1, 28, 28)).sum().backward(); opt.step()\n"
            "print('torch._dynamo' in sys.modules)\n")
    proc = run_python(["-c", code], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"
