"""A user's own task for fdahpc, with no change to the package (docs/own-model.md).

    cd examples
    mpiexec -n 3 python -m fdahpc.train --mode semiasync --strategy fedqs-avg \
        --model own_task:net --dataset own_task:data --clients 20 --buffer 5 --rounds 60

``data`` returns ``(x_train, y_train, x_test, y_test)``: six classes of points in 16
dimensions, each class a Gaussian cloud around its own centre, drawn from a fixed seed so
every rank gets the same set. ``net`` returns a small MLP whose output is one logit per
class; fdahpc passes it the dataset's ``input_shape`` (here ``(16,)``) and ``num_classes``
(here 6) because it names them as parameters.
"""

import numpy as np
import torch
from torch import nn

FEATURES, CLASSES = 16, 6


def data(n_train: int = 3000, n_test: int = 600):
    rng = np.random.default_rng(1234)
    centres = rng.normal(0.0, 1.0, size=(CLASSES, FEATURES))

    def draw(n):
        y = rng.integers(0, CLASSES, size=n)
        x = centres[y] + rng.normal(0.0, 1.0, size=(n, FEATURES))
        return x.astype(np.float32), y

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return x_train, y_train, torch.from_numpy(x_test), torch.from_numpy(y_test)  # arrays or tensors, as you like


def net(input_shape, num_classes):
    (features,) = input_shape
    return nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, num_classes))
