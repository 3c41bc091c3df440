"""A refused name suggests the near one, and two flags that set the same thing are refused
together: one line on stderr, exit 2, nothing run."""

import pytest
import torch

from fdahpc.choices import unknown


@pytest.mark.parametrize("flags,message", [
    (["--strategy", "dilocco"], "--strategy 'dilocco': unknown; did you mean diloco? choose one of synchronous,"),
    (["--optimizer", "adma"], "--optimizer 'adma': unknown; did you mean adam?"),
    (["--lr-schedule", "cosin"], "--lr-schedule 'cosin': unknown; did you mean cosine?"),
    (["--strategy", "zzz"], "--strategy 'zzz': unknown; choose one of synchronous,"),
    (["--strategy", "fedavg", "--tau", "5", "--local-epochs", "1"],
     "--tau and --local-epochs: both set a local job's length, in steps or in epochs; give one"),
])
def test_refusals_are_one_line_with_the_near_name(capsys, flags, message):
    from fdahpc.train import main

    assert main(["--dataset", "mnist5k", *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_the_suggestion_is_only_given_when_a_choice_is_near():
    near = str(unknown("--x", "fedavgg", ["fedavg", "fedavgm"]))
    assert near.startswith("--x 'fedavgg': unknown; did you mean fedavg?")
    assert "did you mean" not in str(unknown("--x", "q", ["fedavg", "diloco"]))


def test_the_averager_refuses_both_lengths_too():
    from fdahpc import ModelAverager
    from fdahpc.comm import LocalCommunicator

    with pytest.raises(ValueError, match="--tau and --local-epochs: both set"):
        ModelAverager(torch.nn.Linear(2, 2), LocalCommunicator(), "fedavg", tau=5, local_epochs=1.0)
