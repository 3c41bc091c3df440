"""Datasets and partitioners.

`load_dataset` reads one dataset into memory, keeping only the training rows a rank
needs; `partition` decides those rows, identically on every rank, from a spec string
such as ``iid``, ``sorted:50``, ``dirichlet:0.5`` or ``mix:5*iid+5*classes:2``. A
user's own dataset is a name ``module.path:function`` (docs/own-model.md).
"""

from .partition import PARTITION_KINDS, PartitionSpec, parse_partition, partition
from .readers import DATASETS, FASHION_MNIST_DIR, TEXT_DATASETS, Dataset, check_dataset, load_dataset

__all__ = ["DATASETS", "FASHION_MNIST_DIR", "PARTITION_KINDS", "Dataset", "PartitionSpec", "TEXT_DATASETS",
           "check_dataset",
           "load_dataset", "parse_partition", "partition"]
