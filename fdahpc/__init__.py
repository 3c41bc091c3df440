"""fdahpc: communication-efficient distributed deep learning on MPI/HPC systems.

The package trains one PyTorch model replica per MPI rank and decides, step by step,
whether the replicas must be averaged (Federated Dynamic Averaging) or follows a fixed
schedule (Synchronous, FedAvg). Entry points: ``python -m fdahpc.train`` and
``python -m fdahpc.plot``; in your own training loop, :class:`ModelAverager` with a
communicator from :func:`make_communicator`.
"""

__version__ = "0.1.0"
__all__ = ["ModelAverager", "make_communicator", "__version__"]

# Lazy, so that importing a light module (``fdahpc.config``, ``fdahpc.options``) does not
# import torch, MPI or the communicators.
_LAZY = {"ModelAverager": ".averager", "make_communicator": ".comm"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
