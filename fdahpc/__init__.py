"""fdahpc: communication-efficient distributed deep learning on MPI/HPC systems.

The package trains one PyTorch model replica per MPI rank and decides, step by step,
whether the replicas must be averaged (Federated Dynamic Averaging) or follows a fixed
schedule (Synchronous, FedAvg). Entry points: ``python -m fdahpc.train`` and
``python -m fdahpc.plot``.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
