"""Non-IID partitions of in-memory data with flwr-datasets' own partitioners.

flwr-datasets partitions a Hugging Face ``datasets.Dataset``; ``Dataset.from_dict`` wraps
in-memory labels (no download), so its ``DirichletPartitioner`` (label skew: each node's
class mix drawn from Dirichlet(alpha)) applies to any numpy data set.
"""
from __future__ import annotations

from typing import List

import numpy as np

from ..errors import ArgumentError
from ._flwr import require


def dirichlet_partitions(labels, num_partitions: int, *, alpha: float = 0.5, seed: int = 42,
                         min_partition_size: int = 10) -> List[np.ndarray]:
    """Index arrays of ``num_partitions`` label-skewed partitions of ``labels`` (1-D ints),
    drawn by flwr-datasets' ``DirichletPartitioner(alpha=alpha, seed=seed)``; every
    partition has at least ``min_partition_size`` examples (it redraws until then)."""
    require("flwr-datasets", "rlxjax.flower.dirichlet_partitions")
    from datasets import Dataset
    from flwr_datasets.partitioner import DirichletPartitioner

    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise ArgumentError(f"labels must be a 1-D int array, got {labels.dtype}"
                            f"{list(labels.shape)}")
    part = DirichletPartitioner(num_partitions=num_partitions, partition_by="label",
                                alpha=alpha, seed=seed, min_partition_size=min_partition_size,
                                self_balancing=False)
    part.dataset = Dataset.from_dict({"label": labels.tolist(),
                                      "index": np.arange(len(labels)).tolist()})
    return [np.asarray(part.load_partition(i)["index"], np.int64)
            for i in range(num_partitions)]
