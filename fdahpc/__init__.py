"""fdahpc: communication-efficient distributed deep learning on MPI/HPC systems.

The package trains one PyTorch model replica per MPI rank and decides, step by step,
whether the replicas must be averaged (Federated Dynamic Averaging) or follows a fixed
schedule (Synchronous, FedAvg). Entry points: ``python -m fdahpc.train`` and
``python -m fdahpc.plot``; in your own training loop, :class:`ModelAverager` with a
communicator from :func:`make_communicator`.
"""

from .averager import ModelAverager
from .comm import make_communicator

__version__ = "0.1.0"
__all__ = ["ModelAverager", "make_communicator", "__version__"]
